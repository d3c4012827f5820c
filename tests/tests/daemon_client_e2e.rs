//! daemon-client against a real WebSocket: the qwen captures replayed by a scripted daemon, and the
//! frame sequences real daemons cannot be made to produce (garbage, drops, silence, bad tokens).

use std::sync::Arc;
use std::time::Duration;

use chat_bridge_tests::scripted::{Peer, ScriptedDaemon, replay};
use chat_bridge_tests::summary::ToolRun;
use chat_bridge_tests::{capture, init_tracing};
use daemon_client::{
    ClientConfig, DaemonClient, DaemonEvent, Error, EventStream, PermissionOutcome,
    PermissionPolicy, SessionId, StopReason,
};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(30);

fn allow_once() -> PermissionPolicy {
    Arc::new(|req| {
        req.options
            .iter()
            .find(|o| o.kind == "allow_once")
            .map(|o| PermissionOutcome::Selected(o.option_id.clone()))
    })
}

fn config(d: &ScriptedDaemon) -> ClientConfig {
    let mut cfg = ClientConfig::new(&d.url).with_token(&d.token);
    cfg.permission_policy = Some(allow_once());
    cfg.backoff_base = Duration::from_millis(20);
    cfg.backoff_cap = Duration::from_millis(200);
    cfg
}

async fn next(events: &mut EventStream) -> DaemonEvent {
    tokio::time::timeout(LIMIT, events.recv())
        .await
        .expect("an event within 30 s")
        .expect("stream open")
}

/// Collects events up to and including the first that matches `stop`.
async fn until(events: &mut EventStream, stop: impl Fn(&DaemonEvent) -> bool) -> Vec<DaemonEvent> {
    let mut out = Vec::new();
    loop {
        let e = next(events).await;
        let done = stop(&e);
        out.push(e);
        if done {
            return out;
        }
    }
}

/// Replays capture `name` (connection 1) and runs one prompt through the client; `on_event` may act
/// (e.g. cancel) as events arrive. Returns every event up to the trailing `turn_complete` notice.
async fn replay_prompt(name: &str, cancel_after_heartbeat: bool) -> Vec<DaemonEvent> {
    init_tracing();
    let lines = Arc::new(capture::load(name));
    let script_lines = lines.clone();
    let daemon = ScriptedDaemon::start(move |mut peer: Peer| {
        let lines = script_lines.clone();
        async move { replay(&mut peer, &lines, 1).await }
    })
    .await;
    let (client, info, mut events) = DaemonClient::connect(config(&daemon))
        .await
        .expect("connect");
    assert!(info.load_session);
    let new = client
        .new_session("/tmp/qwen/ws")
        .await
        .expect("session/new");
    assert!(new.modes.contains(&"yolo".to_owned()), "{:?}", new.modes);
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
    let run = ToolRun::of(&seen);
    assert_eq!(
        run.stop_reason.as_ref(),
        Some(&stop),
        "TurnEnded carries the prompt's stop reason"
    );
    assert!(
        seen.iter()
            .all(|e| e.session().is_none_or(|s| *s == new.session)),
        "events name the prompt's session"
    );
    assert!(
        seen.iter()
            .filter(|e| e.name().starts_with("tool_"))
            .all(|e| e.session() == Some(&new.session)),
        "every tool event names the session"
    );
    client.close();
    seen
}

fn names(events: &[DaemonEvent]) -> Vec<&'static str> {
    events.iter().map(DaemonEvent::name).collect()
}

#[tokio::test]
async fn f1_replayed_heartbeat_capture_gives_progress_never_malformed_then_completed() {
    let events = replay_prompt("shell-heartbeat-completed.jsonl", false).await;
    // The replay sends the two heartbeats back to back: read in one burst they are one event.
    let mut names = names(&events);
    names.dedup_by(|a, b| *a == "tool_progress" && a == b);
    assert_eq!(
        names,
        [
            "user_text",            // user_message_chunk echo (D6)
            "other",                // available_commands_update (570 kB)
            "tool_started",         // tool_call pending
            "usage",                // empty chunk with _meta.usage (F6)
            "permission_requested", // answered allow by the policy
            "other",                // _qwen/notify permission_resolved
            "tool_progress",        // heartbeats at 10 s and 20 s
            "tool_finished",
            "agent_text",
            "usage",
            "turn_ended",
            "other", // _qwen/notify turn_complete
        ]
    );
    let run = ToolRun::of(&events);
    run.assert_silent_completed(2, "42");
    assert_eq!(
        (run.heartbeats, run.progress_elapsed.last()),
        (2, Some(&Some(20000))),
        "both heartbeats counted, the last one's progress kept"
    );
}

#[tokio::test]
async fn f3_replayed_silent_timeout_is_timed_out_with_no_output() {
    let events = replay_prompt("shell-timeout-silent.jsonl", false).await;
    let run = ToolRun::of(&events);
    run.assert_timed_out(None);
    assert_eq!(run.heartbeats, 1);
    assert_eq!(run.result().signal, Some(15));
}

#[tokio::test]
async fn f3_replayed_partial_timeout_is_timed_out_with_output_partial() {
    let events = replay_prompt("shell-timeout-partial.jsonl", false).await;
    let run = ToolRun::of(&events);
    run.assert_timed_out(Some("partial"));
    assert_eq!(run.stop_reason, Some(StopReason::EndTurn));
}

#[tokio::test]
async fn f3_replayed_cancel_is_cancelled_and_the_prompt_stops_cancelled() {
    let events = replay_prompt("shell-cancel.jsonl", true).await;
    ToolRun::of(&events).assert_cancelled();
}

