//! daemon-client connected to shell-agent: the same DaemonEvent kinds, checked by the same
//! `ToolRun` assertions that the qwen capture replays pass (one helper for every daemon).

use std::time::Duration;

use chat_bridge_tests::init_tracing;
use chat_bridge_tests::summary::ToolRun;
use daemon_client::{ClientConfig, DaemonClient, DaemonEvent, EventStream, SessionId};
use shell_agent::{AgentConfig, ShellAgent};

struct Rig {
    agent: ShellAgent,
    client: DaemonClient,
    events: EventStream,
    session: SessionId,
    _dir: tempfile::TempDir,
}

async fn rig(heartbeat_ms: u64) -> Rig {
    rig_with(AgentConfig {
        heartbeat_interval: Duration::from_millis(heartbeat_ms),
        ..AgentConfig::default()
    })
    .await
}

async fn rig_with(cfg: AgentConfig) -> Rig {
    init_tracing();
    let cfg = AgentConfig {
        kill_grace: Duration::from_millis(500),
        ..cfg
    };
    let agent = ShellAgent::start("127.0.0.1:0".parse().expect("addr"), None, cfg)
        .await
        .expect("agent");
    let (client, info, events) =
        DaemonClient::connect(ClientConfig::new(agent.url()).with_token(agent.token()))
            .await
            .expect("connect");
    assert!(info.load_session);
    let dir = tempfile::tempdir().expect("tmp");
    let session = client
        .new_session(dir.path())
        .await
        .expect("session")
        .session;
    Rig {
        agent,
        client,
        events,
        session,
        _dir: dir,
    }
}

/// Runs `command` and collects its events up to `TurnEnded`; cancels after the first heartbeat if asked.
async fn turn(rig: &mut Rig, command: &str, cancel_after_heartbeat: bool) -> Vec<DaemonEvent> {
    let client = rig.client.clone();
    let (session, command) = (rig.session.clone(), command.to_owned());
    let prompt = tokio::spawn(async move { client.prompt(&session, &command).await });
    let mut seen = Vec::new();
    loop {
        let e = tokio::time::timeout(Duration::from_secs(30), rig.events.recv())
            .await
            .expect("events within 30 s")
            .expect("open");
        if cancel_after_heartbeat && matches!(e, DaemonEvent::ToolProgress { .. }) {
            rig.client.cancel(&rig.session).await.expect("cancel");
        }
        let done = matches!(e, DaemonEvent::TurnEnded { .. });
        seen.push(e);
        if done {
            break;
        }
    }
    let stop = prompt.await.expect("join").expect("prompt");
    assert_eq!(ToolRun::of(&seen).stop_reason, Some(stop));
    seen
}

#[tokio::test]
async fn shell_agent_silent_command_is_progress_then_completed_like_qwen() {
    let mut rig = rig(200).await;
    let events = turn(&mut rig, "sleep 1; echo 42", false).await;
    ToolRun::of(&events).assert_silent_completed(3, "42");
    assert_eq!(rig.client.stats().classifier.malformed, 0);
    rig.agent.shutdown().await;
}

#[tokio::test]
async fn shell_agent_partial_timeout_is_timed_out_with_output_like_qwen() {
    let mut rig = rig(300).await;
    let events = turn(&mut rig, "timeout=1s echo partial; sleep 30", false).await;
    let run = ToolRun::of(&events);
    run.assert_timed_out(Some("partial"));
    assert_eq!(run.result().signal, Some(15));
    rig.agent.shutdown().await;
}

#[tokio::test]
async fn shell_agent_silent_timeout_is_timed_out_with_no_output_like_qwen() {
    let mut rig = rig(300).await;
    let events = turn(&mut rig, "timeout=1s sleep 30", false).await;
    let run = ToolRun::of(&events);
    run.assert_timed_out(None);
    assert!(!run.progress_elapsed.is_empty(), "heartbeats while silent");
    rig.agent.shutdown().await;
}

#[tokio::test]
async fn shell_agent_cancel_is_cancelled_and_the_turn_stops_cancelled_like_qwen() {
    let mut rig = rig(200).await;
    let events = turn(&mut rig, "sleep 30", true).await;
    ToolRun::of(&events).assert_cancelled();
    rig.agent.shutdown().await;
}

/// The events up to and including the first that `last` picks (10 s for each).
async fn events_until(
    events: &mut EventStream,
    last: impl Fn(&DaemonEvent) -> bool,
) -> Vec<DaemonEvent> {
    let mut seen = Vec::new();
    loop {
        let e = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("events within 10 s")
            .expect("open");
        let done = last(&e);
        seen.push(e);
        if done {
            return seen;
        }
    }
}

