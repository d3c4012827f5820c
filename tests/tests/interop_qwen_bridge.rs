//! The bridge against the real qwen-code daemon: a silent command outlives the turn's idle limit
//! without stalling (heartbeats and the stated timeout bind — L1/L2), and a timeout shows as an
//! error with its partial output (R3). Each runs on both stores: PostgreSQL writes a tool's result
//! as one statement where SQLite writes a transaction (P2), so both paths meet the real daemon.
//! Skipped — loudly — only when npm cannot install qwen.

use std::sync::Arc;
use std::time::Duration;

use chat_bridge::app::Application;
use chat_bridge::channel::{InboundKind, Tone, console};
use chat_bridge::config::Config;
use chat_bridge::store::Backend;
use chat_bridge_tests::db::TestDb;
use chat_bridge_tests::init_tracing;
use chat_bridge_tests::qwen::{QwenPeer, Unavailable};
use chat_bridge_tests::recorder::Recorder;

/// The real qwen daemon (yolo mode) and a bridge configuration for it on a fresh database of
/// `backend`; `None`, said loudly, when npm cannot install qwen.
async fn qwen_bridge_config(backend: Backend) -> Option<(QwenPeer, TestDb, Config)> {
    init_tracing();
    let peer = match QwenPeer::start() {
        Ok(p) => p,
        Err(Unavailable::NotInstallable(why)) => {
            eprintln!(
                "\n!!!!!!!! SKIPPED interop_qwen_bridge: the qwen-code daemon could not be installed from npm !!!!!!!!\n{why}\n"
            );
            return None;
        }
    };
    let db = TestDb::new(backend).await;
    let mut cfg = Config::default();
    cfg.database.url = db.url.clone();
    cfg.daemon.url = Some(peer.url.clone());
    cfg.daemon.token = Some(peer.token.clone().into());
    cfg.daemon.mode = Some("yolo".into());
    cfg.daemon.cwd = Some(peer.workspace());
    Some((peer, db, cfg))
}

