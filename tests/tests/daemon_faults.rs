//! Q2: the daemon connection fails mid-command, with the real shell-agent behind it. A dropped
//! network path (a proxy that cuts the TCP connection) is reconnected within 5 s, the session is
//! loaded again and the running command's result is delivered once. (A daemon killed and restarted,
//! which loses its sessions, is `bridge/tests/q2_daemon_restart.rs`: it needs the real binaries.)
//! D3: the load of a turn taken back after a restart that fails on the way is tried again, not
//! taken for a daemon that lost the session.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chat_bridge::app::Application;
use chat_bridge::channel::{Tone, console};
use chat_bridge::store::{history, tool_calls, turns};
use chat_bridge_tests::bridge::{config, settle};
use chat_bridge_tests::on_both;
use chat_bridge_tests::proxy::Proxy;
use chat_bridge_tests::recorder::Recorder;
use shell_agent::{AgentConfig, ShellAgent};

fn agent_config() -> AgentConfig {
    AgentConfig {
        heartbeat_interval: Duration::from_millis(200),
        ..AgentConfig::default()
    }
}

fn results(rec: &Recorder, prefix: &str) -> usize {
    rec.latest()
        .iter()
        .filter(|(_, m)| m.title.starts_with(prefix))
        .count()
}

/// The chat actions whose text mentions `words` (a notice, a tool message's edit).
fn mentioning(rec: &Recorder, words: &str) -> Vec<chat_bridge_tests::recorder::Call> {
    rec.calls()
        .into_iter()
        .filter(|c| format!("{c:?}").contains(words))
        .collect()
}

/// Starts `command` on a bridge built from `cfg` and stops that bridge once the command's message
/// is posted: its turn stays open in the store, and the agent runs the command on.
async fn stopped_mid_command(
    cfg: &chat_bridge::config::Config,
    rec: &Arc<Recorder>,
    command: &str,
) {
    let app = Application::build(cfg, rec.clone()).await.expect("build");
    app.core
        .accept(console::inbound(command))
        .await
        .expect("accept");
    rec.wait_for("the running tool message", |r| !r.posts().is_empty())
        .await;
    app.shutdown().await;
}

/// The store holds the one call, completed, and its turn ended.
async fn stored_completed_once(store: &chat_bridge::store::Store) {
    let mut c = store.conn().await.expect("conn");
    let conv = history::list(&mut c, &Default::default())
        .await
        .expect("list")
        .items
        .remove(0);
    let calls = tool_calls::of_conversation(&mut c, &conv.id)
        .await
        .expect("calls");
    assert_eq!(calls.len(), 1, "the result is stored once");
    assert_eq!(calls[0].status, "completed");
    let t = &turns::of_conversation(&mut c, &conv.id)
        .await
        .expect("turns")[0];
    assert_eq!(t.status, "ended", "the turn completed, not interrupted");
}

on_both! {
    async fn q2_a_cut_connection_mid_command_reconnects_within_5s_and_delivers_the_result_once(db) {
        chat_bridge_tests::init_tracing();
        let dir = tempfile::tempdir().expect("tmp");
        let agent = ShellAgent::start("127.0.0.1:0".parse().expect("addr"), None, agent_config()).await.expect("agent");
        let proxy = Proxy::start(agent.addr()).await;
        let mut cfg = config(&db.url, dir.path());
        cfg.daemon.url = Some(format!("ws://{}/acp", proxy.addr));
        cfg.daemon.token = Some(agent.token().into());
        cfg.liveness.idle = Duration::from_secs(5);
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        app.core.accept(console::inbound("sleep 2; echo once")).await.expect("accept");
        rec.wait_for("the running tool message", |r| !r.posts().is_empty()).await;

        let cut_at = Instant::now();
        proxy.cut();
        settle(&app).await;
        let accepted = proxy.accepted();
        assert!(accepted.len() >= 2, "the bridge connected again");
        let reconnect = accepted[1].duration_since(cut_at);
        assert!(reconnect <= Duration::from_secs(5), "reconnected in {reconnect:?}");
        println!("Q2: reconnected {reconnect:?} after the cut");
        assert_eq!(results(&rec, "✅ sleep 2; echo once"), 1, "delivered once: {:#?}", rec.calls());
        assert!(rec.latest().iter().any(|(_, m)| m.code.as_deref().is_some_and(|c| c.contains("once"))));
        assert!(rec.with_tone(Tone::Error).is_empty(), "no error notice: {:#?}", rec.calls());
        stored_completed_once(&app.store).await;
        app.shutdown().await;
        agent.shutdown().await;
    }
}

