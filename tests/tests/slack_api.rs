//! The Slack Web API client against a fake Slack over real HTTP: thread replies with the bot token,
//! edits, reactions, and Slack's failures mapped to what the outbox does next.

use std::time::Duration;

use chat_bridge::channel::slack::api::{SlackError, SlackToken, WebApi};
use chat_bridge::channel::slack::blocks::render;
use chat_bridge::channel::{DeliveryError, Message, Tone};
use chat_bridge_tests::fake_slack::{FakeSlack, Reply};

fn api(fake: &FakeSlack) -> WebApi {
    WebApi::new(&fake.base_url, SlackToken::new("xoxb-test-token")).expect("client")
}

#[tokio::test]
async fn slack_posts_thread_replies_and_edits_them_with_the_bot_token() {
    let fake = FakeSlack::start().await;
    let api = api(&fake);
    let me = api.auth_test().await.expect("auth.test");
    assert_eq!(me.user_id, "UBOT");
    let msg = Message::text(Tone::Running, "⏳ make deploy");
    let ts = api
        .post_message("C1", "1700000000.000001", &render(&msg), None)
        .await
        .expect("post");
    let done = Message::text(Tone::Success, "✅ make deploy — 2s");
    api.update("C1", &ts, &render(&done)).await.expect("update");
    api.reactions_add("C1", "1700000000.000001", "eyes")
        .await
        .expect("react");
    let calls = fake.calls();
    let methods: Vec<&str> = calls.iter().map(|c| c.method.as_str()).collect();
    assert_eq!(
        methods,
        [
            "auth.test",
            "chat.postMessage",
            "chat.update",
            "reactions.add"
        ]
    );
    assert!(calls.iter().all(|c| c.auth == "Bearer xoxb-test-token"));
    assert_eq!(calls[1].body["thread_ts"], "1700000000.000001");
    assert_eq!(calls[1].body["channel"], "C1");
    assert_eq!(calls[2].body["ts"], ts);
    assert_eq!(calls[2].body["attachments"][0]["color"], "good");
}

#[tokio::test]
async fn slack_429_is_rate_limited_with_its_retry_after() {
    let fake = FakeSlack::start().await;
    fake.script("chat.postMessage", Reply::RateLimited(7));
    let err = api(&fake)
        .post_message(
            "C1",
            "1.1",
            &render(&Message::text(Tone::Neutral, "hi")),
            None,
        )
        .await
        .expect_err("429");
    assert!(
        matches!(err, SlackError::RateLimited { retry_after, .. } if retry_after == Duration::from_secs(7)),
        "{err:?}"
    );
    assert!(
        matches!(err.into_delivery(), DeliveryError::RateLimited(d) if d == Duration::from_secs(7))
    );
}

#[tokio::test]
async fn slack_ok_false_errors_are_permanent_or_temporary_by_code() {
    let fake = FakeSlack::start().await;
    let api = api(&fake);
    let msg = render(&Message::text(Tone::Neutral, "hi"));
    fake.script("chat.postMessage", Reply::Error("channel_not_found"));
    fake.script("chat.postMessage", Reply::Error("internal_error"));
    let gone = api
        .post_message("C404", "1.1", &msg, None)
        .await
        .expect_err("gone");
    assert!(
        matches!(gone.into_delivery(), DeliveryError::Permanent(m) if m.contains("channel_not_found"))
    );
    let flaky = api
        .post_message("C1", "1.1", &msg, None)
        .await
        .expect_err("flaky");
    assert!(matches!(flaky.into_delivery(), DeliveryError::Temporary(_)));
    fake.script("reactions.add", Reply::Error("already_reacted"));
    api.reactions_add("C1", "1.1", "eyes")
        .await
        .expect("already there is fine");
}

#[tokio::test]
async fn slack_unreachable_api_is_temporary_and_tokens_never_print() {
    let api = WebApi::new(
        "http://127.0.0.1:1/api",
        SlackToken::new("xoxb-secret-value"),
    )
    .expect("client");
    let err = api.auth_test().await.expect_err("unreachable");
    assert!(matches!(err, SlackError::Transport { .. }));
    assert!(!format!("{err} {err:?} {api:?}").contains("xoxb-secret-value"));
}
