//! Issue 17, step 1: several platforms in one process. One bridge with `service.platforms =
//! ["slack", "discord"]` serves the fake Slack (Socket Mode) and the fake Discord (REST + gateway)
//! at once, over one store and one daemon (the built-in shell agent): a mention on each runs and its
//! result goes back to the platform it came from, never the other; `/readyz` lists each platform
//! with its own connection state (a platform that is down is named there: `channel::several`'s
//! unit tests).

use std::time::Duration;

use chat_bridge::startup::Application;
use chat_bridge_tests::bridge::config;
use chat_bridge_tests::fake_discord::{self, BOT, CHANNEL, FakeDiscord};
use chat_bridge_tests::fake_slack::{FakeSlack, event_envelope};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

async fn readyz(base: &str) -> Value {
    reqwest::get(format!("{base}/readyz"))
        .await
        .expect("readyz answers")
        .json()
        .await
        .expect("json")
}

fn platforms(body: &Value) -> Vec<(String, bool)> {
    body["platforms"]
        .as_array()
        .expect("a platforms list")
        .iter()
        .map(|p| {
            (
                p["platform"].as_str().unwrap_or("").to_owned(),
                p["connected"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue17_slack_and_discord_in_one_process_each_answered_on_its_own_platform() {
    chat_bridge_tests::init_tracing();
    let slack = FakeSlack::start().await;
    let discord = FakeDiscord::start(300).await;
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(
        &format!("sqlite://{}", dir.path().join("both.db").display()),
        dir.path(),
    );
    cfg.service.platforms = vec!["slack".into(), "discord".into()];
    cfg.slack_mut().bot_token = Some("xoxb-test".into());
    cfg.slack_mut().app_token = Some("xapp-1-test".into());
    cfg.slack_mut().api_base_url = slack.base_url.clone();
    cfg.discord_mut().token = Some(fake_discord::TOKEN.into());
    cfg.discord_mut().api_base_url = discord.base_url.clone();
    cfg.access.open = true;
    cfg.http.listen = Some("127.0.0.1:0".into());
    let stop = CancellationToken::new();
    let app = Application::build(&cfg, stop.clone())
        .await
        .expect("build")
        .expect("active");
    let base = format!("http://{}", app.bridge().http_addr.expect("http"));
    let run = tokio::spawn(app.run_until_stopped());
    discord
        .wait_for("the gateway session (IDENTIFY)", |f| {
            !f.frames_op(2).is_empty()
        })
        .await;
    slack
        .wait_for("the Socket Mode connection", |f| f.sockets() > 0)
        .await;

    slack.push(event_envelope(
        "env-1",
        "Ev1",
        0,
        json!({"type": "app_mention", "user": "U1", "channel": "C1", "ts": "1700.000100",
               "text": "<@UBOT> echo from-slack", "event_ts": "1700.000100"}),
    ));
    discord.dispatch(
        "MESSAGE_CREATE",
        fake_discord::person_message(
            "1001",
            CHANNEL,
            "501",
            &format!("<@{BOT}> echo from-discord"),
            true,
        ),
    );
    slack
        .wait_for("Slack's result", |f| {
            f.calls_of("chat.update").iter().any(|c| {
                c.body["text"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("✅ echo from-slack"))
            })
        })
        .await;
    let discord_result = |f: &FakeDiscord| {
        f.messages_in("1001").into_iter().any(|m| {
            m["embeds"][0]["title"]
                .as_str()
                .is_some_and(|t| t.starts_with("✅ echo from-discord"))
        })
    };
    discord.wait_for("Discord's result", discord_result).await;
    // Each result went to its own platform only.
    let slack_text = format!("{:?}", slack.calls());
    assert!(!slack_text.contains("from-discord"), "{slack_text}");
    let discord_text = format!("{:?}", discord.requests());
    assert!(!discord_text.contains("from-slack"), "{discord_text}");

    let body = readyz(&base).await;
    assert_eq!(body["ready"], true, "{body}");
    assert_eq!(
        platforms(&body),
        [("slack".to_owned(), true), ("discord".to_owned(), true)],
        "{body}"
    );

    // Every metric carries its platform: each delivered through its own channel.
    let metrics = chat_bridge::metrics::handle().expect("recorder").render();
    for platform in ["slack", "discord"] {
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("chatbridge_chat_api_seconds_count")
                    && l.contains(&format!("platform=\"{platform}\""))
                    && !l.trim_end().ends_with(" 0")),
            "{platform}'s chat API calls are counted under its label:\n{metrics}"
        );
    }

    stop.cancel();
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("stops in time")
        .expect("join")
        .expect("clean shutdown");
}
