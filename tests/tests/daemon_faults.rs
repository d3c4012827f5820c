//! Q2: the daemon connection fails mid-command, with the real shell-agent behind it. A dropped
//! network path (a proxy that cuts the TCP connection) is reconnected within 5 s, the session is
//! loaded again and the running command's result is delivered once. (A daemon killed and restarted,
//! which loses its sessions, is `bridge/tests/q2_daemon_restart.rs`: it needs the real binaries.)

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
        let mut c = app.store.conn().await.expect("conn");
        let conv = history::list(&mut c, &Default::default()).await.expect("list").items.remove(0);
        let calls = tool_calls::of_conversation(&mut c, &conv.id).await.expect("calls");
        assert_eq!(calls.len(), 1, "the result is stored once");
        assert_eq!(calls[0].status, "completed");
        let t = &turns::of_conversation(&mut c, &conv.id).await.expect("turns")[0];
        assert_eq!(t.status, "ended", "the turn completed normally");
        drop(c);
        app.shutdown().await;
        agent.shutdown().await;
    }
}
