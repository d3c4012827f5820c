//! Q3: PostgreSQL restarted under load (the test's own throwaway cluster, never a shared server).
//! Commands are running in several conversations when the database stops; one more message arrives
//! while it is down. The bridge does not crash, `/readyz` says the store is unreachable and then
//! that it is back, and afterwards every result and every message is there exactly once — in the
//! chat and in the store.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chat_bridge::app::Application;
use chat_bridge::channel::{Inbound, InboundKind, Target};
use chat_bridge::store::{Store, history, tool_calls};
use chat_bridge_tests::bridge::{config, settle};
use chat_bridge_tests::pg_cluster::Cluster;
use chat_bridge_tests::recorder::Recorder;
use tokio_util::sync::CancellationToken;

fn message(thread: usize, text: &str) -> Inbound {
    Inbound {
        event_id: uuid::Uuid::new_v4().to_string(),
        platform: "console".into(),
        target: Target {
            workspace: "local".into(),
            channel: "console".into(),
            thread: format!("t{thread}"),
        },
        user: "tester".into(),
        message_id: None,
        opens: true,
        kind: InboundKind::Message(text.into()),
    }
}

async fn readyz(base: &str) -> (u16, serde_json::Value) {
    let r = reqwest::get(format!("{base}/readyz"))
        .await
        .expect("readyz answers");
    (r.status().as_u16(), r.json().await.unwrap_or_default())
}

async fn wait_store(base: &str, up: bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = readyz(base).await;
        if body["store"] == up && (status == 200) == up {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz never said store={up}: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q3_postgres_restarted_under_load_no_crash_readyz_false_then_true_nothing_lost() {
    daemon_client::install_crypto_provider();
    let cluster = Cluster::start();
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(&cluster.url(), dir.path());
    cfg.http.listen = Some("127.0.0.1:0".into());
    cfg.liveness.idle = Duration::from_secs(30);
    cfg.service.leader_check = Duration::from_millis(200);
    let rec = Arc::new(Recorder::default());
    let app = Application::build(&cfg, rec.clone()).await.expect("build");
    let base = format!("http://{}", app.http_addr.expect("http"));
    let stop = CancellationToken::new();
    const N: usize = 6;
    for i in 0..N {
        app.accept(message(i, &format!("sleep 1.5; echo result-{i}")), &stop)
            .await;
    }
    rec.wait_for("every tool message", |r| r.posts().len() >= N)
        .await;

    // The database goes away while the commands run and finish.
    let outage = Instant::now();
    cluster.stop();
    wait_store(&base, false).await;
    let noticed = outage.elapsed();
    // One more message arrives during the outage; it is held, not dropped.
    let app = Arc::new(app);
    let during = tokio::spawn({
        let app = app.clone();
        let stop = stop.clone();
        async move {
            app.accept(message(N, "echo during-the-outage"), &stop)
                .await
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!during.is_finished(), "the message waits for the database");
    let back = Instant::now();
    cluster.start_again();
    wait_store(&base, true).await;
    println!(
        "Q3: /readyz said the store was down {noticed:?} after the stop, up {:?} after the start; the outage lasted {:?}",
        back.elapsed(),
        outage.elapsed()
    );
    during.await.expect("join");
    settle(&app).await;
    let (status, body) = readyz(&base).await;
    assert_eq!(status, 200, "{body}");

    let latest = rec.latest();
    for i in 0..N {
        let title = format!("✅ sleep 1.5; echo result-{i}");
        assert_eq!(
            latest
                .iter()
                .filter(|(_, m)| m.title.starts_with(&title))
                .count(),
            1,
            "{title}: {latest:#?}"
        );
    }
    assert_eq!(
        latest
            .iter()
            .filter(|(_, m)| m.title.starts_with("✅ echo during-the-outage"))
            .count(),
        1,
        "{latest:#?}"
    );
    assert_eq!(
        rec.posts().len(),
        N + 1,
        "no message posted twice: {:#?}",
        rec.posts()
    );

    let store = Store::connect(&cluster.url()).await.expect("store");
    let mut c = store.conn().await.expect("conn");
    let convs = history::list(&mut c, &Default::default())
        .await
        .expect("list")
        .items;
    assert_eq!(convs.len(), N + 1);
    for conv in &convs {
        let calls = tool_calls::of_conversation(&mut c, &conv.id)
            .await
            .expect("calls");
        assert_eq!(calls.len(), 1, "one stored result per conversation");
        assert_eq!(calls[0].status, "completed");
    }
    drop(c);
    store.close().await;
    match Arc::try_unwrap(app) {
        Ok(app) => app.shutdown().await,
        Err(_) => panic!("the application is still shared"),
    }
}