#[tokio::test]
async fn replayed_second_connection_loads_the_session_of_the_first() {
    init_tracing();
    let lines = Arc::new(capture::load("permission-denied-then-load.jsonl"));
    let l = lines.clone();
    let daemon = ScriptedDaemon::start(move |mut peer: Peer| {
        let lines = l.clone();
        async move {
            let conn = peer.number as u64;
            replay(&mut peer, &lines, conn).await;
        }
    })
    .await;
    let (first, _, mut events) = DaemonClient::connect(config(&daemon))
        .await
        .expect("connect");
    let s = first
        .new_session("/tmp/qwen/ws")
        .await
        .expect("new")
        .session;
    assert_eq!(
        first.prompt(&s, "hello").await.expect("text turn"),
        StopReason::EndTurn
    );
    assert_eq!(
        first
            .prompt(&s, "RUN 60000 echo hi")
            .await
            .expect("tool turn"),
        StopReason::EndTurn
    );
    let seen = until(&mut events, |e| {
        matches!(e, DaemonEvent::ToolFinished { .. })
    })
    .await;
    assert!(
        seen.iter()
            .any(|e| matches!(e, DaemonEvent::AgentText { text, .. } if text.starts_with("echo:")))
    );
    let (second, _, _events2) = DaemonClient::connect(config(&daemon))
        .await
        .expect("second connection");
    let captured = SessionId::parse("833dcdab-664c-4ebf-accc-4a97f037b857").expect("id");
    second
        .load_session(&captured, "/tmp/qwen/ws")
        .await
        .expect("session/load");
    assert_eq!(daemon.connections(), 2);
}

/// F1: a burst of heartbeats of two calls, a result in the middle, then a lone heartbeat.
#[tokio::test]
async fn f1_heartbeats_read_in_one_burst_are_folded_per_call_in_order_and_a_lone_one_is_handed_on_at_once()
 {
    init_tracing();
    const BURST: u64 = 400;
    let (lone_tx, lone_rx) = tokio::sync::oneshot::channel::<()>();
    let lone_rx = std::sync::Mutex::new(Some(lone_rx));
    let daemon = ScriptedDaemon::start(move |mut peer: Peer| {
        let lone = lone_rx.lock().unwrap().take();
        async move {
            peer.handshake().await;
            let new = peer.expect("session/new").await;
            peer.reply(&new, json!({"sessionId": "s1"})).await;
            let update = |u: serde_json::Value| json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":u}});
            let beat = |call: &str, ms: u64| update(json!({"sessionUpdate":"tool_call_update","toolCallId":call,"status":"in_progress","_meta":{"shellProgress":{"elapsedMs":ms}}}));
            let mut burst = vec![
                update(json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"sleep 1","kind":"execute","status":"in_progress"})),
                update(json!({"sessionUpdate":"tool_call","toolCallId":"b","title":"sleep 2","kind":"execute","status":"in_progress"})),
            ];
            for i in 0..BURST {
                burst.push(beat(if i % 2 == 0 { "a" } else { "b" }, i));
            }
            burst.push(update(json!({"sessionUpdate":"tool_call_update","toolCallId":"a","status":"completed","rawOutput":{"output":"ok","exitCode":0}})));
            for i in BURST..2 * BURST {
                burst.push(beat("b", i));
            }
            peer.send_burst(&burst).await;
            // Nothing more until the test has seen every frame of the burst handed on.
            if let Some(lone) = lone {
                let _ = lone.await;
            }
            peer.send(beat("b", 999_999)).await;
            let _ = peer.recv().await;
        }
    })
    .await;
    let (client, _, mut events) = DaemonClient::connect(config(&daemon))
        .await
        .expect("connect");
    let _session = client.new_session("/").await.expect("new").session;
    let mut seen = Vec::new();
    let (mut a, mut b, mut finished_at) = (0u64, 0u64, None);
    while b < 3 * BURST / 2 || finished_at.is_none() {
        let e = next(&mut events).await;
        match &e {
            DaemonEvent::ToolProgress { call, beats, .. } => {
                if call.as_str() == "a" {
                    assert!(
                        finished_at.is_none(),
                        "a heartbeat of a after its result: {:?}",
                        names(&seen)
                    );
                    a += u64::from(*beats);
                } else {
                    b += u64::from(*beats);
                }
            }
            DaemonEvent::ToolFinished { call, .. } if call.as_str() == "a" => {
                assert_eq!(
                    b,
                    BURST / 2,
                    "b's heartbeats before a's result are handed on before it, b's after it after it"
                );
                finished_at = Some(seen.len());
            }
            _ => {}
        }
        seen.push(e);
    }
    assert_eq!(
        (a, b),
        (BURST / 2, 3 * BURST / 2),
        "every heartbeat counted once"
    );
    let heartbeat_events = seen
        .iter()
        .filter(|e| matches!(e, DaemonEvent::ToolProgress { .. }))
        .count();
    assert!(
        (heartbeat_events as u64) < 2 * BURST,
        "heartbeats waiting together were folded: {heartbeat_events} events for {} frames",
        2 * BURST
    );
    let last_of_b = seen.iter().rev().find_map(|e| match e {
        DaemonEvent::ToolProgress { call, progress, .. } if call.as_str() == "b" => {
            progress.elapsed_ms
        }
        _ => None,
    });
    assert_eq!(
        last_of_b,
        Some(2 * BURST - 1),
        "a folded event carries its last heartbeat's progress"
    );
    assert_eq!(
        client.stats().classifier.heartbeats,
        2 * BURST,
        "the classifier saw every frame"
    );
    // One heartbeat with nothing after it is handed on without waiting for more.
    lone_tx.send(()).expect("the daemon waits");
    match next(&mut events).await {
        DaemonEvent::ToolProgress {
            beats, progress, ..
        } => {
            assert_eq!((beats, progress.elapsed_ms), (1, Some(999_999)));
        }
        other => panic!("expected the lone heartbeat, got {other:?}"),
    }
    client.close();
}

