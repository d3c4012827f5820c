//! The bridge against the real qwen-code daemon through its lifecycle (L6): a daemon restarted on
//! the same URL between two messages of a thread, the mode that must survive a reload, the history a
//! reload replays, and the workspace the daemon serves. Skipped — loudly — only when npm cannot
//! install qwen.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chat_bridge::app::Application;
use chat_bridge::channel::{Tone, console};
use chat_bridge::config::Config;
use chat_bridge_tests::init_tracing;
use chat_bridge_tests::qwen::{QwenPeer, Unavailable};
use chat_bridge_tests::recorder::Recorder;

fn peer() -> Option<QwenPeer> {
    match QwenPeer::start() {
        Ok(p) => Some(p),
        Err(Unavailable::NotInstallable(why)) => {
            eprintln!(
                "\n!!!!!!!! SKIPPED interop_qwen_lifecycle: the qwen-code daemon could not be installed from npm !!!!!!!!\n{why}\n"
            );
            None
        }
    }
}

fn config(peer: &QwenPeer, dir: &tempfile::TempDir) -> Config {
    let mut cfg = Config::default();
    cfg.database.url = format!("sqlite://{}", dir.path().join("qwen.db").display());
    cfg.daemon.url = Some(peer.url.clone());
    cfg.daemon.token = Some(peer.token.clone().into());
    cfg.daemon.mode = Some("yolo".into());
    cfg
}

async fn settle(app: &Application) {
    tokio::time::timeout(Duration::from_secs(90), app.core.wait_idle())
        .await
        .expect("the turn ends");
    for _ in 0..200 {
        if chat_bridge::outbox_worker::drained(&app.store)
            .await
            .expect("store")
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the outbox did not drain");
}

/// L6 items 1–3 and 7: with `daemon.cwd` unset (the README's example), the thread runs in the
/// daemon's workspace; after the daemon restarts on the same URL the next message of the same thread
/// runs without `/new`, in `yolo` mode (no approval asked), and its answer is only the new text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l6_a_thread_survives_a_daemon_restart_with_its_mode_and_without_replayed_history() {
    let _slot = chat_bridge_tests::qwen::slot().await;
    init_tracing();
    let Some(peer) = peer() else { return };
    let dir = tempfile::tempdir().expect("tmp");
    let rec = Arc::new(Recorder::default());
    let app = Application::build(&config(&peer, &dir), rec.clone())
        .await
        .expect("build: daemon.cwd unset takes the daemon's workspace");

    app.core
        .accept(console::inbound("RUN 20000 echo first"))
        .await
        .expect("accept");
    settle(&app).await;
    let before = rec.posts().len();

    peer.restart();
    // The client notices the restart and reconnects by itself.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let reconnects = app.client_stats().reconnects;
        if reconnects >= 1 && app.core.daemon_connected.load(Ordering::SeqCst) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "reconnected within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    app.core
        .accept(console::inbound("RUN 20000 echo second"))
        .await
        .expect("accept");
    settle(&app).await;

    let after: Vec<_> = rec.latest().into_iter().skip(before).collect();
    let all = rec.latest();
    assert!(
        all.iter().all(|(_, m)| m.buttons.is_empty()),
        "yolo is applied after session/load too: no approval asked: {all:#?}"
    );
    assert!(
        all.iter().all(|(_, m)| {
            let text = format!("{} {:?} {:?}", m.title, m.body, m.code);
            !text.contains("not owned") && !text.contains("no longer knows")
        }),
        "the thread carries on in its own session: {all:#?}"
    );
    let second = after
        .iter()
        .find(|(_, m)| m.tone == Tone::Success && m.code.as_deref() == Some("second"))
        .unwrap_or_else(|| panic!("the second command ran after the restart: {after:#?}"));
    assert!(second.1.title.contains("echo second"), "{:?}", second.1);
    let answers: Vec<_> = after
        .iter()
        .filter(|(_, m)| m.title == "💬 answer")
        .map(|(_, m)| m.body.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        answers,
        vec!["Command finished.".to_owned()],
        "only the new turn's answer, no replayed history glued to it"
    );
    assert_eq!(
        after
            .iter()
            .filter(|(_, m)| m.title.contains("echo first"))
            .count(),
        0,
        "the replayed first command is not posted again"
    );
    app.shutdown().await;
    drop(peer);
}