/// Stopped (SIGTERM, Ctrl-C, or the bridge's built-in agent at shutdown) while a command runs, the
/// agent cancels it and tells the client before the connection closes — the call `cancelled`, the
/// prompt ending `cancelled` — as qwen does when it is stopped. It used to close the connection
/// first: the client heard nothing, and a bridge reported the turn as interrupted once it found the
/// agent had lost the session (an outside tester's finding).
#[tokio::test]
async fn shell_agent_stopped_mid_command_reports_it_cancelled_before_closing_like_qwen() {
    let Rig {
        agent,
        client,
        mut events,
        session,
        _dir,
    } = rig(200).await;
    let prompt = tokio::spawn({
        let (client, session) = (client.clone(), session.clone());
        async move { client.prompt(&session, "sleep 30").await }
    });
    let mut seen = events_until(&mut events, |e| {
        matches!(e, DaemonEvent::ToolProgress { .. })
    })
    .await;
    let stopping = tokio::spawn(agent.shutdown());
    seen.extend(events_until(&mut events, |e| matches!(e, DaemonEvent::TurnEnded { .. })).await);
    let stop = tokio::time::timeout(Duration::from_secs(10), prompt)
        .await
        .expect("the prompt answered")
        .expect("join")
        .expect("the prompt ends with a stop reason, not a lost connection");
    assert_eq!(stop, daemon_client::StopReason::Cancelled);
    ToolRun::of(&seen).assert_cancelled();
    stopping.await.expect("stopped");
    client.close();
}

/// Runs a silent 1.5 s command with no command timeout under a 500 ms idle limit; returns the
/// stalls the liveness clock reported.
async fn stalls_for_silent_command(heartbeat_ms: u64) -> usize {
    let cfg = AgentConfig {
        heartbeat_interval: Duration::from_millis(heartbeat_ms),
        default_timeout: Duration::ZERO,
        ..AgentConfig::default()
    };
    let mut rig = rig_with(cfg).await;
    let cfg = daemon_client::LivenessConfig {
        idle: Duration::from_millis(500),
        ..Default::default()
    };
    let mut liveness = daemon_client::Liveness::new(cfg, tokio::time::Instant::now());
    let client = rig.client.clone();
    let session = rig.session.clone();
    let prompt = tokio::spawn(async move { client.prompt(&session, "sleep 1.5").await });
    let mut stalls = 0;
    loop {
        let deadline = liveness.deadline().expect("a deadline");
        tokio::select! {
            e = rig.events.recv() => {
                let e = e.expect("open");
                liveness.observe(&e, tokio::time::Instant::now());
                if matches!(e, DaemonEvent::TurnEnded { .. }) { break; }
            }
            () = tokio::time::sleep_until(deadline) => {
                if liveness.poll(tokio::time::Instant::now()).is_some() { stalls += 1; }
            }
        }
    }
    prompt.await.expect("join").expect("prompt");
    rig.agent.shutdown().await;
    stalls
}

#[tokio::test]
async fn l1_shell_agent_heartbeats_keep_a_silent_turn_alive_under_a_shorter_idle_limit() {
    assert_eq!(
        stalls_for_silent_command(200).await,
        0,
        "heartbeats re-armed the idle limit"
    );
}

#[tokio::test]
async fn l1_without_heartbeats_the_same_silent_turn_stalls() {
    assert_eq!(
        stalls_for_silent_command(0).await,
        1,
        "one stall notice for the one silence"
    );
}

#[tokio::test]
async fn many_sessions_share_one_connection_and_each_gets_only_its_own_events() {
    let rig = rig(100).await;
    let dir = tempfile::tempdir().expect("tmp");
    let mut sessions = Vec::new();
    for _ in 0..6 {
        sessions.push(
            rig.client
                .new_session(dir.path())
                .await
                .expect("session")
                .session,
        );
    }
    let mut prompts = Vec::new();
    for (i, s) in sessions.iter().enumerate() {
        let (client, s) = (rig.client.clone(), s.clone());
        prompts.push(tokio::spawn(async move {
            client
                .prompt(&s, &format!("sleep 0.{i}; echo session-{i}"))
                .await
        }));
    }
    for p in prompts {
        assert_eq!(
            p.await.expect("join").expect("prompt"),
            daemon_client::StopReason::EndTurn
        );
    }
    let mut events = rig.events;
    let mut outputs = std::collections::HashMap::new();
    let mut ended = 0;
    while ended < sessions.len() {
        let e = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("event")
            .expect("open");
        match e {
            DaemonEvent::ToolFinished {
                session, result, ..
            } => {
                outputs.insert(session, result.output);
            }
            DaemonEvent::TurnEnded { .. } => ended += 1,
            _ => {}
        }
    }
    for (i, s) in sessions.iter().enumerate() {
        assert_eq!(
            outputs.get(s).map(String::as_str),
            Some(format!("session-{i}\n").as_str()),
            "session {i} got its own result"
        );
    }
    assert_eq!(rig.client.stats().reconnects, 0);
    rig.agent.shutdown().await;
}
