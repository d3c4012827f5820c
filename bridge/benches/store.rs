//! P3: tool results persisted with their outbox rows, on local PostgreSQL (`DATABASE_URL`).
//!
//! Three ways, same run: the baseline (the tool-call update alone, autocommit), one transaction per
//! result with its outbox row (what the bridge does), and 50 results per transaction. Target: ≥ 2,000
//! results/s with their outbox rows. `cargo bench -p chat-bridge --bench store` (N = 5,000 per mode);
//! under `cargo test` it runs a 50-result smoke pass.

use std::time::Instant;

use chat_bridge::store::conversations::{self, Key};
use chat_bridge::store::outbox::{self, Kind, NewAction};
use chat_bridge::store::{Store, now_ms, tool_calls};

const OUTPUT: &str = "Compiling chat-bridge v0.1.0\nFinished `dev` profile [unoptimized + debuginfo] target(s) in 2.41s\n";

async fn setup(url: &str) -> (Store, String, String) {
    let admin = Store::connect(url).await.expect("DATABASE_URL reachable");
    let name = format!("cb_bench_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(admin.statements())
        .await
        .expect("create db");
    admin.close().await;
    let (base, _) = url.rsplit_once('/').expect("url with a database");
    let store = Store::open(&format!("{base}/{name}")).await.expect("open");
    let mut c = store.conn().await.expect("conn");
    let key = Key {
        platform: "slack",
        workspace: "T",
        channel: "C",
        thread: "1",
    };
    let conv = conversations::find_or_create(&mut c, &key, "U", "bench", now_ms())
        .await
        .expect("conv")
        .0
        .id;
    (store, conv, name)
}

async fn start_calls(store: &Store, conv: &str, prefix: &str, n: usize) {
    let mut tx = store.begin().await.expect("tx");
    for i in 0..n {
        tool_calls::start(
            tx.conn(),
            conv,
            None,
            &format!("{prefix}{i}"),
            "cargo build",
            Some("execute"),
            now_ms(),
        )
        .await
        .expect("start");
    }
    tx.commit().await.expect("commit");
}

fn finish() -> tool_calls::Finish<'static> {
    tool_calls::Finish {
        outcome: "completed",
        summary: Some("Command finished in 2.4s"),
        output: OUTPUT,
        exit_code: Some(0),
        signal: None,
    }
}

/// One tool result and its outbox row, on `c` (inside the caller's transaction).
async fn persist(c: &mut sqlx::AnyConnection, conv: &str, call: &str, action: &str) {
    tool_calls::finish(c, conv, call, &finish(), now_ms())
        .await
        .expect("finish");
    let a = NewAction {
        conversation_id: conv,
        kind: Kind::Post,
        coalesce_key: None,
        action,
    };
    outbox::enqueue(c, &a, now_ms()).await.expect("enqueue");
}

async fn run(url: &str, n: usize) -> Vec<(&'static str, f64)> {
    let (store, conv, db) = setup(url).await;
    let action = serde_json::json!({"edit": {"key": "tool:x", "text": OUTPUT}}).to_string();
    let mut results = Vec::new();

    start_calls(&store, &conv, "base", n).await;
    let t = Instant::now();
    for i in 0..n {
        let mut c = store.conn().await.expect("conn");
        tool_calls::finish(&mut c, &conv, &format!("base{i}"), &finish(), now_ms())
            .await
            .expect("finish");
    }
    results.push((
        "baseline: result only, autocommit",
        n as f64 / t.elapsed().as_secs_f64(),
    ));

    start_calls(&store, &conv, "one", n).await;
    let t = Instant::now();
    for i in 0..n {
        let mut tx = store.begin().await.expect("tx");
        persist(tx.conn(), &conv, &format!("one{i}"), &action).await;
        tx.commit().await.expect("commit");
    }
    results.push((
        "result + outbox row, one transaction each",
        n as f64 / t.elapsed().as_secs_f64(),
    ));

    start_calls(&store, &conv, "conc", n).await;
    let t = Instant::now();
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let (store, conv, action) = (store.clone(), conv.clone(), action.clone());
            tokio::spawn(async move {
                for i in (w..n).step_by(8) {
                    let mut tx = store.begin().await.expect("tx");
                    persist(tx.conn(), &conv, &format!("conc{i}"), &action).await;
                    tx.commit().await.expect("commit");
                }
            })
        })
        .collect();
    for w in writers {
        w.await.expect("writer");
    }
    results.push((
        "result + outbox row, one tx each, 8 writers",
        n as f64 / t.elapsed().as_secs_f64(),
    ));

    start_calls(&store, &conv, "batch", n).await;
    let t = Instant::now();
    for chunk in (0..n).collect::<Vec<_>>().chunks(50) {
        let mut tx = store.begin().await.expect("tx");
        for i in chunk {
            persist(tx.conn(), &conv, &format!("batch{i}"), &action).await;
        }
        tx.commit().await.expect("commit");
    }
    results.push((
        "result + outbox row, 50 per transaction",
        n as f64 / t.elapsed().as_secs_f64(),
    ));

    let mut c = store.conn().await.expect("conn");
    let stats = outbox::stats(&mut c, now_ms()).await.expect("stats");
    assert_eq!(
        stats.pending,
        3 * n as i64,
        "every result has its outbox row"
    );
    drop(c);
    store.close().await;
    let admin = Store::connect(url).await.expect("admin");
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {db} WITH (FORCE)"
    )))
    .execute(admin.statements())
    .await;
    admin.close().await;
    results
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let Ok(url) = std::env::var("DATABASE_URL") else {
        eprintln!("P3 needs a PostgreSQL: set DATABASE_URL (scripts/test starts a throwaway one)");
        std::process::exit(if bench { 1 } else { 0 });
    };
    let n = if bench { 5000 } else { 50 };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let results = rt.block_on(run(&url, n));
    println!(
        "P3 store throughput, N = {n} per mode ({})",
        chat_bridge::store::mask_url(&url)
    );
    for (name, rate) in results {
        println!("  {name:<45} {rate:>9.0} results/s");
    }
}