/// Waits until the core has no turn running (both of the test's turns ended, within `limit`) and
/// every chat action is delivered.
async fn both_turns_end(app: &Application, limit: Duration) {
    tokio::time::timeout(limit, app.core.wait_idle())
        .await
        .expect("both turns end");
    while !chat_bridge::outbox_worker::drained(&app.store)
        .await
        .expect("store")
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interop_qwen_bridge_silent_command_and_timeout_on_sqlite() {
    silent_command_and_timeout(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interop_qwen_bridge_silent_command_and_timeout_on_postgres() {
    silent_command_and_timeout(Backend::Postgres).await;
}

async fn silent_command_and_timeout(backend: Backend) {
    let Some((peer, db, mut cfg)) = qwen_bridge_config(backend).await else {
        return;
    };
    cfg.liveness.idle = Duration::from_secs(12);
    let rec = Arc::new(Recorder::default());
    let app = Application::build(&cfg, rec.clone()).await.expect("build");
    let user = console::user();

    // If the daemon still asks (mode not honoured), the requester allows, as a person would.
    let approve = {
        let (rec, core) = (rec.clone(), app.core.clone());
        let user = user.clone();
        tokio::spawn(async move {
            let mut answered = std::collections::HashSet::new();
            loop {
                for (id, m) in rec.posts() {
                    if let Some(b) = m.buttons.iter().find(|b| b.label.starts_with("Allow"))
                        && answered.insert(id)
                    {
                        let mut click = console::inbound("");
                        click.user = user.clone();
                        click.kind = InboundKind::Action(b.value.clone());
                        let _ = core.accept(click).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    app.core
        .accept(console::inbound(
            "RUN 30000 python3 -c 'import time; time.sleep(23); print(42)'",
        ))
        .await
        .expect("accept");
    app.core
        .accept(console::inbound(
            "RUN 15000 python3 -c 'import time; print(\"partial\", flush=True); time.sleep(60)'",
        ))
        .await
        .expect("accept");
    both_turns_end(&app, Duration::from_secs(120)).await;
    approve.abort();

    let latest = rec.latest();
    assert!(
        rec.with_tone(Tone::Warning)
            .iter()
            .all(|m| !m.title.contains("No word from the agent")),
        "no stall: {latest:#?}"
    );
    let done = latest
        .iter()
        .find(|(_, m)| m.tone == Tone::Success)
        .expect("a completed tool message");
    assert_eq!(done.1.code.as_deref(), Some("42"), "{:?}", done.1);
    let timed_out = latest
        .iter()
        .find(|(_, m)| m.title.contains("timed out"))
        .expect("a timed-out tool message");
    assert_eq!(timed_out.1.tone, Tone::Error);
    assert_eq!(timed_out.1.code.as_deref(), Some("partial"));
    assert!(
        latest
            .iter()
            .any(|(_, m)| m.title == "💬 answer" && m.body.as_deref() == Some("Command finished.")),
        "the answer after the last tool call (R5)"
    );
    // The history holds what the chat showed: on PostgreSQL each result was written as one
    // statement (P2), on SQLite as a transaction.
    let mut c = app.store.conn().await.expect("conn");
    let conv = chat_bridge::store::history::list(&mut c, &Default::default())
        .await
        .expect("list")
        .items
        .remove(0);
    let calls = chat_bridge::store::tool_calls::of_conversation(&mut c, &conv.id)
        .await
        .expect("calls");
    drop(c);
    let stored: Vec<_> = calls
        .iter()
        .map(|t| {
            (
                t.status.as_str(),
                t.exit_code,
                t.output.as_deref().map(str::trim),
            )
        })
        .collect();
    assert!(
        stored.contains(&("completed", Some(0), Some("42"))),
        "the silent command's result stored: {calls:#?}"
    );
    assert!(
        stored
            .iter()
            .any(|(status, _, output)| *status == "timed_out" && *output == Some("partial")),
        "the timeout stored with its partial output: {calls:#?}"
    );
    assert!(
        chat_bridge::outbox_worker::drained(&app.store)
            .await
            .expect("store"),
        "every chat action delivered"
    );
    app.shutdown().await;
    drop(peer);
    db.cleanup().await;
}

/// `/new` while qwen runs a command: the turn is cancelled at qwen, and what qwen then says of it
/// ends the command's message; the next message, queued behind it, opens a new qwen session and
/// runs there — no stall notice, nothing left running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interop_qwen_bridge_new_while_a_command_runs_on_sqlite() {
    new_while_a_command_runs(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interop_qwen_bridge_new_while_a_command_runs_on_postgres() {
    new_while_a_command_runs(Backend::Postgres).await;
}

async fn new_while_a_command_runs(backend: Backend) {
    let Some((peer, db, cfg)) = qwen_bridge_config(backend).await else {
        return;
    };
    let rec = Arc::new(Recorder::default());
    let app = Application::build(&cfg, rec.clone()).await.expect("build");
    let conversation = |app: &Application| {
        let store = app.store.clone();
        async move {
            let mut c = store.conn().await.expect("conn");
            chat_bridge::store::history::list(&mut c, &Default::default())
                .await
                .expect("list")
                .items
                .remove(0)
        }
    };
    app.core
        .accept(console::inbound(
            "RUN 60000 python3 -c 'import time; time.sleep(40); print(42)'",
        ))
        .await
        .expect("accept");
    rec.wait_for("the command's message", |r| {
        r.posts().iter().any(|(_, m)| m.tone == Tone::Running)
    })
    .await;
    let (first, _) = rec
        .posts()
        .into_iter()
        .find(|(_, m)| m.tone == Tone::Running)
        .expect("posted");
    let before = conversation(&app).await.daemon_session;
    app.core
        .accept(console::inbound("/new"))
        .await
        .expect("accept");
    app.core
        .accept(console::inbound("RUN 30000 echo after-new"))
        .await
        .expect("accept");
    both_turns_end(&app, Duration::from_secs(90)).await;
    let latest = rec.latest();
    let (_, sleep) = latest.iter().find(|(id, _)| *id == first).expect("shown");
    assert!(
        sleep.tone != Tone::Running && sleep.code.as_deref() != Some("42"),
        "the command's message ends, cancelled: {latest:#?}"
    );
    assert!(
        latest
            .iter()
            .any(|(_, m)| m.tone == Tone::Success && m.code.as_deref() == Some("after-new")),
        "the next message ran: {latest:#?}"
    );
    assert!(
        rec.with_tone(Tone::Warning).is_empty(),
        "no stall notice: {latest:#?}"
    );
    let conv = conversation(&app).await;
    assert!(
        conv.daemon_session.is_some() && conv.daemon_session != before,
        "a new qwen session: {before:?} then {:?}",
        conv.daemon_session
    );
    let mut c = app.store.conn().await.expect("conn");
    let calls = chat_bridge::store::tool_calls::of_conversation(&mut c, &conv.id)
        .await
        .expect("calls");
    drop(c);
    assert!(
        calls.iter().all(|t| t.status != "running"),
        "nothing left running: {calls:#?}"
    );
    app.shutdown().await;
    drop(peer);
    db.cleanup().await;
}