/// Frames read just before the connection ends — here 2,000 heartbeats, then the answer to
/// `session/new`, then the close, in one write — are all handed on before the end is reported, so
/// the answer answers its call instead of failing it as lost (a reader that queued frames for
/// another task and reported the end at once failed this).
#[tokio::test]
async fn f1_l3_frames_read_before_the_connection_ends_are_all_handled_and_an_answer_among_them_answers_its_call()
 {
    init_tracing();
    const BEATS: u64 = 2_000;
    let daemon = ScriptedDaemon::start(|mut peer: Peer| async move {
        peer.handshake().await;
        if peer.number > 1 {
            while peer.recv().await.is_some() {}
            return;
        }
        let new = peer.expect("session/new").await;
        let mut burst: Vec<_> = (0..BEATS)
            .map(|i| json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s0","update":{"sessionUpdate":"tool_call_update","toolCallId":"c","status":"in_progress","_meta":{"shellProgress":{"elapsedMs":i}}}}}))
            .collect();
        burst.push(json!({"jsonrpc":"2.0","id":new["id"],"result":{"sessionId":"s1"}}));
        peer.send_burst_and_close(&burst).await;
    })
    .await;
    let (client, _, mut events) = DaemonClient::connect(config(&daemon))
        .await
        .expect("connect");
    let opened = client.new_session("/").await;
    assert_eq!(
        opened
            .map(|n| n.session.as_str().to_owned())
            .ok()
            .as_deref(),
        Some("s1"),
        "the answer read with the connection's end answers session/new"
    );
    let mut beats = 0;
    while beats < BEATS {
        match next(&mut events).await {
            DaemonEvent::ToolProgress { beats: b, .. } => beats += u64::from(b),
            DaemonEvent::Disconnected { .. } => {
                panic!("the end reported before the frames read ahead of it ({beats} heartbeats)")
            }
            _ => {}
        }
    }
    assert_eq!(beats, BEATS, "every heartbeat read is handed on once");
    client.close();
}

/// A daemon redeployed with a rotated token (a Kubernetes Secret mounted as a file): while the
/// file still holds the old token the daemon refuses every reconnect; once the file holds the new
/// one, the next attempt is let in — no restart of the bridge.
#[tokio::test]
async fn l7_s1_a_token_rotated_in_its_file_is_taken_at_the_next_reconnect() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("daemon-token");
    let daemon = ScriptedDaemon::start(|mut peer: Peer| async move {
        peer.handshake().await;
        if peer.number == 1 {
            // Redeployed: this connection goes.
            let _ = peer.expect("session/new").await;
            peer.drop_connection();
            return;
        }
        let new = peer.expect("session/new").await;
        peer.reply(&new, json!({"sessionId": "after-rotation"}))
            .await;
        while peer.recv().await.is_some() {}
    })
    .await;
    std::fs::write(&file, format!("{}\n", daemon.token)).expect("write");
    let mut cfg = config(&daemon);
    cfg.token_file = Some(file.clone());
    let (client, _, mut events) = DaemonClient::connect(cfg).await.expect("connect");
    daemon.rotate_token("rotated-token");
    assert!(
        client.new_session("/").await.is_err(),
        "the first connection dropped"
    );
    // Refused while the file holds the old token, attempt after attempt.
    let deadline = tokio::time::Instant::now() + LIMIT;
    while daemon.refused() < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the client tries again"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        daemon.connections(),
        1,
        "no connection let in with the old token"
    );
    std::fs::write(&file, "rotated-token\n").expect("rotate");
    until(&mut events, |e| {
        matches!(e, DaemonEvent::Reconnected { .. })
    })
    .await;
    let session = client
        .new_session("/")
        .await
        .expect("a session after the rotation");
    assert_eq!(session.session.as_str(), "after-rotation");
    assert_eq!(daemon.connections(), 2);
    client.close();
}

/// A frame over `max_frame_size` cannot be read past: its connection is closed with 1009
/// ("message too big"), so the daemon's side sees why, and the client reconnects.
#[tokio::test]
async fn f2_a_frame_over_the_size_limit_closes_its_connection_with_1009_and_the_client_reconnects()
{
    init_tracing();
    let (code_tx, code_rx) = tokio::sync::oneshot::channel::<Option<u16>>();
    let code_tx = std::sync::Mutex::new(Some(code_tx));
    let daemon = ScriptedDaemon::start(move |mut peer: Peer| {
        let code_tx = code_tx.lock().unwrap().take();
        async move {
            peer.handshake().await;
            if let Some(code_tx) = code_tx {
                peer.send_raw(&format!("{{\"pad\":\"{}\"}}", "x".repeat(10_000)))
                    .await;
                let _ = code_tx.send(peer.close_code().await);
                return;
            }
            let new = peer.expect("session/new").await;
            peer.reply(&new, json!({"sessionId": "s2"})).await;
            while peer.recv().await.is_some() {}
        }
    })
    .await;
    let mut cfg = config(&daemon);
    cfg.max_frame_size = 4096;
    let (client, _, mut events) = DaemonClient::connect(cfg).await.expect("connect");
    let code = tokio::time::timeout(LIMIT, code_rx)
        .await
        .expect("the client closed within 30 s")
        .expect("the daemon reports");
    assert_eq!(code, Some(1009), "closed as \"message too big\"");
    until(&mut events, |e| {
        matches!(e, DaemonEvent::Reconnected { .. })
    })
    .await;
    let s = client
        .new_session("/")
        .await
        .expect("a session after the reconnect");
    assert_eq!(s.session.as_str(), "s2");
    client.close();
}

