//! The one start path on a real platform: a fatal error once the platform has started — here Slack's
//! Events API listener cannot bind `slack.listen`, after `auth.test` succeeded and the bridge is active —
//! ends the run at once with that error, whatever else is running (issue 24 item 4).

use std::time::Duration;

use chat_bridge_tests::bridge::SLACK_SIGNING_SECRET;
use chat_bridge_tests::fake_slack::{FakeSlack, run_bridge};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slack_listener_that_cannot_bind_ends_the_run_at_once_with_its_error() {
    let fake = FakeSlack::start().await;
    let dir = tempfile::tempdir().expect("tmp");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let listen = format!("127.0.0.1:{}", taken.local_addr().expect("addr").port());
    let (stop, task) = run_bridge(&fake, dir.path(), |cfg| {
        cfg.slack_mut().app_token = None;
        cfg.slack_mut().mode = chat_bridge::config::SlackMode::Http;
        cfg.slack_mut().listen.clone_from(&listen);
        cfg.slack_mut().signing_secret = Some(SLACK_SIGNING_SECRET.into());
        // Nothing is waited for beyond what is running: not this drain bound.
        cfg.service.drain_timeout = Duration::from_secs(60);
    })
    .await;
    let started = tokio::time::Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the run ends without a stop")
        .expect("join")
        .expect_err("the listener's error");
    let text = format!("{err:#}");
    assert!(
        text.contains(&format!("listening on {listen} (slack.listen)")),
        "names the setting at fault: {text}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "at once: {:?}",
        started.elapsed()
    );
    assert!(!stop.is_cancelled(), "nobody asked it to stop");
    drop(taken);
}
