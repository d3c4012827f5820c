//! D2, as on-call sees it: while a lock held past `lock_timeout` keeps a command's result from
//! being written, `/metrics` shows a conversation step waiting for the database and counts its
//! retries, and the log says so once; once the lock goes the step goes through — the log says that
//! too — and nothing waits. `/readyz` stays ready meanwhile (the database answers), so these are
//! the signal. In its own process: the metrics recorder is process-wide, and tracing caches per
//! call site whether anyone listens.

use std::sync::Arc;
use std::time::Duration;

use chat_bridge::app::Application;
use chat_bridge::channel::{Tone, console};
use chat_bridge_tests::bridge::{config, settle};
use chat_bridge_tests::recorder::Recorder;

/// The value of the unlabelled series `name` in a `/metrics` text.
fn value(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(name)
                .filter(|rest| rest.starts_with(' '))
                .map(str::trim)
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} missing from /metrics:\n{text}"))
}

#[test]
fn d2_a_step_waiting_on_a_lock_shows_in_the_metrics_and_the_log_until_it_went_through() {
    let log = chat_bridge_tests::logs::logged(tracing::Level::INFO, || async { run().await });
    let lines = |what: &str| {
        log.lines()
            .filter(|l| l.contains(what) && l.contains("conversation="))
            .collect::<Vec<_>>()
    };
    let first = lines("the database failed this step for the moment");
    assert_eq!(first.len(), 1, "said once, at the first failure:\n{log}");
    assert!(
        first[0].contains("WARN")
            && first[0].contains("lock timeout")
            && first[0].contains("code=55P03"),
        "{log}"
    );
    let through = lines("the step the database failed went through");
    assert_eq!(through.len(), 1, "said once it went through:\n{log}");
    assert!(
        through[0].contains("INFO") && through[0].contains("retries="),
        "{log}"
    );
}

async fn run() {
    use sqlx::Connection;
    chat_bridge::metrics::register("console");
    let metrics = chat_bridge::metrics::handle().expect("recorder");
    let (waiting, retries) = (
        "chatbridge_store_steps_waiting",
        "chatbridge_store_step_retries_total",
    );
    let before = metrics.render();
    assert_eq!(value(&before, waiting), 0.0, "registered at 0");
    assert_eq!(value(&before, retries), 0.0, "registered at 0");

    let db = chat_bridge_tests::db::TestDb::new(chat_bridge::store::Backend::Postgres).await;
    db.set_lock_timeout("100ms").await;
    let dir = tempfile::tempdir().expect("tmp");
    let rec = Arc::new(Recorder::default());
    let app = Application::build(&config(&db.url, dir.path()), rec.clone())
        .await
        .expect("build");
    app.core
        .accept(console::inbound("sleep 0.5; echo waited-once"))
        .await
        .expect("accept");
    rec.wait_for("the command's running message", |r| {
        r.posts().iter().any(|(_, m)| m.tone == Tone::Running)
    })
    .await;

    // The transcript's table held past the command's end: the result's write meets the lock
    // timeout again and again.
    let mut holder = chat_bridge_tests::db::hold_table(&db.url, "transcript").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let seen = loop {
        let now = metrics.render();
        if value(&now, waiting) >= 1.0 && value(&now, retries) >= 2.0 {
            break now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no step shown waiting while the lock is held:\n{now}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(value(&seen, waiting), 1.0, "one step waits: the result's");
    assert!(
        rec.latest()
            .iter()
            .all(|(_, m)| !m.title.contains("waited-once") || m.tone != Tone::Success),
        "no result shown while it cannot be written"
    );

    sqlx::query("COMMIT")
        .execute(&mut holder)
        .await
        .expect("let go");
    settle(&app).await;
    let after = metrics.render();
    assert_eq!(
        value(&after, waiting),
        0.0,
        "nothing waits once the lock went"
    );
    assert!(value(&after, retries) >= value(&seen, retries));
    let results = rec
        .latest()
        .iter()
        .filter(|(_, m)| m.tone == Tone::Success && m.title.contains("waited-once"))
        .count();
    assert_eq!(results, 1, "the result shown once: {:#?}", rec.calls());
    app.shutdown().await;
    holder.close().await.expect("close");
    db.cleanup().await;
}