#[tokio::test]
async fn f2_garbage_and_a_frame_without_tool_call_id_are_skipped_and_the_session_lives_on() {
    init_tracing();
    let daemon = ScriptedDaemon::start(|mut peer: Peer| async move {
        peer.handshake().await;
        let new = peer.expect("session/new").await;
        peer.reply(&new, json!({"sessionId": "s1"})).await;
        let prompt = peer.expect("session/prompt").await;
        let update = |u: serde_json::Value| json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":u}});
        peer.send_raw("{this is not json").await;
        peer.send(update(json!({"sessionUpdate":"tool_call_update","status":"in_progress"}))).await;
        peer.send_raw("\u{0}\u{1}binary-ish").await;
        peer.send(update(json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"still here"}}))).await;
        peer.reply(&prompt, json!({"stopReason":"end_turn"})).await;
        let _ = peer.recv().await;
    })
    .await;
    let (client, _, mut events) = DaemonClient::connect(config(&daemon))
        .await
        .expect("connect");
    let s = client.new_session("/").await.expect("new").session;
    assert_eq!(
        client.prompt(&s, "x").await.expect("prompt"),
        StopReason::EndTurn
    );
    let seen = until(&mut events, |e| matches!(e, DaemonEvent::TurnEnded { .. })).await;
    assert_eq!(
        names(&seen),
        [
            "malformed",
            "malformed",
            "malformed",
            "agent_text",
            "turn_ended"
        ]
    );
    assert!(
        matches!(&seen[1], DaemonEvent::Malformed { session: Some(id), .. } if id.as_str() == "s1")
    );
    assert_eq!(client.stats().classifier.malformed, 3);
    assert_eq!(
        daemon.connections(),
        1,
        "the connection survived the garbage"
    );
}

#[tokio::test]
async fn daemon_requests_we_do_not_serve_get_method_not_found_so_the_daemon_never_waits() {
    let daemon = ScriptedDaemon::start(|mut peer: Peer| async move {
        peer.handshake().await;
        peer.send(json!({"jsonrpc":"2.0","id":"fs-1","method":"fs/read_text_file","params":{"path":"/etc/passwd"}})).await;
        let answer = peer.recv().await.expect("answer");
        assert_eq!(answer["id"], "fs-1");
        assert_eq!(answer["error"]["code"], -32601);
        peer.send(json!({"jsonrpc":"2.0","method":"confirmed","params":{}})).await;
        let _ = peer.recv().await;
    })
    .await;
    let (_client, _, mut events) = DaemonClient::connect(config(&daemon))
        .await
        .expect("connect");
    let seen = until(
        &mut events,
        |e| matches!(e, DaemonEvent::Other { method, .. } if method == "confirmed"),
    )
    .await;
    assert_eq!(names(&seen), ["other", "other"]);
}

#[tokio::test]
async fn permission_requests_without_a_policy_wait_for_answer_permission() {
    let daemon = ScriptedDaemon::start(|mut peer: Peer| async move {
        peer.handshake().await;
        peer.send(json!({"jsonrpc":"2.0","id":"_qwen_perm_x_1","method":"session/request_permission","params":{
            "sessionId":"s1","toolCall":{"toolCallId":"c1","title":"rm -rf /tmp/x","kind":"execute"},
            "options":[{"optionId":"proceed_once","kind":"allow_once","name":"Allow"},{"optionId":"cancel","kind":"reject_once","name":"Reject"}]}})).await;
        let answer = peer.recv().await.expect("answer");
        assert_eq!(answer, json!({"jsonrpc":"2.0","id":"_qwen_perm_x_1","result":{"outcome":{"outcome":"selected","optionId":"cancel"}}}));
        peer.send(json!({"jsonrpc":"2.0","method":"confirmed","params":{}})).await;
        let _ = peer.recv().await;
    })
    .await;
    let mut cfg = config(&daemon);
    cfg.permission_policy = None;
    let (client, _, mut events) = DaemonClient::connect(cfg).await.expect("connect");
    let DaemonEvent::PermissionRequested(req) = next(&mut events).await else {
        panic!("expected a permission request")
    };
    assert_eq!(req.options.len(), 2);
    client
        .answer_permission(
            &req.request_id,
            &PermissionOutcome::Selected("cancel".into()),
        )
        .await
        .expect("answer");
    let seen = until(
        &mut events,
        |e| matches!(e, DaemonEvent::Other { method, .. } if method == "confirmed"),
    )
    .await;
    assert_eq!(names(&seen), ["other"]);
}

