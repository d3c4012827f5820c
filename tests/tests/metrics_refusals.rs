//! A1 refusals show on `/metrics`: a mention from someone not on `slack.allowed_users` runs nothing
//! and is not answered (strangers learn nothing), but on-call sees it in
//! `chatbridge_access_refusals_total{platform="slack"}` (ChatBridge dashboards). One test in its
//! own process, so the process-wide recorder's counts are this test's alone.

use chat_bridge_tests::fake_slack::{FakeSlack, event_envelope};
use serde_json::json;

const SERIES: &str = "chatbridge_access_refusals_total{platform=\"slack\"}";

fn count(text: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(SERIES).map(str::trim))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn a1_a_strangers_mention_is_ignored_but_counted_as_a_refusal() {
    chat_bridge::metrics::register("slack");
    let metrics = chat_bridge::metrics::handle().expect("recorder");
    let fake = FakeSlack::start().await;
    let dir = tempfile::tempdir().expect("tmp");
    let pwned = dir.path().join("pwned");
    let (stop, task) = chat_bridge_tests::fake_slack::run_bridge(&fake, dir.path(), |cfg| {
        cfg.access.open = false;
        cfg.slack_mut().allowed_users = vec!["U1".into()];
    })
    .await;
    let before = count(&metrics.render());
    fake.push(event_envelope(
        "env-1",
        "Ev1",
        0,
        json!({"type": "app_mention", "user": "U2", "channel": "C1", "ts": "1700.1",
               "text": format!("<@UBOT> touch {}", pwned.display()), "event_ts": "1700.1"}),
    ));
    fake.wait_for("the envelope acknowledged", |f| {
        f.acks().iter().any(|a| a == "env-1")
    })
    .await;
    let after = count(&metrics.render());
    stop.cancel();
    task.await.expect("join").expect("clean stop");
    assert_eq!(after - before, 1.0, "one refusal counted");
    assert!(fake.posted().is_empty(), "a stranger gets no answer");
    assert!(!pwned.exists(), "nothing of the stranger's ran");
}