/// L6 item 7: a `daemon.cwd` the daemon does not serve stops start-up with a message naming the key,
/// instead of refusing every `session/new` later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l6_a_daemon_cwd_outside_the_daemons_workspace_is_a_start_up_error() {
    let _slot = chat_bridge_tests::qwen::slot().await;
    init_tracing();
    let Some(peer) = peer() else { return };
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(&peer, &dir);
    cfg.daemon.cwd = Some(dir.path().to_path_buf());
    let err = Application::build(&cfg, Arc::new(Recorder::default()))
        .await
        .expect_err("refused");
    let text = format!("{err:#}");
    assert!(text.contains("daemon.cwd"), "{text}");
    assert!(
        text.contains(&peer.workspace().display().to_string()),
        "{text}"
    );
}

/// A daemon bound to one workspace (`qwen serve --workspace`) refuses a session in any other
/// directory, a thread's worktree included: `workspace.isolation = "worktree"` stops start-up with a
/// message naming the key and the agents that can, instead of failing every thread's first message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worktree_isolation_with_a_daemon_bound_to_one_workspace_is_a_start_up_error() {
    let _slot = chat_bridge_tests::qwen::slot().await;
    init_tracing();
    let Some(peer) = peer() else { return };
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(&peer, &dir);
    cfg.workspace.isolation = chat_bridge::worktree::Isolation::Worktree;
    let err = Application::build(&cfg, Arc::new(Recorder::default()))
        .await
        .expect_err("refused");
    let text = format!("{err:#}");
    assert!(text.contains("workspace.isolation"), "{text}");
    assert!(
        text.contains("--acp") && text.contains("agent-host"),
        "{text}"
    );
    assert!(
        text.contains(&peer.workspace().display().to_string()),
        "{text}"
    );
}

/// L6 item 2: after the bridge itself restarts (same database, same daemon), the thread's session is
/// loaded again in `daemon.mode = yolo`: its next command runs with no approval asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l6_after_a_bridge_restart_the_resumed_thread_still_runs_in_yolo_mode() {
    let _slot = chat_bridge_tests::qwen::slot().await;
    init_tracing();
    let Some(peer) = peer() else { return };
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = config(&peer, &dir);
    let rec = Arc::new(Recorder::default());
    let app = Application::build(&cfg, rec.clone()).await.expect("build");
    app.core
        .accept(console::inbound("RUN 20000 echo before"))
        .await
        .expect("accept");
    settle(&app).await;
    app.shutdown().await;

    let rec = Arc::new(Recorder::default());
    let app = Application::build(&cfg, rec.clone())
        .await
        .expect("build again on the same database");
    app.core
        .accept(console::inbound("RUN 20000 echo after"))
        .await
        .expect("accept");
    settle(&app).await;
    let all = rec.latest();
    assert!(
        all.iter().all(|(_, m)| m.buttons.is_empty()),
        "no approval asked after the restart: {all:#?}"
    );
    assert!(
        all.iter()
            .any(|(_, m)| m.tone == Tone::Success && m.code.as_deref() == Some("after")),
        "{all:#?}"
    );
    assert!(
        all.iter().all(|(_, m)| !m.title.contains("echo before")),
        "the replayed command of the first run is not posted again: {all:#?}"
    );
    app.shutdown().await;
    drop(peer);
}