#[tokio::test]
async fn a_wrong_token_is_a_clear_fatal_unauthorized_error() {
    let daemon = ScriptedDaemon::start(|_peer: Peer| async {}).await;
    let cfg = ClientConfig::new(&daemon.url).with_token("wrong");
    let err = DaemonClient::connect(cfg)
        .await
        .expect_err("must be refused");
    assert!(
        matches!(err, Error::Unauthorized { status: 401, .. }),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    assert!(err.to_string().contains("daemon.token"), "{err}");
    assert!(
        !format!("{err:?}").contains("wrong"),
        "the token never shows in errors"
    );
}

#[tokio::test]
async fn an_unreachable_daemon_and_a_bad_url_are_told_apart() {
    let err = DaemonClient::connect(ClientConfig::new("ws://127.0.0.1:1/acp"))
        .await
        .expect_err("refused");
    assert!(
        matches!(err, Error::Unreachable { .. }) && err.is_retryable(),
        "{err:?}"
    );
    let err = DaemonClient::connect(ClientConfig::new("http://127.0.0.1/acp"))
        .await
        .expect_err("bad url");
    assert!(
        matches!(err, Error::BadUrl { .. }) && !err.is_retryable(),
        "{err:?}"
    );
}

/// A daemon whose first connection drops mid-command; the second loads the session and finishes it.
async fn drop_then(session_known: bool) -> (Result<StopReason, Error>, Vec<DaemonEvent>, usize) {
    init_tracing();
    let daemon = ScriptedDaemon::start(move |mut peer: Peer| async move {
        let update = |u: serde_json::Value| json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":u}});
        peer.handshake().await;
        if peer.number == 1 {
            let new = peer.expect("session/new").await;
            peer.reply(&new, json!({"sessionId": "s1"})).await;
            peer.expect("session/prompt").await;
            peer.send(update(json!({"sessionUpdate":"tool_call","toolCallId":"c1","title":"sleep 5","kind":"execute","status":"in_progress"}))).await;
            peer.drop_connection();
            return;
        }
        let load = peer.expect("session/load").await;
        assert_eq!(load["params"]["sessionId"], "s1");
        assert_eq!(load["params"]["cwd"], "/work");
        if !session_known {
            peer.send(json!({"jsonrpc":"2.0","id":load["id"],"error":{"code":-32602,"message":"unknown session s1"}})).await;
            let _ = peer.recv().await;
            return;
        }
        peer.reply(&load, json!({})).await;
        // Replayed on load, then the live result: the replay is harmless (F4) and the result arrives once.
        peer.send(update(json!({"sessionUpdate":"tool_call","toolCallId":"c1","title":"sleep 5","kind":"execute","status":"in_progress"}))).await;
        peer.send(update(json!({"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed","rawOutput":{"output":"done","exitCode":0}}))).await;
        peer.send(update(json!({"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed","rawOutput":{"output":"done","exitCode":0}}))).await;
        peer.send(json!({"jsonrpc":"2.0","method":"_shell_agent/turn_complete","params":{"sessionId":"s1","stopReason":"end_turn"}})).await;
        let _ = peer.recv().await;
    })
    .await;
    let (client, _, mut events) = DaemonClient::connect(config(&daemon))
        .await
        .expect("connect");
    let s = client.new_session("/work").await.expect("new").session;
    let result = tokio::time::timeout(LIMIT, client.prompt(&s, "sleep 5"))
        .await
        .expect("prompt resolves");
    let seen = until(&mut events, |e| {
        matches!(e, DaemonEvent::TurnEnded { .. })
            || matches!(e, DaemonEvent::Reconnected { lost, .. } if !lost.is_empty())
    })
    .await;
    (result, seen, daemon.connections())
}

#[tokio::test]
async fn reconnect_reloads_open_turns_and_delivers_the_result_once() {
    let (result, seen, connections) = drop_then(true).await;
    assert_eq!(
        result.expect("the orphaned prompt completes"),
        StopReason::EndTurn
    );
    assert_eq!(connections, 2);
    let n = names(&seen);
    let pos = |name: &str| {
        n.iter()
            .position(|x| *x == name)
            .unwrap_or_else(|| panic!("{name} missing: {n:?}"))
    };
    assert_eq!(n[0], "tool_started");
    assert!(pos("disconnected") < pos("reconnected"), "{n:?}");
    assert!(pos("disconnected") < pos("tool_finished"), "{n:?}");
    assert_eq!(n.last(), Some(&"turn_ended"), "{n:?}");
    assert_eq!(
        n.iter().filter(|x| **x == "late_update").count(),
        1,
        "the duplicate result is late (F4): {n:?}"
    );
    let run = ToolRun::of(&seen);
    assert_eq!(
        run.finished.len(),
        1,
        "result delivered once: {:?}",
        run.names
    );
    assert!(seen.iter().any(|e| matches!(e, DaemonEvent::Reconnected { resumed, lost } if resumed.len() == 1 && lost.is_empty())));
}

#[tokio::test]
async fn reconnect_reports_a_session_the_daemon_lost_and_fails_its_prompt_clearly() {
    let (result, seen, _) = drop_then(false).await;
    assert!(
        matches!(result, Err(Error::SessionLost { .. })),
        "{result:?}"
    );
    assert!(
        matches!(seen.last(), Some(DaemonEvent::Reconnected { resumed, lost }) if resumed.is_empty() && lost.len() == 1)
    );
}

#[tokio::test]
async fn l4_no_pong_within_the_limit_means_reconnect() {
    init_tracing();
    let daemon = ScriptedDaemon::start(|mut peer: Peer| async move {
        peer.handshake().await;
        if peer.number == 1 {
            // Stop reading: pings pile up unanswered.
            let _peer = peer.go_silent(Duration::from_secs(5)).await;
        } else {
            let _ = peer.recv().await;
        }
    })
    .await;
    let mut cfg = config(&daemon);
    cfg.ping_interval = Duration::from_millis(100);
    cfg.pong_timeout = Duration::from_millis(300);
    let (_client, _, mut events) = DaemonClient::connect(cfg).await.expect("connect");
    let seen = until(&mut events, |e| {
        matches!(e, DaemonEvent::Reconnected { .. })
    })
    .await;
    assert!(
        matches!(&seen[0], DaemonEvent::Disconnected { reason } if reason.contains("no pong")),
        "{seen:?}"
    );
    assert_eq!(daemon.connections(), 2);
}

#[tokio::test]
async fn closing_the_client_ends_the_stream_with_closed_and_fails_new_calls() {
    let daemon = ScriptedDaemon::start(|mut peer: Peer| async move {
        peer.handshake().await;
        let _ = peer.recv().await;
    })
    .await;
    let (client, _, mut events) = DaemonClient::connect(config(&daemon))
        .await
        .expect("connect");
    client.close();
    let seen = until(&mut events, |e| matches!(e, DaemonEvent::Closed { .. })).await;
    assert_eq!(names(&seen), ["closed"]);
    assert!(client.new_session("/").await.is_err());
}

#[tokio::test]
async fn wss_urls_set_up_tls_with_ring_and_fail_cleanly_against_a_non_tls_server() {
    // The TLS trap of DESIGN.md §8: building a rustls client config must not panic. A plain TCP
    // server that hangs up makes the TLS handshake fail, which must be a retryable error.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            drop(tcp);
        }
    });
    let err = DaemonClient::connect(ClientConfig::new(format!("wss://{addr}/acp")))
        .await
        .expect_err("no TLS there");
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
}

