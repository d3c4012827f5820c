//! The mark on the person's message says how the turn went (issue 15 item 3), on the fake Slack and
//! the fake Discord with the real shell-agent: ✅ only when every tool call completed, ❌ when one
//! failed, ⏱ when one timed out. The core names the outcome; each adapter picks its emoji.

use std::time::Duration;

use chat_bridge_tests::fake_discord::{BOT, CHANNEL, FakeDiscord, TOKEN, person_message};
use chat_bridge_tests::fake_slack::{FakeSlack, event_envelope};
use serde_json::json;

fn mention(ts: &str, text: &str) -> serde_json::Value {
    json!({"type": "app_mention", "user": "U1", "channel": "C1", "ts": ts, "text": format!("<@UBOT> {text}"), "event_ts": ts})
}

/// The reactions `method` (`reactions.add`, `reactions.remove`) put on or took off the message `ts`,
/// in order.
fn reactions(f: &FakeSlack, method: &str, ts: &str) -> Vec<String> {
    f.calls_of(method)
        .into_iter()
        .filter(|c| c.body["timestamp"] == ts)
        .map(|c| c.body["name"].as_str().unwrap_or("").to_owned())
        .collect()
}

fn added(f: &FakeSlack, ts: &str) -> Vec<String> {
    reactions(f, "reactions.add", ts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_r3_the_outcome_mark_is_done_only_when_every_tool_completed() {
    let fake = FakeSlack::start().await;
    let dir = tempfile::tempdir().expect("tmp");
    let (stop, task) = chat_bridge_tests::fake_slack::run_bridge(&fake, dir.path(), |cfg| {
        cfg.shell_agent.default_timeout = Duration::from_millis(800);
    })
    .await;
    let threads = [
        ("1700.000100", "echo fine", "white_check_mark"),
        ("1700.000200", "echo nope; exit 3", "x"),
        ("1700.000300", "sleep 30", "stopwatch"),
    ];
    for (n, (ts, command, _)) in threads.iter().enumerate() {
        fake.push(event_envelope(
            &format!("env-{n}"),
            &format!("Ev{n}"),
            0,
            mention(ts, command),
        ));
    }
    fake.wait_for("every outcome mark", |f| {
        threads.iter().all(|(ts, _, _)| added(f, ts).len() == 2)
    })
    .await;
    for (ts, command, mark) in threads {
        assert_eq!(added(&fake, ts), ["eyes", mark], "{command}");
    }
    let removed = fake.calls_of("reactions.remove");
    assert_eq!(removed.len(), 3, "👀 taken away from each: {removed:#?}");
    assert!(removed.iter().all(|c| c.body["name"] == "eyes"));
    chat_bridge_tests::bridge::stop_cleanly(stop, task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_r3_discord_shows_the_same_outcomes_with_its_own_emoji() {
    chat_bridge_tests::init_tracing();
    let fake = FakeDiscord::start(200).await;
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = chat_bridge_tests::bridge::config(
        &format!("sqlite://{}", dir.path().join("discord.db").display()),
        dir.path(),
    );
    cfg.discord_mut().token = Some(TOKEN.into());
    cfg.discord_mut().api_base_url = fake.base_url.clone();
    cfg.access.open = true;
    cfg.shell_agent.default_timeout = Duration::from_millis(800);
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn({
        let stop = stop.clone();
        async move { chat_bridge::startup::run(&cfg, stop).await }
    });
    fake.wait_for("the gateway session (IDENTIFY)", |f| {
        !f.frames_op(2).is_empty()
    })
    .await;
    let threads = [
        ("2001", "echo fine", "✅"),
        ("2002", "echo nope; exit 3", "❌"),
        ("2003", "sleep 30", "⏱️"),
    ];
    for (id, command, _) in threads {
        fake.dispatch(
            "MESSAGE_CREATE",
            person_message(id, CHANNEL, "501", &format!("<@{BOT}> {command}"), true),
        );
    }
    let added = |f: &FakeDiscord, id: &str| {
        f.requests_to(&format!("PUT /channels/{CHANNEL}/messages/{id}/reactions/"))
            .into_iter()
            .map(|r| r.path)
            .collect::<Vec<_>>()
    };
    fake.wait_for("every outcome mark", |f| {
        threads.iter().all(|(id, _, _)| added(f, id).len() == 2)
    })
    .await;
    for (id, command, emoji) in threads {
        let paths = added(&fake, id);
        assert!(paths[0].contains("/reactions/👀"), "{command}: {paths:?}");
        assert!(
            paths[1].contains(&format!("/reactions/{emoji}")),
            "{command}: {paths:?}"
        );
    }
    chat_bridge_tests::bridge::stop_cleanly(stop, task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_a_message_the_full_queue_refuses_loses_its_eyes_and_is_marked_failed() {
    // Five messages wait behind the running turn; the sixth is refused. Its 👀 said "taken", so the
    // message itself must then say it will not run (the notice alone is easy to miss in a busy
    // thread), as a turn that could not run does: 👀 taken away, ❌ added.
    let fake = FakeSlack::start().await;
    let dir = tempfile::tempdir().expect("tmp");
    let (stop, task) = chat_bridge_tests::fake_slack::run_bridge(&fake, dir.path(), |_| {}).await;
    let root = "1700.000100";
    fake.push(event_envelope("env-0", "Ev0", 0, mention(root, "sleep 3")));
    fake.wait_for("the running turn", |f| added(f, root) == ["eyes"])
        .await;
    let replies: Vec<String> = (1..=6).map(|n| format!("1700.00{n}000")).collect();
    for (n, ts) in replies.iter().enumerate() {
        let reply = json!({"type": "message", "user": "U1", "channel": "C1", "ts": ts,
            "thread_ts": root, "text": format!("echo queued-{}", n + 1)});
        fake.push(event_envelope(
            &format!("env-{}", n + 1),
            &format!("Ev{}", n + 1),
            0,
            reply,
        ));
    }
    let refused = &replies[5];
    fake.wait_for("the refused message's mark", |f| {
        added(f, refused).len() == 2
    })
    .await;
    assert_eq!(added(&fake, refused), ["eyes", "x"]);
    assert_eq!(reactions(&fake, "reactions.remove", refused), ["eyes"]);
    assert!(
        fake.calls_of("chat.postMessage")
            .iter()
            .any(|c| c.body.to_string().contains("was not queued")),
        "the notice says so too"
    );
    fake.wait_for("the queued ones ran", |f| {
        replies[..5].iter().all(|ts| added(f, ts).len() == 2)
    })
    .await;
    for ts in &replies[..5] {
        assert_eq!(added(&fake, ts), ["eyes", "white_check_mark"], "{ts}");
    }
    chat_bridge_tests::bridge::stop_cleanly(stop, task).await;
}
