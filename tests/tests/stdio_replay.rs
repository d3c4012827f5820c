//! The same `ToolRun` assertions the WebSocket replays pass (`daemon_client_e2e.rs`), over the
//! stdio transport: a scripted child (`tests/scripts/replay_stdio.py`) replays the real qwen-code
//! captures as newline-delimited JSON-RPC on its stdout (F1, F3, F6 over stdio).

use std::sync::Arc;
use std::time::Duration;

use chat_bridge_tests::summary::ToolRun;
use chat_bridge_tests::{capture, init_tracing};
use daemon_client::{
    AgentCommand, ClientConfig, DaemonClient, DaemonEvent, EventStream, PermissionOutcome,
    StopReason,
};

const LIMIT: Duration = Duration::from_secs(30);

fn child(capture_name: &str) -> ClientConfig {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/replay_stdio.py");
    let capture = chat_bridge_tests::shared_dir()
        .join("fixtures/acp-qwen-0.24.4")
        .join(capture_name);
    let command = AgentCommand::new(vec![
        "python3".into(),
        script.display().to_string(),
        capture.display().to_string(),
    ])
    .expect("argv");
    let mut cfg = ClientConfig::stdio(command);
    cfg.permission_policy = Some(Arc::new(|req| {
        req.options
            .iter()
            .find(|o| o.kind == "allow_once")
            .map(|o| PermissionOutcome::Selected(o.option_id.clone()))
    }));
    cfg
}

async fn next(events: &mut EventStream) -> DaemonEvent {
    tokio::time::timeout(LIMIT, events.recv())
        .await
        .expect("an event within 30 s")
        .expect("stream open")
}

/// Runs the capture's one prompt through a client whose daemon is the scripted child.
async fn replay_prompt(name: &str, cancel_after_heartbeat: bool) -> Vec<DaemonEvent> {
    init_tracing();
    let lines = capture::load(name);
    let (client, info, mut events) = DaemonClient::connect(child(name))
        .await
        .expect("the child answers initialize");
    assert!(info.load_session);
    let new = client
        .new_session("/tmp/qwen/ws")
        .await
        .expect("session/new");
    let prompt_text = lines
        .iter()
        .find(|l| l.msg["method"] == "session/prompt")
        .and_then(|l| l.msg["params"]["prompt"][0]["text"].as_str())
        .unwrap_or_default()
        .to_owned();
    let prompter = client.clone();
    let session = new.session.clone();
    let prompt = tokio::spawn(async move { prompter.prompt(&session, &prompt_text).await });
    let mut seen = Vec::new();
    loop {
        let e = next(&mut events).await;
        assert!(
            !matches!(e, DaemonEvent::Disconnected { .. }),
            "the scripted child exited: the client's messages did not match the capture ({e:?})"
        );
        if cancel_after_heartbeat && matches!(e, DaemonEvent::ToolProgress { .. }) {
            client.cancel(&new.session).await.expect("cancel");
        }
        let last = matches!(&e, DaemonEvent::Other { kind: Some(k), .. } if k == "turn_complete");
        seen.push(e);
        if last {
            break;
        }
    }
    let stop = prompt.await.expect("join").expect("prompt");
    assert_eq!(ToolRun::of(&seen).stop_reason.as_ref(), Some(&stop));
    client.close();
    // The stream ends with Closed once the child is gone.
    while let Some(e) = tokio::time::timeout(LIMIT, events.recv())
        .await
        .expect("closes")
    {
        if matches!(e, DaemonEvent::Closed { .. }) {
            break;
        }
    }
    seen
}

#[tokio::test]
async fn f1_stdio_heartbeat_capture_gives_progress_never_malformed_then_completed() {
    let events = replay_prompt("shell-heartbeat-completed.jsonl", false).await;
    assert!(
        events
            .iter()
            .all(|e| !matches!(e, DaemonEvent::Malformed { .. }))
    );
    let run = ToolRun::of(&events);
    run.assert_silent_completed(2, "42");
    assert_eq!(
        (run.heartbeats, run.progress_elapsed.last()),
        (2, Some(&Some(20000))),
        "both heartbeats counted (one event when read in one burst), the last one's progress kept"
    );
}

#[tokio::test]
async fn f3_stdio_silent_timeout_is_timed_out_with_no_output() {
    let events = replay_prompt("shell-timeout-silent.jsonl", false).await;
    let run = ToolRun::of(&events);
    run.assert_timed_out(None);
    assert_eq!(run.result().signal, Some(15));
}

#[tokio::test]
async fn f3_stdio_partial_timeout_is_timed_out_with_output_partial() {
    let events = replay_prompt("shell-timeout-partial.jsonl", false).await;
    let run = ToolRun::of(&events);
    run.assert_timed_out(Some("partial"));
    assert_eq!(run.stop_reason, Some(StopReason::EndTurn));
}

#[tokio::test]
async fn f3_stdio_cancel_is_cancelled_and_the_prompt_stops_cancelled() {
    let events = replay_prompt("shell-cancel.jsonl", true).await;
    ToolRun::of(&events).assert_cancelled();
}
