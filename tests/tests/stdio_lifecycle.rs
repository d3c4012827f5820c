//! A stdio agent's life as the bridge's child (issue 18 review, items 2, 3, 9, 10): a crash-looping
//! agent is restarted with a growing backoff (it is not reset by an `initialize` that succeeds
//! just before the next crash), an agent that exits at start-up fails start-up at once with its exit
//! status, and the start-up check names what is missing.

use std::time::{Duration, Instant};

use chat_bridge_tests::init_tracing;
use daemon_client::{AgentCommand, ClientConfig, DaemonClient, Error};

fn sh(script: &str) -> AgentCommand {
    AgentCommand::new(vec!["sh".into(), "-c".into(), script.into()]).expect("argv")
}

/// Answers `initialize` (whatever its id), then exits 50 ms later; each start appends a line to
/// `starts`.
fn crash_looping_agent(starts: &std::path::Path) -> AgentCommand {
    let script = format!(
        "echo start >> {}; read line; id=$(printf '%s' \"$line\" | sed 's/.*\"id\":\\([0-9]*\\).*/\\1/'); \
         printf '{{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{{\"protocolVersion\":1,\"agentCapabilities\":{{}}}}}}\\n' \"$id\"; \
         sleep 0.05; exit 1",
        starts.display()
    );
    sh(&script)
}

#[tokio::test]
async fn l_backoff_a_crash_looping_agent_is_not_restarted_at_the_base_rate() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tmp");
    let starts = dir.path().join("starts");
    let mut cfg = ClientConfig::stdio(crash_looping_agent(&starts));
    cfg.backoff_base = Duration::from_millis(5);
    cfg.backoff_cap = Duration::from_secs(2);
    let (client, _, _events) = DaemonClient::connect(cfg).await.expect("first start");
    tokio::time::sleep(Duration::from_secs(3)).await;
    client.close();
    let n = std::fs::read_to_string(&starts)
        .expect("starts")
        .lines()
        .count();
    // Doubling from 5 ms: about nine starts fit in 3 s; a backoff reset by every successful
    // `initialize` restarts it every ~60 ms (some 40 starts).
    assert!(n >= 3, "it is restarted: {n}");
    assert!(
        n <= 12,
        "the backoff grows while the agent keeps crashing: {n} starts in 3 s"
    );
}

#[tokio::test]
async fn an_agent_that_exits_at_start_up_fails_start_up_at_once_with_its_exit_status() {
    init_tracing();
    let began = Instant::now();
    let e = DaemonClient::connect(ClientConfig::stdio(sh("exit 3")))
        .await
        .expect_err("it exited");
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "not after the 60 s initialize timeout: {:?}",
        began.elapsed()
    );
    assert!(
        matches!(&e, Error::Spawn { reason, .. } if reason.contains("exit status: 3")),
        "names the exit: {e}"
    );
}

#[tokio::test]
async fn a_missing_program_or_cwd_is_refused_by_the_check_and_at_start_in_the_same_words() {
    let missing = AgentCommand::new(vec!["/nonexistent/agent".into()]).expect("argv");
    let checked = daemon_client::stdio::check(&missing).expect_err("missing");
    let started = DaemonClient::connect(ClientConfig::stdio(missing))
        .await
        .expect_err("missing");
    assert_eq!(checked.to_string(), started.to_string());
    assert!(
        checked.to_string().contains("/nonexistent/agent"),
        "{checked}"
    );

    let not_on_path = AgentCommand::new(vec!["no-such-agent-h11".into()]).expect("argv");
    let e = daemon_client::stdio::check(&not_on_path).expect_err("not on PATH");
    assert!(e.to_string().contains("not on PATH"), "{e}");

    let dir = tempfile::tempdir().expect("tmp");
    let plain = dir.path().join("agent");
    std::fs::write(&plain, "#!/bin/sh\n").expect("write");
    let not_exec = AgentCommand::new(vec![plain.display().to_string()]).expect("argv");
    daemon_client::stdio::check(&not_exec).expect_err("not executable");

    let mut bad_cwd = sh("true");
    bad_cwd.cwd = Some("/nonexistent/dir".into());
    let checked = daemon_client::stdio::check(&bad_cwd).expect_err("bad cwd");
    let started = DaemonClient::connect(ClientConfig::stdio(bad_cwd))
        .await
        .expect_err("bad cwd");
    assert!(
        started.to_string().contains("/nonexistent/dir"),
        "names the directory: {started}"
    );
    assert_eq!(checked.to_string(), started.to_string());

    daemon_client::stdio::check(&sh("true")).expect("sh is on PATH");
}

/// Issue 18 review, item 3: a stop (SIGTERM) while the agent has not answered `initialize` ends
/// start-up at once instead of after the request timeout.
#[tokio::test]
async fn a_stop_while_the_agent_starts_ends_start_up_at_once() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tmp");
    let url = format!("sqlite://{}", dir.path().join("cb.db").display());
    let mut cfg = chat_bridge_tests::bridge::config(&url, dir.path());
    cfg.daemon.command = Some(vec!["sh".into(), "-c".into(), "sleep 30".into()]);
    let stop = tokio_util::sync::CancellationToken::new();
    {
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            stop.cancel();
        });
    }
    let rec = std::sync::Arc::new(chat_bridge_tests::recorder::Recorder::default());
    let began = Instant::now();
    let built = chat_bridge::app::Application::build_until(&cfg, rec, &stop)
        .await
        .expect("a stop is no error");
    assert!(built.is_none(), "stopped, not started");
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "at once: {:?}",
        began.elapsed()
    );
}
