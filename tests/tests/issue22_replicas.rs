//! Issue 22 with D5: a schedule runs only on the active replica of two (real PostgreSQL, the
//! leader lease), and after the active one stops, on the replica that takes over — each run once.

use std::sync::Arc;
use std::time::Duration;

use chat_bridge::app::Application;
use chat_bridge::channel::console;
use chat_bridge::store::{Backend, history, turns};
use chat_bridge_tests::bridge::{config, settle};
use chat_bridge_tests::db::TestDb;
use chat_bridge_tests::recorder::Recorder;
use tokio_util::sync::CancellationToken;

fn ticks(r: &Recorder) -> usize {
    r.latest()
        .iter()
        .filter(|(_, m)| m.title.starts_with("✅ echo tick"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d5_a_schedule_runs_only_on_the_active_replica_of_two_and_moves_with_the_lease() {
    let db = TestDb::new(Backend::Postgres).await;
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(&db.url, dir.path());
    cfg.schedules.min_interval = Duration::from_secs(1);
    cfg.schedules.check_every = Duration::from_millis(100);
    cfg.service.leader_retry = Duration::from_millis(100);
    cfg.service.leader_check = Duration::from_millis(200);

    let (rec_a, rec_b) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
    let a = Application::build(&cfg, rec_a.clone())
        .await
        .expect("A active");
    let stop_b = CancellationToken::new();
    let b = tokio::spawn({
        let (cfg, rec_b, stop_b) = (cfg.clone(), rec_b.clone(), stop_b.clone());
        async move { Application::build_until(&cfg, rec_b, &stop_b).await }
    });

    a.core
        .accept(console::inbound("/every 1s echo tick"))
        .await
        .expect("accept");
    rec_a.wait_for("three runs on A", |r| ticks(r) >= 3).await;
    assert!(!b.is_finished(), "B still stands by");
    assert!(
        rec_b.calls().is_empty(),
        "nothing ran on the standby: {:#?}",
        rec_b.calls()
    );

    let on_a = {
        settle(&a).await;
        ticks(&rec_a)
    };
    a.shutdown().await;
    let b = tokio::time::timeout(Duration::from_secs(30), b)
        .await
        .expect("B takes over")
        .expect("join")
        .expect("build")
        .expect("B active");
    rec_b.wait_for("two runs on B", |r| ticks(r) >= 2).await;
    assert_eq!(ticks(&rec_a), on_a, "nothing more on A once it stopped");
    settle(&b).await;
    let mut c = b.store.conn().await.expect("conn");
    let conv = history::list(&mut c, &Default::default())
        .await
        .expect("list")
        .items
        .remove(0);
    let runs = turns::of_conversation(&mut c, &conv.id)
        .await
        .expect("turns");
    drop(c);
    assert_eq!(
        runs.len(),
        ticks(&rec_a) + ticks(&rec_b),
        "each run once, on one replica"
    );
    b.shutdown().await;
    stop_b.cancel();
    db.cleanup().await;
}
