//! Helpers for driving the bridge in end-to-end tests.

use std::time::Duration;

use chat_bridge::app::Application;
use chat_bridge::config::Config;

/// A configuration for end-to-end tests: the built-in shell agent with 200 ms heartbeats and no
/// default timeout (so heartbeats, not a tool exemption, keep turns alive), a 500 ms idle limit.
#[must_use]
pub fn config(url: &str, cwd: &std::path::Path) -> Config {
    let mut cfg = Config::default();
    cfg.database.url = url.to_owned();
    cfg.daemon.cwd = Some(cwd.to_owned());
    cfg.shell_agent.heartbeat_interval = Duration::from_millis(200);
    cfg.shell_agent.default_timeout = Duration::ZERO;
    cfg.liveness.idle = Duration::from_millis(500);
    cfg.liveness.progress_after = Duration::from_secs(60);
    cfg.service.drain_timeout = Duration::from_secs(5);
    cfg
}

/// The signing secret the Slack HTTP-mode tests sign with (S1: at least 16 bytes).
pub const SLACK_SIGNING_SECRET: &str = "test-signing-secret-0123456789ab";

/// Waits until no turn is open and every chat action was delivered.
///
/// # Panics
/// After 60 s / 30 s.
pub async fn settle(app: &Application) {
    for core in app.cores() {
        if tokio::time::timeout(Duration::from_secs(60), core.wait_idle())
            .await
            .is_err()
        {
            panic!(
                "the turns end: {} still open after 60 s ({} progress writes pending, {} conversations in memory)",
                core.busy(),
                core.progress_writes_pending(),
                core.conversations_in_memory()
            );
        }
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !chat_bridge::outbox_worker::drained(&app.store)
        .await
        .expect("store")
    {
        assert!(tokio::time::Instant::now() < deadline, "outbox drained");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    while app
        .cores()
        .iter()
        .any(|core| core.progress_writes_pending() > 0)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "heartbeat counts written"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Stops a bridge started with `fake_slack::run_bridge` (or any `startup::run` task) and checks it
/// ends cleanly within 30 s.
///
/// # Panics
/// When it does not stop in time, or stops with an error.
pub async fn stop_cleanly(
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("stops")
        .expect("join")
        .expect("clean shutdown");
}
