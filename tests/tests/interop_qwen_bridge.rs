//! The bridge against the real qwen-code daemon: a silent command outlives the turn's idle limit
//! without stalling (heartbeats and the stated timeout bind — L1/L2), and a timeout shows as an
//! error with its partial output (R3). Skipped — loudly — only when npm cannot install qwen.

use std::sync::Arc;
use std::time::Duration;

use chat_bridge::app::Application;
use chat_bridge::channel::{InboundKind, Tone, console};
use chat_bridge::config::Config;
use chat_bridge_tests::init_tracing;
use chat_bridge_tests::qwen::{QwenPeer, Unavailable};
use chat_bridge_tests::recorder::Recorder;

/// The real qwen daemon (yolo mode) and a bridge configuration for it on SQLite in a temporary
/// folder; `None`, said loudly, when npm cannot install qwen.
fn qwen_bridge_config() -> Option<(QwenPeer, tempfile::TempDir, Config)> {
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
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = Config::default();
    cfg.database.url = format!("sqlite://{}", dir.path().join("qwen.db").display());
    cfg.daemon.url = Some(peer.url.clone());
    cfg.daemon.token = Some(peer.token.clone().into());
    cfg.daemon.mode = Some("yolo".into());
    cfg.daemon.cwd = Some(peer.workspace());
    Some((peer, dir, cfg))
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
async fn interop_qwen_bridge_silent_command_and_timeout() {
    let Some((peer, _dir, mut cfg)) = qwen_bridge_config() else {
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
    app.shutdown().await;
    drop(peer);
}

/// `/new` while qwen runs a command: the turn is cancelled at qwen, and what qwen then says of it
/// ends the command's message; the next message, queued behind it, opens a new qwen session and
/// runs there — no stall notice, nothing left running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interop_qwen_bridge_new_while_a_command_runs() {
    let Some((peer, _dir, cfg)) = qwen_bridge_config() else {
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
}