// D3 (an outside tester's finding): the bridge stopped while a command ran; the agent finished
// it alone. The restarted bridge takes the turn back with a `session/load`, and the network
// path fails under that one call (the proxy cuts the connection as the frame goes by). That is
// not the daemon saying it lost the session: the load is tried again on the next connection,
// the command's result is shown once, and the thread is not told "the agent no longer has
// it" (it was, and the person was asked to run again a command that had run).
on_both! {
    async fn d3_a_resumed_turn_whose_session_load_is_cut_off_is_loaded_again_and_its_result_shown(db) {
        chat_bridge_tests::init_tracing();
        let dir = tempfile::tempdir().expect("tmp");
        let agent = ShellAgent::start("127.0.0.1:0".parse().expect("addr"), None, agent_config()).await.expect("agent");
        let mut cfg = config(&db.url, dir.path());
        cfg.daemon.url = Some(agent.url());
        cfg.daemon.token = Some(agent.token().into());
        let rec = Arc::new(Recorder::default());
        stopped_mid_command(&cfg, &rec, "sleep 1; echo resumed-once").await;

        let proxy = Proxy::cutting_at(agent.addr(), "session/load").await;
        cfg.daemon.url = Some(format!("ws://{}/acp", proxy.addr));
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        settle(&app).await;
        assert!(proxy.has_cut(), "the first session/load was cut off on the way");
        assert!(proxy.accepted().len() >= 2, "the bridge connected again");
        let lost = mentioning(&rec, "no longer has it");
        assert!(lost.is_empty(), "not reported as lost: {lost:#?}");
        assert_eq!(results(&rec, "✅ sleep 1; echo resumed-once"), 1, "the result shown once: {:#?}", rec.calls());
        stored_completed_once(&app.store).await;
        app.shutdown().await;
        agent.shutdown().await;
    }
}

// D3 (an outside tester's finding): a turn taken back after a restart, its session loaded, and
// then the connection to the agent drops (a blip in the seconds after a rolling upgrade). The
// client loads again on reconnecting only the sessions of prompts it sent itself; this turn's
// prompt was sent by the previous process, so its frames went on to the closed connection, and
// `liveness.reconnect_grace` later the thread was told the turn was interrupted "(the agent most
// likely restarted)" — though the command finished, its result lost from the thread and the
// store. The runner loads the session again itself once the daemon is back.
on_both! {
    async fn d3_a_resumed_turn_whose_connection_drops_after_its_load_is_loaded_again_and_its_result_shown(db) {
        chat_bridge_tests::init_tracing();
        let dir = tempfile::tempdir().expect("tmp");
        let agent = ShellAgent::start("127.0.0.1:0".parse().expect("addr"), None, agent_config()).await.expect("agent");
        let mut cfg = config(&db.url, dir.path());
        cfg.daemon.url = Some(agent.url());
        cfg.daemon.token = Some(agent.token().into());
        cfg.liveness.idle = Duration::from_secs(10);
        cfg.liveness.reconnect_grace = Duration::from_secs(2);
        cfg.liveness.progress_flush = Duration::from_millis(100);
        let rec = Arc::new(Recorder::default());
        stopped_mid_command(&cfg, &rec, "sleep 4; echo after-the-cut").await;
        let beats = |store: chat_bridge::store::Store| async move {
            let mut c = store.conn().await.expect("conn");
            let conv = history::list(&mut c, &Default::default()).await.expect("list").items.remove(0);
            tool_calls::of_conversation(&mut c, &conv.id).await.expect("calls")[0].heartbeats
        };
        let before = beats(db.store.clone()).await;

        let proxy = Proxy::start(agent.addr()).await;
        cfg.daemon.url = Some(format!("ws://{}/acp", proxy.addr));
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        // Loaded on the new connection: the command's heartbeats are counted again.
        let deadline = Instant::now() + Duration::from_secs(10);
        while beats(app.store.clone()).await <= before {
            assert!(Instant::now() < deadline, "the resumed turn's heartbeats were counted");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        proxy.cut();
        settle(&app).await;
        assert!(proxy.accepted().len() >= 2, "the bridge connected again");
        let interrupted = mentioning(&rec, "interrupted");
        assert!(interrupted.is_empty(), "not reported as interrupted: {interrupted:#?}");
        assert_eq!(results(&rec, "✅ sleep 4; echo after-the-cut"), 1, "the result shown once: {:#?}", rec.calls());
        stored_completed_once(&app.store).await;
        app.shutdown().await;
        agent.shutdown().await;
    }
}