/// L6: a daemon that replays a loaded session's history after answering the load (qwen-code: until
/// its `_qwen/notify` `replay_complete`, after which the replay's end is reported) — everything in
/// between is history, marked as such; the mode
/// is applied after the load; the workspace the daemon serves is read from `initialize`.
#[tokio::test]
async fn l6_a_loads_replay_is_history_until_the_daemons_marker_and_the_mode_is_reapplied() {
    init_tracing();
    let daemon = ScriptedDaemon::start(|mut peer: Peer| async move {
        let update = |u: serde_json::Value| json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":u}});
        let init = peer.expect("initialize").await;
        peer.reply(&init, json!({"protocolVersion": 1, "agentCapabilities": {"loadSession": true,
            "promptCapabilities": {"image": true}, "_meta": {"qwen": {"workspaceCwd": "/ws"}}}}))
            .await;
        let load = peer.expect("session/load").await;
        peer.reply(&load, json!({"modes": {"currentModeId": "auto"}})).await;
        let mode = peer.expect("session/set_mode").await;
        assert_eq!(mode["params"]["modeId"], "yolo", "{mode}");
        peer.reply(&mode, json!({})).await;
        peer.send(update(json!({"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"old prompt"}}))).await;
        peer.send(update(json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"old answer"}}))).await;
        peer.send(update(json!({"sessionUpdate":"tool_call","toolCallId":"c0","title":"echo old","kind":"execute","status":"pending"}))).await;
        peer.send(update(json!({"sessionUpdate":"tool_call_update","toolCallId":"c0","status":"completed","rawOutput":{"output":"old","exitCode":0}}))).await;
        peer.send(json!({"jsonrpc":"2.0","method":"_qwen/notify","params":{"kind":"turn_complete","data":{"sessionId":"s1","stopReason":"end_turn","promptId":"p0"}}})).await;
        peer.send(json!({"jsonrpc":"2.0","method":"_qwen/notify","params":{"kind":"replay_complete","data":{"replayedCount":5}}})).await;
        peer.send(update(json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"new answer"}}))).await;
        let _ = peer.recv().await;
    })
    .await;
    let mut cfg = config(&daemon);
    cfg.session_mode = Some("yolo".into());
    let (client, info, mut events) = DaemonClient::connect(cfg).await.expect("connect");
    assert!(info.images);
    assert_eq!(info.workspace.as_deref(), Some(std::path::Path::new("/ws")));
    assert_eq!(
        info.session_cwd(None).expect("no mismatch").as_deref(),
        Some(std::path::Path::new("/ws"))
    );
    let mismatch = info
        .session_cwd(Some(std::path::Path::new("/elsewhere")))
        .expect_err("another directory is refused");
    assert!(mismatch.to_string().contains("daemon.cwd"), "{mismatch}");

    let s1 = SessionId::parse("s1").expect("id");
    assert!(!client.is_bound(&s1));
    client.load_session(&s1, "/ws").await.expect("load");
    assert!(
        client.is_bound(&s1),
        "a loaded session belongs to this connection"
    );
    let seen = until(&mut events, |e| matches!(e, DaemonEvent::AgentText { .. })).await;
    let n = names(&seen);
    assert_eq!(
        n,
        [
            "replayed",
            "replayed",
            "replayed",
            "replayed",
            "replayed",
            "other",
            "replay_ended",
            "agent_text"
        ],
        "history until the marker, live after it: {seen:?}"
    );
    assert!(matches!(&seen[1], DaemonEvent::Replayed { event, .. }
            if matches!(&**event, DaemonEvent::AgentText { text, .. } if text == "old answer")));
    // An old turn's end in the replay is history too (D6: it must not end a resumed turn as live).
    assert!(
        matches!(&seen[4], DaemonEvent::Replayed { event, .. }
            if matches!(&**event, DaemonEvent::Other { kind: Some(k), stop_reason: Some(StopReason::EndTurn), .. } if k == "turn_complete")),
        "{seen:?}"
    );
    assert!(
        matches!(&seen[7], DaemonEvent::AgentText { text, .. } if text == "new answer"),
        "{seen:?}"
    );
}