/// Waits until the client reports the daemon connection `up` (or not).
async fn until_connected(app: &Application, up: bool, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    while app.core.daemon_connected.load(Ordering::SeqCst) != up {
        assert!(
            tokio::time::Instant::now() < deadline,
            "daemon connection {} within {within:?}",
            if up { "back" } else { "seen lost" }
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The only conversation's transcript: (kind, body) in order.
async fn transcript(app: &Application) -> Vec<(String, String)> {
    use chat_bridge::store::{history, transcript};
    let mut c = app.store.conn().await.expect("conn");
    let conv = history::list(&mut c, &Default::default())
        .await
        .expect("list")
        .items
        .remove(0);
    transcript::list(&mut c, &conv.id)
        .await
        .expect("transcript")
        .into_iter()
        .map(|e| (e.kind, e.body))
        .collect()
}

/// L7 item 4: the daemon is down for about ten seconds while two messages arrive. Neither is lost
/// or fails: the thread hears once that they are queued, the console says the connection was lost
/// and is back, and both run in order after the daemon returns — each once, in the chat and in
/// the transcript.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l7_messages_sent_while_the_daemon_is_down_run_in_order_once_it_is_back() {
    let _slot = chat_bridge_tests::qwen::slot().await;
    init_tracing();
    let Some(peer) = peer() else { return };
    let dir = tempfile::tempdir().expect("tmp");
    // Threadless like the console, which shows the connection's loss and recovery as chat lines.
    let rec = Arc::new(Recorder::threadless());
    let app = Application::build(&config(&peer, &dir), rec.clone())
        .await
        .expect("build");
    app.core
        .accept(console::inbound("RUN 20000 echo zero"))
        .await
        .expect("accept");
    settle(&app).await;

    let down_at = tokio::time::Instant::now();
    peer.stop();
    until_connected(&app, false, Duration::from_secs(10)).await;
    for word in ["one", "two"] {
        app.core
            .accept(console::inbound(&format!("RUN 20000 echo {word}")))
            .await
            .expect("accept");
    }
    rec.wait_for("the queued notice", |r| {
        r.latest()
            .iter()
            .any(|(_, m)| format!("{} {:?}", m.title, m.body).contains("queued"))
    })
    .await;
    assert_eq!(app.core.busy(), 2, "both held, neither ran nor failed");
    // About ten seconds of outage in all.
    tokio::time::sleep_until(down_at + Duration::from_secs(10)).await;
    peer.restart();
    until_connected(&app, true, Duration::from_secs(40)).await;
    settle(&app).await;

    let all = rec.latest();
    let text = |m: &chat_bridge::channel::Message| format!("{} {:?} {:?}", m.title, m.body, m.code);
    let count = |needle: &str| all.iter().filter(|(_, m)| text(m).contains(needle)).count();
    assert_eq!(
        count("your message is queued and will run when it is back"),
        1,
        "one notice for the outage: {all:#?}"
    );
    assert_eq!(count("connection to the agent was lost"), 1, "{all:#?}");
    assert_eq!(count("connection to the agent is back"), 1, "{all:#?}");
    assert!(
        all.iter().all(|(_, m)| !text(m).contains("could not run")
            && !text(m).contains("was not sent")
            && !text(m).contains("not owned")),
        "nothing failed: {all:#?}"
    );
    let results: Vec<String> = all
        .iter()
        .filter(|(_, m)| m.tone == Tone::Success)
        .filter_map(|(_, m)| m.code.clone())
        .collect();
    assert_eq!(
        results,
        vec!["zero".to_owned(), "one".to_owned(), "two".to_owned()],
        "each command ran once, in order: {all:#?}"
    );
    let stored = transcript(&app).await;
    let prompts: Vec<&str> = stored
        .iter()
        .filter(|(k, _)| k == "prompt")
        .map(|(_, b)| b.as_str())
        .collect();
    assert_eq!(
        prompts,
        vec![
            "RUN 20000 echo zero",
            "RUN 20000 echo one",
            "RUN 20000 echo two"
        ],
        "{stored:#?}"
    );
    assert_eq!(
        stored.iter().filter(|(k, _)| k == "tool_finished").count(),
        3,
        "each result stored once: {stored:#?}"
    );
    assert_eq!(
        stored.iter().filter(|(k, _)| k == "answer").count(),
        3,
        "one answer per turn, no replayed history: {stored:#?}"
    );
    app.shutdown().await;
    drop(peer);
}

/// L6/L7 item 1 (must-show): the daemon restarts on the same URL in the middle of a running
/// command. Killed (`hard`), it reports nothing and no longer runs that turn: after the reconnect
/// the orphaned turn is bounded by `reconnect_grace` and reported interrupted. Stopped gracefully,
/// qwen cancels the command and ends the turn itself before it goes. Either way the command is
/// reported once and the next message in the thread runs without `/new`.
async fn mid_command_restart(hard: bool) {
    let _slot = chat_bridge_tests::qwen::slot().await;
    init_tracing();
    let Some(peer) = peer() else { return };
    let dir = tempfile::tempdir().expect("tmp");
    let rec = Arc::new(Recorder::default());
    let mut cfg = config(&peer, &dir);
    cfg.liveness.reconnect_grace = Duration::from_secs(3);
    let app = Application::build(&cfg, rec.clone()).await.expect("build");
    app.core
        .accept(console::inbound(
            "RUN 60000 sleep 8 # intentional-sleep: the daemon restarts meanwhile",
        ))
        .await
        .expect("accept");
    rec.wait_for("the command's message", |r| {
        r.latest()
            .iter()
            .any(|(_, m)| m.tone == Tone::Running && m.title.contains("sleep 8 "))
    })
    .await;
    let reconnects = app.client_stats().reconnects;
    if hard {
        peer.kill();
    }
    peer.restart();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    while app.client_stats().reconnects == reconnects
        || !app.core.daemon_connected.load(Ordering::SeqCst)
    {
        assert!(tokio::time::Instant::now() < deadline, "reconnected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let back = tokio::time::Instant::now();
    app.core
        .accept(console::inbound("RUN 20000 echo next"))
        .await
        .expect("accept");
    settle(&app).await;
    let took = back.elapsed();
    let all = rec.latest();
    assert!(
        took < Duration::from_secs(30),
        "the orphaned turn is bounded by reconnect_grace, not the 2-minute idle limit: {took:?} {all:#?}"
    );
    let text = |m: &chat_bridge::channel::Message| format!("{} {:?} {:?}", m.title, m.body, m.code);
    let first: Vec<_> = all
        .iter()
        .filter(|(_, m)| m.title.contains("sleep 8 ") && !m.title.contains("echo next"))
        .collect();
    assert_eq!(first.len(), 1, "one message for the command: {all:#?}");
    assert!(
        first[0].1.tone != Tone::Running && first[0].1.tone != Tone::Success,
        "it ends, not as a success: {all:#?}"
    );
    if hard {
        // Closed by the bridge as interrupted — or, when the load's replay gets there first, with
        // qwen's "Tool result missing from saved history", introduced by what the bridge knows.
        assert!(
            first[0].1.title.contains("interrupted")
                || text(&first[0].1)
                    .contains("The connection to the agent was lost while this ran"),
            "{all:#?}"
        );
        assert_eq!(
            all.iter()
                .filter(|(_, m)| text(m).contains("marked interrupted and was not re-run"))
                .count(),
            1,
            "one notice: {all:#?}"
        );
    }
    assert!(
        all.iter().all(|(_, m)| !text(m).contains("not owned")
            && !text(m).contains("no longer knows")
            && m.code.as_deref() != Some("never")),
        "{all:#?}"
    );
    // D6: qwen keeps a killed turn's prompt in the session's history with no answer and folds it
    // into the next prompt of that session (the scripted model then saw "RUN … sleep 8 … RUN 20000
    // echo next" and ran the first command again). After an interrupted turn the next message
    // therefore opens a new session; after a graceful restart qwen closes the turn itself.
    let next: Vec<_> = all
        .iter()
        .filter(|(_, m)| m.title.contains("echo next"))
        .collect();
    assert_eq!(
        next.len(),
        1,
        "the next message ran once, without /new: {all:#?}"
    );
    assert_eq!(next[0].1.tone, Tone::Success, "{all:#?}");
    assert_eq!(
        next[0].1.code.as_deref(),
        Some("next"),
        "only the next command ran, not the interrupted one again: {all:#?}"
    );
    app.shutdown().await;
    drop(peer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l7_a_daemon_killed_mid_command_ends_the_orphaned_turn_once_and_the_thread_runs_on() {
    mid_command_restart(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l6_a_daemon_restarted_mid_command_reports_it_once_and_the_thread_runs_on() {
    mid_command_restart(false).await;
}

/// L7 with L6 item 7: a bridge started while the daemon is down starts (its daemon is not
/// connected); when the daemon comes up serving another workspace than `daemon.cwd`, it is not used
/// — held messages would all be refused there — and the bridge runs on (with projects, the others
/// would stop with it) and keeps trying until the daemon serves `daemon.cwd`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l7_a_daemon_first_reached_after_start_up_serving_another_workspace_is_not_used_and_the_bridge_runs_on()
 {
    let _slot = chat_bridge_tests::qwen::slot().await;
    init_tracing();
    let Some(peer) = peer() else { return };
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(&peer, &dir);
    cfg.daemon.cwd = Some(dir.path().to_path_buf());
    peer.stop();
    let app = Application::build(&cfg, Arc::new(Recorder::default()))
        .await
        .expect("starts while the daemon is down");
    assert!(!app.core.daemon_connected.load(Ordering::SeqCst));
    let peer = tokio::task::spawn_blocking(move || {
        peer.restart();
        peer
    })
    .await
    .expect("restart");
    let served = peer.workspace().to_path_buf();
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while app
        .core
        .daemon_agent()
        .and_then(|a| a.workspace)
        .is_none_or(|w| w != served)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon was never reached"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !app.core.fatal.is_cancelled(),
        "the bridge runs on: {:?}",
        app.core.fatal_reason()
    );
    assert!(
        !app.core.daemon_connected.load(Ordering::SeqCst),
        "a daemon on another workspace is not used"
    );
    app.shutdown().await;
}