/// L6: a daemon that replays before answering the load (shell-agent): the frames before the answer
/// are history, then the replay's end is reported (at the answer, in frame order), the ones after it
/// are live; a reconnect unbinds every session until it is loaded again.
#[tokio::test]
async fn l6_a_reconnect_unbinds_sessions_and_a_replay_before_the_answer_is_history() {
    init_tracing();
    let daemon = ScriptedDaemon::start(|mut peer: Peer| async move {
        let update = |u: serde_json::Value| json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":u}});
        peer.handshake().await;
        if peer.number == 1 {
            let new = peer.expect("session/new").await;
            peer.reply(&new, json!({"sessionId": "s1"})).await;
            let _ = peer.expect("session/prompt").await;
            peer.drop_connection();
            return;
        }
        let load = peer.expect("session/load").await;
        peer.send(update(json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"old"}}))).await;
        peer.reply(&load, json!({})).await;
        peer.send(update(json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"live"}}))).await;
        peer.send(json!({"jsonrpc":"2.0","method":"_shell_agent/turn_complete","params":{"sessionId":"s1","stopReason":"end_turn"}})).await;
        let _ = peer.recv().await;
    })
    .await;
    let (client, _, mut events) = DaemonClient::connect(config(&daemon))
        .await
        .expect("connect");
    let s1 = client.new_session("/work").await.expect("new").session;
    assert!(client.is_bound(&s1));
    let prompt = {
        let (client, s1) = (client.clone(), s1.clone());
        tokio::spawn(async move { client.prompt(&s1, "x").await })
    };
    let mut seen = until(&mut events, |e| matches!(e, DaemonEvent::TurnEnded { .. })).await;
    if !seen
        .iter()
        .any(|e| matches!(e, DaemonEvent::Reconnected { .. }))
    {
        seen.extend(
            until(&mut events, |e| {
                matches!(e, DaemonEvent::Reconnected { .. })
            })
            .await,
        );
    }
    // The supervisor's `reconnected` and the connection's live frames race; their order is not the point.
    let n: Vec<_> = names(&seen)
        .into_iter()
        .filter(|n| *n != "reconnected")
        .collect();
    assert_eq!(
        n,
        [
            "disconnected",
            "replayed",
            "replay_ended",
            "agent_text",
            "other",
            "turn_ended"
        ],
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .any(|e| matches!(e, DaemonEvent::Reconnected { .. }))
    );
    assert!(
        matches!(seen.iter().find(|e| e.name() == "agent_text"),
            Some(DaemonEvent::AgentText { text, .. }) if text == "live"),
        "{seen:?}"
    );
    assert!(
        client.is_bound(&s1),
        "the open turn's session was loaded on the new connection"
    );
    prompt.await.expect("join").expect("the turn ended");
}

/// L7 at start-up: `connect_or_wait` on a daemon that does not listen yet starts without it (no
/// `AgentInfo`, calls fail as `ConnectionLost`, which the bridge holds on); once a daemon listens on
/// that port the client connects by itself, reports `Reconnected` and works. Not waiting, the same
/// URL is `Unreachable`; a bad URL is an error even when waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l7_connect_or_wait_starts_without_the_daemon_and_connects_once_it_listens() {
    init_tracing();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let url = format!("ws://127.0.0.1:{port}/acp");
    let token = "token-of-the-late-daemon";
    let err = DaemonClient::connect_or_wait(ClientConfig::new(&url).with_token(token), false)
        .await
        .expect_err("not waiting");
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
    let err = DaemonClient::connect_or_wait(ClientConfig::new("http://127.0.0.1/acp"), true)
        .await
        .expect_err("a bad URL is not waited out");
    assert!(matches!(err, Error::BadUrl { .. }), "{err:?}");

    let mut cfg = ClientConfig::new(&url).with_token(token);
    cfg.backoff_base = Duration::from_millis(20);
    cfg.backoff_cap = Duration::from_millis(200);
    let (client, info, mut events) = DaemonClient::connect_or_wait(cfg, true)
        .await
        .expect("starts without the daemon");
    assert!(info.is_none());
    assert!(client.agent_info().is_none());
    answered_later(
        &client,
        &mut events,
        format!("127.0.0.1:{port}").parse().expect("addr"),
        token,
    )
    .await;
}

/// For a client started without its daemon: calls fail as retryable until a daemon answers on
/// `addr`; then the client reports the connection, knows the agent and opens a session.
async fn answered_later(
    client: &DaemonClient,
    events: &mut EventStream,
    addr: std::net::SocketAddr,
    token: &str,
) {
    let dir = tempfile::tempdir().expect("tmp");
    let err = client
        .new_session(dir.path())
        .await
        .expect_err("no daemon yet");
    assert!(err.is_retryable(), "{err:?}");
    let agent = shell_agent::ShellAgent::start(
        addr,
        Some(token.into()),
        shell_agent::AgentConfig::default(),
    )
    .await
    .expect("the daemon starts on its port");
    let first = next(events).await;
    assert!(
        matches!(first, DaemonEvent::Reconnected { .. }),
        "{first:?}"
    );
    assert!(client.agent_info().is_some());
    client
        .new_session(dir.path())
        .await
        .expect("a session once connected");
    client.close();
    agent.shutdown().await;
}

/// L7 at start-up: a daemon that takes the WebSocket and hangs up before answering `initialize` — a
/// daemon restarting, or an agent-host whose agent has just ended — is waited for like one that does
/// not listen yet: the bridge starts without it and connects once a daemon answers on that URL. (It
/// made start-up fail with "the connection to the daemon was lost"; and a retry that met the same
/// hang-up waited a minute for its `initialize` answer.) Not waiting, it stays an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l7_a_daemon_that_hangs_up_before_answering_at_start_up_is_waited_for() {
    init_tracing();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let url = format!("ws://{addr}/acp");
    let token = "token-of-the-restarting-daemon";
    // Three connections taken and hung up on after the upgrade, before any answer: the start-up
    // without waiting, the start-up that waits, and the first retry — which must count as a failed
    // attempt at once, not wait the 60 s `initialize` timeout on a closed connection.
    let hang_up = tokio::spawn(async move {
        for _ in 0..3 {
            let (tcp, _) = listener.accept().await.expect("accept");
            let mut ws = tokio_tungstenite::accept_async(tcp).await.expect("upgrade");
            let _ = futures_util::StreamExt::next(&mut ws).await;
            drop(ws);
        }
    });
    let err = DaemonClient::connect_or_wait(ClientConfig::new(&url).with_token(token), false)
        .await
        .expect_err("not waiting, a hang-up fails start-up");
    assert!(matches!(err, Error::ConnectionLost), "{err:?}");

    let mut cfg = ClientConfig::new(&url).with_token(token);
    cfg.backoff_base = Duration::from_millis(20);
    cfg.backoff_cap = Duration::from_millis(200);
    let (client, info, mut events) =
        tokio::time::timeout(LIMIT, DaemonClient::connect_or_wait(cfg, true))
            .await
            .expect("in time")
            .expect("starts without the daemon");
    assert!(info.is_none());
    hang_up.await.expect("hang-ups done");
    answered_later(&client, &mut events, addr, token).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l7_a_daemon_back_with_a_refused_token_is_retried_until_it_accepts_again() {
    init_tracing();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let token = "token-of-the-project";
    let agent = shell_agent::ShellAgent::start(
        addr,
        Some(token.into()),
        shell_agent::AgentConfig::default(),
    )
    .await
    .expect("daemon");
    let mut cfg = ClientConfig::new(format!("ws://{addr}/acp")).with_token(token);
    cfg.backoff_base = Duration::from_millis(20);
    cfg.backoff_cap = Duration::from_millis(100);
    cfg.project = Some("p1".into());
    cfg.key = "projects[p1].daemon".into();
    let (client, info, mut events) = DaemonClient::connect_or_wait(cfg, true)
        .await
        .expect("connects");
    assert!(info.is_some());
    agent.shutdown().await;
    assert!(matches!(
        next(&mut events).await,
        DaemonEvent::Disconnected { .. }
    ));

    // Back on its port with another token: every attempt is refused, and the client keeps trying.
    let (refused, task) = chat_bridge_tests::refusing_daemon(port).await;
    let deadline = tokio::time::Instant::now() + LIMIT;
    while refused.load(std::sync::atomic::Ordering::SeqCst) < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the client stopped retrying"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        tokio::time::timeout(Duration::ZERO, events.recv())
            .await
            .is_err(),
        "no event (no Closed) while the token is refused"
    );
    task.abort();
    let _ = task.await;

    // The token is fixed: the next attempt is accepted and the client is usable again.
    let agent = shell_agent::ShellAgent::start(
        addr,
        Some(token.into()),
        shell_agent::AgentConfig::default(),
    )
    .await
    .expect("daemon back with the right token");
    let back = next(&mut events).await;
    assert!(matches!(back, DaemonEvent::Reconnected { .. }), "{back:?}");
    let dir = tempfile::tempdir().expect("tmp");
    client
        .new_session(dir.path())
        .await
        .expect("a session once accepted again");
    client.close();
    agent.shutdown().await;
}

#[test]
fn l7_a_refused_token_names_the_projects_token_file() {
    let e = Error::Unauthorized {
        url: "ws://d/acp".into(),
        status: 401,
        key: "projects[p1].daemon".into(),
    };
    assert!(
        e.to_string().contains("projects[p1].daemon.token_file"),
        "{e}"
    );
    let e = Error::Unauthorized {
        url: "ws://d/acp".into(),
        status: 401,
        key: "daemon".into(),
    };
    assert!(e.to_string().contains("check daemon.token"), "{e}");
}

#[tokio::test]
async fn l7_a_daemon_back_serving_another_workspace_is_not_used_until_it_serves_the_cwd_again() {
    init_tracing();
    let daemon = ScriptedDaemon::start(|mut peer: Peer| async move {
        let init = peer.expect("initialize").await;
        // Connection 2 is the daemon restarted in another workspace; 1 and 3 serve /w/a.
        let served = if peer.number == 2 { "/w/b" } else { "/w/a" };
        peer.reply(
            &init,
            json!({"protocolVersion": 1, "agentCapabilities": {"loadSession": true,
            "_meta": {"qwen": {"workspaceCwd": served}}}}),
        )
        .await;
        match peer.number {
            // Dropped once the client speaks (not racing the answer to initialize).
            1 => {
                peer.expect("session/new").await;
                peer.drop_connection();
            }
            2 => while peer.recv().await.is_some() {},
            _ => {
                let new = peer.expect("session/new").await;
                assert_eq!(new["params"]["cwd"], "/w/a");
                peer.reply(&new, json!({"sessionId": "s3"})).await;
                while peer.recv().await.is_some() {}
            }
        }
    })
    .await;
    let mut cfg = config(&daemon);
    cfg.cwd = Some("/w/a".into());
    cfg.key = "projects[p1].daemon".into();
    let (client, info, mut events) = DaemonClient::connect_or_wait(cfg, true)
        .await
        .expect("connects");
    assert_eq!(info.and_then(|i| i.workspace), Some("/w/a".into()));
    let _ = client.new_session("/w/a").await;
    assert!(matches!(
        next(&mut events).await,
        DaemonEvent::Disconnected { .. }
    ));
    // Connection 2 (another workspace) is not reported as a reconnect; connection 3 is.
    let back = next(&mut events).await;
    assert!(matches!(back, DaemonEvent::Reconnected { .. }), "{back:?}");
    assert_eq!(
        daemon.connections(),
        3,
        "the mismatched connection was skipped"
    );
    let s = client
        .new_session("/w/a")
        .await
        .expect("new on the right workspace");
    assert_eq!(s.session.as_str(), "s3");
    let e = Error::WorkspaceChanged {
        key: "projects[p1].daemon".into(),
        workspace: "/w/b".into(),
        expected: "/w/a".into(),
    };
    assert!(
        e.to_string().contains("projects[p1].daemon.cwd is /w/a"),
        "{e}"
    );
    client.close();
}
