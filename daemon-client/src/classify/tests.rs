//! F-rule tests on literal frames, and every frame of the real qwen captures.

use super::*;
use crate::event::{ShellProgress, StopReason};

fn classify_all(frames: &[&str]) -> Vec<DaemonEvent> {
    let mut c = Classifier::new();
    frames
        .iter()
        .filter_map(|f| event_of(c.classify(f.as_bytes())))
        .collect()
}

fn update(update: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s1","update":{update}}}}}"#
    )
}

const HEARTBEAT: &str = r#"{"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "111f4f4e-c5c0-4d46-b04c-f5c858718827", "update": {"_meta": {"toolName": "run_shell_command", "shellProgress": {"type": "shell_progress", "elapsedMs": 20001, "lastOutputAgeMs": 19232, "totalLines": 1, "totalBytes": 7, "timeoutMs": 25000}}, "status": "in_progress", "toolCallId": "call_1795983579263", "sessionUpdate": "tool_call_update"}}}"#;

#[test]
fn f1_kindless_in_progress_update_is_a_heartbeat_with_its_progress() {
    let events = classify_all(&[HEARTBEAT]);
    let [DaemonEvent::ToolProgress { call, progress, .. }] = events.as_slice() else {
        panic!("expected one ToolProgress, got {events:?}");
    };
    assert_eq!(call.as_str(), "call_1795983579263");
    assert_eq!(
        *progress,
        ShellProgress {
            elapsed_ms: Some(20001),
            last_output_age_ms: Some(19232),
            total_lines: Some(1),
            total_bytes: Some(7),
            timeout_ms: Some(25000)
        }
    );
}

#[test]
fn f1_heartbeat_without_shell_progress_or_with_unknown_fields_is_still_a_heartbeat() {
    let bare =
        update(r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress"}"#);
    let odd = update(
        r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress","_meta":{"shellProgress":{"elapsedMs":5,"future":true}}}"#,
    );
    let events = classify_all(&[&bare, &odd]);
    assert!(
        matches!(&events[0], DaemonEvent::ToolProgress { progress, .. } if *progress == ShellProgress::default())
    );
    assert!(
        matches!(&events[1], DaemonEvent::ToolProgress { progress, .. } if progress.elapsed_ms == Some(5))
    );
    let mut c = Classifier::new();
    c.classify(bare.as_bytes());
    assert_eq!(c.stats().heartbeats, 1);
    assert_eq!(c.stats().malformed, 0);
}

#[test]
fn f1_kindless_in_progress_update_with_content_is_live_output() {
    let frame = update(
        r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress","content":[{"type":"content","content":{"type":"text","text":"line 1\n"}}]}"#,
    );
    assert_eq!(
        classify_all(&[&frame]),
        vec![DaemonEvent::ToolOutput {
            session: SessionId::parse("s1").unwrap(),
            call: ToolCallId::parse("c1").unwrap(),
            text: "line 1\n".into()
        }]
    );
}

#[test]
fn f2_tool_call_title_falls_back_to_tool_name_then_tool() {
    let named = update(
        r#"{"sessionUpdate":"tool_call","toolCallId":"a","_meta":{"toolName":"run_shell_command"}}"#,
    );
    let bare = update(r#"{"sessionUpdate":"tool_call","toolCallId":"b"}"#);
    let titles: Vec<_> = classify_all(&[&named, &bare])
        .into_iter()
        .map(|e| match e {
            DaemonEvent::ToolStarted { info, .. } => info.title,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        titles,
        vec![
            Some("run_shell_command".to_owned()),
            Some("tool".to_owned())
        ]
    );
}

#[test]
fn f2_frame_without_tool_call_id_is_malformed_and_the_next_frame_still_classifies() {
    let missing = update(r#"{"sessionUpdate":"tool_call_update","status":"in_progress"}"#);
    let mut c = Classifier::new();
    let first = event_of(c.classify(missing.as_bytes()));
    assert!(
        matches!(&first, Some(DaemonEvent::Malformed { session: Some(s), .. }) if s.as_str() == "s1"),
        "{first:?}"
    );
    assert!(matches!(
        event_of(c.classify(b"{not json")),
        Some(DaemonEvent::Malformed { session: None, .. })
    ));
    assert!(matches!(
        event_of(c.classify(HEARTBEAT.as_bytes())),
        Some(DaemonEvent::ToolProgress { .. })
    ));
    assert_eq!(c.stats().malformed, 2);
}

#[test]
fn f2_malformed_reasons_never_echo_frame_content() {
    let secret = update(
        r#"{"sessionUpdate":"tool_call_update","toolCallId":"c","rawOutput":{"exitCode":"SECRET-OUTPUT"},"status":"completed"}"#,
    );
    let bad_type = r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call","toolCallId":"SECRET-OUTPUT","title":5}}}"#;
    for frame in [secret.as_str(), bad_type] {
        let ev = event_of(Classifier::new().classify(frame.as_bytes()));
        assert!(
            !format!("{ev:?}").contains("SECRET-OUTPUT")
                || matches!(ev, Some(DaemonEvent::ToolFinished { .. })),
            "{ev:?}"
        );
    }
}

#[test]
fn f3_outcomes_follow_status_raw_output_and_error_type() {
    let cases = [
        (
            r#""status":"completed","rawOutput":{"output":"42","exitCode":0}"#,
            Outcome::Completed,
        ),
        (
            r#""status":"failed","rawOutput":{"outcome":"timed_out","output":"partial","signal":15}"#,
            Outcome::TimedOut,
        ),
        (
            r#""status":"failed","rawOutput":{"error":{"type":"execution_timeout"}}"#,
            Outcome::TimedOut,
        ),
        (
            r#""status":"failed","rawOutput":{"outcome":"cancelled"}"#,
            Outcome::Cancelled,
        ),
        (
            r#""status":"failed","rawOutput":{"exitCode":2,"output":"boom"}"#,
            Outcome::Failed,
        ),
        (r#""status":"failed""#, Outcome::Failed),
    ];
    for (i, (fields, want)) in cases.iter().enumerate() {
        let frame = update(&format!(
            r#"{{"sessionUpdate":"tool_call_update","toolCallId":"c{i}",{fields},"content":[{{"type":"content","content":{{"type":"text","text":"summary {i}"}}}}]}}"#
        ));
        match classify_all(&[&frame]).as_slice() {
            [DaemonEvent::ToolFinished { result, .. }] => {
                assert_eq!(result.outcome, *want, "case {i}");
                assert_eq!(
                    result.summary.as_deref(),
                    Some(format!("summary {i}").as_str())
                );
            }
            other => panic!("case {i}: {other:?}"),
        }
    }
}

#[test]
fn f3_output_prefers_raw_output_and_falls_back_to_content_text() {
    let with_raw = update(
        r#"{"sessionUpdate":"tool_call_update","toolCallId":"a","status":"failed","rawOutput":{"outcome":"timed_out","output":"partial","exitCode":0,"signal":15},"content":[{"type":"content","content":{"type":"text","text":"Command timed out"}}]}"#,
    );
    let without = update(
        r#"{"sessionUpdate":"tool_call_update","toolCallId":"b","status":"completed","content":[{"type":"content","content":{"type":"text","text":"done"}}]}"#,
    );
    let events = classify_all(&[&with_raw, &without]);
    let DaemonEvent::ToolFinished { result: a, .. } = &events[0] else {
        panic!("{events:?}")
    };
    assert_eq!(
        (a.output.as_str(), a.exit_code, a.signal),
        ("partial", Some(0), Some(15))
    );
    let DaemonEvent::ToolFinished { result: b, .. } = &events[1] else {
        panic!("{events:?}")
    };
    assert_eq!(b.output, "done");
}

#[test]
fn f4_updates_after_a_terminal_update_are_late_and_ignored() {
    let done =
        update(r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed"}"#);
    let late =
        update(r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress"}"#);
    let pending = update(r#"{"sessionUpdate":"tool_call","toolCallId":"c1","status":"pending"}"#);
    let mut c = Classifier::new();
    let kinds: Vec<_> = [&done, &late, &pending, &done]
        .iter()
        .filter_map(|f| event_of(c.classify(f.as_bytes())).map(|e| e.name()))
        .collect();
    assert_eq!(
        kinds,
        ["tool_finished", "late_update", "late_update", "late_update"]
    );
    assert_eq!(c.stats().late, 3);
    assert!(c.is_settled("s1", "c1"));
    // Another session's call with the same id is not affected.
    let other = late.replace("\"s1\"", "\"s2\"");
    assert!(matches!(
        event_of(c.classify(other.as_bytes())),
        Some(DaemonEvent::ToolProgress { .. })
    ));
}

#[test]
fn f4_a_session_remembers_its_last_64_settled_calls_and_forgets_older_ones() {
    let mut c = Classifier::new();
    let finish = |id: usize| {
        update(&format!(
            r#"{{"sessionUpdate":"tool_call_update","toolCallId":"call-{id}","status":"completed"}}"#
        ))
    };
    for id in 0..=super::SETTLED_MEMORY {
        assert!(matches!(
            event_of(c.classify(finish(id).as_bytes())),
            Some(DaemonEvent::ToolFinished { .. })
        ));
    }
    assert!(!c.is_settled("s1", "call-0"), "the oldest is forgotten");
    for id in 1..=super::SETTLED_MEMORY {
        assert!(c.is_settled("s1", &format!("call-{id}")), "call-{id}");
    }
    // A late frame for a remembered call is still recognised, with its id.
    let late = update(
        r#"{"sessionUpdate":"tool_call_update","toolCallId":"call-7","status":"in_progress"}"#,
    );
    match event_of(c.classify(late.as_bytes())) {
        Some(e @ DaemonEvent::LateUpdate { .. }) => assert!(format!("{e:?}").contains("call-7")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn f5_unknown_update_kinds_and_methods_are_other() {
    let kind = update(r#"{"sessionUpdate":"brand_new_thing","x":1}"#);
    let method = r#"{"jsonrpc":"2.0","method":"_vendor/whatever","params":[1,2,3]}"#;
    let events = classify_all(&[&kind, method]);
    assert!(
        matches!(&events[0], DaemonEvent::Other { kind: Some(k), .. } if k == "brand_new_thing")
    );
    assert!(
        matches!(&events[1], DaemonEvent::Other { method, .. } if method == "_vendor/whatever")
    );
}

#[test]
fn f5_unknown_requests_are_other_requests_to_answer() {
    let mut c = Classifier::new();
    match c.classify(br#"{"jsonrpc":"2.0","id":"x-1","method":"fs/read_text_file","params":{}}"#) {
        Inbound::Request { id, method, event } => {
            assert_eq!(id, RequestId::from("x-1"));
            assert_eq!(method, "fs/read_text_file");
            assert_eq!(event.name(), "other");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn f6_empty_text_chunk_with_usage_is_usage_not_text() {
    let usage = update(
        r#"{"_meta":{"usage":{"inputTokens":10,"outputTokens":5,"totalTokens":15},"durationMs":555},"content":{"text":"","type":"text"},"sessionUpdate":"agent_message_chunk"}"#,
    );
    let text = update(
        r#"{"content":{"text":"Command finished.","type":"text"},"sessionUpdate":"agent_message_chunk"}"#,
    );
    let events = classify_all(&[&usage, &text]);
    assert!(
        matches!(&events[0], DaemonEvent::Usage { usage, .. } if usage.total_tokens == Some(15))
    );
    assert!(
        matches!(&events[1], DaemonEvent::AgentText { text, .. } if text == "Command finished.")
    );
}

#[test]
fn responses_keep_result_or_error_and_stop_reason_parses() {
    let mut c = Classifier::new();
    let Inbound::Response {
        id,
        result: Ok(raw),
    } = c.classify(br#"{"jsonrpc":"2.0","id":3,"result":{"stopReason":"cancelled"}}"#)
    else {
        panic!("expected a response")
    };
    assert_eq!(id, RequestId::Number(3));
    assert_eq!(parse_stop_reason(&raw), Ok(StopReason::Cancelled));
    let Inbound::Response { result: Err(e), .. } = c.classify(
        br#"{"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"unknown session"}}"#,
    ) else {
        panic!("expected an error response")
    };
    assert_eq!(e.code, -32602);
}

#[test]
fn permission_requests_carry_id_options_and_tool_call() {
    let frame = r#"{"jsonrpc":"2.0","id":"_qwen_perm_x_1","method":"session/request_permission","params":{"sessionId":"s1","toolCall":{"toolCallId":"c1","title":"rm -rf build","kind":"execute","rawInput":{"timeout":25000}},"options":[{"kind":"allow_once","name":"Allow","optionId":"proceed_once"},{"kind":"reject_once","name":"Reject","optionId":"cancel"}]}}"#;
    let Inbound::Request {
        event: DaemonEvent::PermissionRequested(req),
        ..
    } = Classifier::new().classify(frame.as_bytes())
    else {
        panic!("expected a permission request")
    };
    assert_eq!(req.request_id, RequestId::from("_qwen_perm_x_1"));
    assert_eq!(req.call.as_ref().map(ToolCallId::as_str), Some("c1"));
    assert_eq!(req.info.timeout, Some(Duration::from_millis(25000)));
    let ids: Vec<_> = req.options.iter().map(|o| o.option_id.as_str()).collect();
    assert_eq!(ids, ["proceed_once", "cancel"]);
}

/// Reads every capture in `../shared/fixtures/acp-qwen-0.24.4/`.
pub(crate) fn capture_frames() -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/acp-qwen-0.24.4");
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("captures at {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    for path in files {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for line in std::fs::read_to_string(&path).expect("capture").lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("capture line");
            if v["dir"] == "in" {
                out.push((name.clone(), serde_json::to_vec(&v["msg"]).expect("msg")));
            }
        }
    }
    out
}

#[test]
fn every_captured_qwen_frame_decodes_without_malformed() {
    let frames = capture_frames();
    assert!(
        frames.len() >= 60,
        "expected all captures, found {} inbound frames",
        frames.len()
    );
    let mut c = Classifier::new();
    let mut names = std::collections::BTreeMap::<&str, usize>::new();
    for (file, bytes) in &frames {
        match c.classify(bytes) {
            Inbound::Event(DaemonEvent::Malformed { reason, .. }) => {
                panic!("{file}: malformed: {reason}")
            }
            Inbound::Event(e)
            | Inbound::Request { event: e, .. }
            | Inbound::VendorTurnComplete { event: e, .. } => {
                *names.entry(e.name()).or_default() += 1;
            }
            Inbound::Response { .. } => *names.entry("response").or_default() += 1,
        }
    }
    assert_eq!(c.stats().malformed, 0);
    assert_eq!(names.get("tool_progress"), Some(&5), "{names:?}");
    assert_eq!(names.get("tool_finished"), Some(&5), "{names:?}");
    assert_eq!(names.get("permission_requested"), Some(&4), "{names:?}");
    assert_eq!(names.get("tool_started"), Some(&5), "{names:?}");
}

#[test]
fn f1_heartbeat_with_an_unreadable_meta_is_still_a_heartbeat_not_malformed() {
    // A wrong type inside `_meta` fails the single-pass decode; the lenient path must still see a
    // heartbeat (with no progress figures), never a malformed frame.
    let odd = update(
        r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress","_meta":{"shellProgress":{"elapsedMs":"ten"},"toolName":7}}"#,
    );
    let events = classify_all(&[&odd]);
    assert!(
        matches!(&events[0], DaemonEvent::ToolProgress { progress, .. } if *progress == ShellProgress::default()),
        "{events:?}"
    );
}

#[test]
fn fast_and_lenient_paths_agree_on_every_captured_frame() {
    // The lenient path is what the fast path falls back to; for well-formed frames both must give
    // the same event.
    let mut fast = Classifier::new();
    let mut lenient = Classifier::new();
    for (file, bytes) in capture_frames() {
        let a = event_of(fast.classify(&bytes));
        let b = event_of(lenient.classify_lenient(&bytes));
        assert_eq!(a, b, "{file}");
    }
}

#[test]
fn heartbeats_and_output_take_the_single_pass_decode() {
    let output = update(
        r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress","content":[{"type":"content","content":{"type":"text","text":"x"}}]}"#,
    );
    for frame in [HEARTBEAT, output.as_str()] {
        let fast = serde_json::from_slice::<FastUpdate<'_>>(frame.as_bytes());
        assert!(
            matches!(
                &fast,
                Ok(FastUpdate {
                    id: None,
                    method: Some(_),
                    params: Some(_)
                })
            ),
            "{fast:?}"
        );
    }
}

#[test]
fn f2_updates_never_take_the_tool_name_as_a_title() {
    let start = update(
        r#"{"sessionUpdate":"tool_call","toolCallId":"c1","title":"sleep 30","kind":"execute"}"#,
    );
    let spawned = update(
        r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress","kind":"execute","_meta":{"toolName":"shell"}}"#,
    );
    let events = classify_all(&[&start, &spawned]);
    assert!(
        matches!(&events[1], DaemonEvent::ToolUpdated { info, .. } if info.title.is_none() && info.tool_name.as_deref() == Some("shell")),
        "{events:?}"
    );
}

#[test]
fn s4_a_lone_surrogate_escape_in_output_is_a_replacement_character_not_a_lost_result() {
    // A daemon written in JavaScript can cut a string between the halves of a surrogate pair (an
    // emoji at the edge of a truncation); JSON.stringify then writes a lone `\ud83d`.
    let events = classify_all(&[
        &update(
            r#"{"sessionUpdate":"tool_call","toolCallId":"c1","title":"cat","kind":"execute","status":"in_progress"}"#,
        ),
        &update(
            r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed","rawOutput":{"output":"cut \ud83d here, \uDE00 there, kept \ud83d\ude00 whole, typed \\ud83d as is"}}"#,
        ),
    ]);
    let result = events
        .iter()
        .find_map(|e| match e {
            DaemonEvent::ToolFinished { result, .. } => Some(result.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("the result arrives: {events:?}"));
    assert_eq!(
        result.output,
        "cut \u{FFFD} here, \u{FFFD} there, kept 😀 whole, typed \\ud83d as is"
    );
}

/// Every captured frame's classification, as `Debug` text, recorded before the single-pass decode
/// learnt to type `rawOutput` and `content` in place (issue 20): the new decode must reach exactly
/// the events the old one did. `CLASSIFY_GOLDEN=write` records the file again (only for a change
/// that means to change an event).
#[test]
fn every_captured_frame_classifies_as_recorded_before_the_typed_decode() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/classified-captures.txt");
    let mut c = Classifier::new();
    let mut got = String::new();
    for (file, bytes) in capture_frames() {
        got.push_str(&format!("{file}: {:?}\n", c.classify(&bytes)));
    }
    if std::env::var("CLASSIFY_GOLDEN").as_deref() == Ok("write") {
        std::fs::write(&path, &got).expect("write golden");
    }
    let want = std::fs::read_to_string(&path).expect("golden file");
    assert!(got.lines().count() >= 60);
    for (g, w) in got.lines().zip(want.lines()) {
        assert_eq!(g, w);
    }
    assert_eq!(got.lines().count(), want.lines().count());
}

#[test]
fn captured_results_and_chunks_take_the_single_pass_decode_with_raw_output_typed_in_place() {
    // Issue 20: a result's `rawOutput` and `content` are read in the one pass, not skipped and
    // parsed again.
    let mut n = 0;
    for (file, bytes) in capture_frames() {
        let text = String::from_utf8(bytes).expect("utf-8");
        let is_result = text.contains("\"rawOutput\":{") && text.contains("tool_call_update");
        let is_chunk = text.contains("\"sessionUpdate\":\"agent_message_chunk\"");
        if !(is_result || is_chunk) {
            continue;
        }
        let fast = serde_json::from_str::<FastUpdate<'_>>(&text);
        assert!(
            matches!(
                &fast,
                Ok(FastUpdate {
                    id: None,
                    method: Some(_),
                    params: Some(_)
                })
            ),
            "{file}: {:?}",
            fast.err()
        );
        n += 1;
    }
    assert!(n >= 10, "{n}");
}

/// Any JSON value, small: what a daemon might put where we expect `content` or `rawOutput`.
fn any_json() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(|f| serde_json::json!(f)),
        prop::sample::select(vec!["text", "content", "output", "timed_out", "x\ny\u{e9}"])
            .prop_map(serde_json::Value::from),
        ".{0,12}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "type", "text", "content", "output", "outcome", "exitCode", "signal", "error",
                ])
                .prop_map(str::to_owned),
                inner,
                0..4,
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest::proptest! {
    /// Issue 20: the single-pass decode reads `content` and `rawOutput` in place; whatever they
    /// hold, a frame it accepts classifies exactly as the lenient path (the former decode) does.
    #[test]
    fn fast_and_lenient_paths_agree_on_any_content_and_raw_output(
        content in any_json(),
        raw_output in any_json(),
        kind in proptest::sample::select(vec!["tool_call_update", "tool_call", "agent_message_chunk", "agent_thought_chunk"]),
        status in proptest::sample::select(vec!["completed", "failed", "in_progress", "pending"]),
    ) {
        let frame = serde_json::json!({"jsonrpc": "2.0", "method": "session/update", "params": {
            "sessionId": "s1", "update": {"sessionUpdate": kind, "toolCallId": "c1", "status": status,
            "content": content, "rawOutput": raw_output}}});
        let bytes = serde_json::to_vec(&frame).expect("json");
        let a = event_of(Classifier::new().classify(&bytes));
        let b = event_of(Classifier::new().classify_lenient(&bytes));
        proptest::prop_assert_eq!(a, b);
    }
}

/// Issue 20: the hand-written reader (`crate::scan`) and the serde path classify `bytes` the
/// same: the same `Inbound`, the same counters, and the classifiers stay in step (F4 state).
fn assert_paths_agree(bytes: &[u8]) -> Result<(), proptest::test_runner::TestCaseError> {
    assert_paths_agree_after(&[], bytes)
}

/// [`assert_paths_agree`] after both classifiers classified `before` (the fast one learning the
/// shape of a heartbeat among them, `crate::shape`, which `bytes` is then checked against).
fn assert_paths_agree_after(
    before: &[u8],
    bytes: &[u8],
) -> Result<(), proptest::test_runner::TestCaseError> {
    let start =
        update(r#"{"sessionUpdate":"tool_call","toolCallId":"c1","title":"t","kind":"execute"}"#);
    let (mut fast, mut serde) = (Classifier::new(), Classifier::new());
    for c in [&mut fast, &mut serde] {
        let _ = c.classify(start.as_bytes());
    }
    if !before.is_empty() {
        let a = format!("{:?}", fast.classify(before));
        let b = format!("{:?}", serde.classify_serde(before));
        proptest::prop_assert_eq!(a, b);
    }
    let a = format!("{:?}", fast.classify(bytes));
    let b = format!("{:?}", serde.classify_serde(bytes));
    proptest::prop_assert_eq!(&a, &b, "frame {:?}", String::from_utf8_lossy(bytes));
    proptest::prop_assert_eq!(fast.stats().malformed, serde.stats().malformed);
    proptest::prop_assert_eq!(fast.stats().heartbeats, serde.stats().heartbeats);
    // The state each left behind is the same: the same frame again, then a heartbeat of c1.
    let heartbeat =
        update(r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress"}"#);
    for next in [bytes, heartbeat.as_bytes()] {
        let a = format!("{:?}", fast.classify(next));
        let b = format!("{:?}", serde.classify_serde(next));
        proptest::prop_assert_eq!(a, b);
    }
    Ok(())
}

#[test]
fn captured_frames_classify_the_same_on_the_hand_written_reader_and_the_serde_path() {
    let mut read_by_hand = 0;
    for (file, bytes) in capture_frames() {
        assert_paths_agree(&bytes).unwrap_or_else(|e| panic!("{file}: {e}"));
        let text = std::str::from_utf8(&bytes).expect("utf-8");
        if crate::scan::reads(text) {
            read_by_hand += 1;
        }
    }
    // The captured heartbeats, results, starts and chunks are read by hand (plans, requests,
    // responses and vendor notifications are not `session/update`s it reads).
    assert!(read_by_hand >= 40, "{read_by_hand}");
}

#[test]
fn the_hand_written_reader_takes_the_hot_frames_and_gives_the_rest_to_serde() {
    let hot = [
        HEARTBEAT.to_owned(),
        update(
            r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"failed","content":[{"type":"content","content":{"type":"text","text":"a\nb \"q\" \u00e9\t\/"}}],"rawOutput":{"output":"x","exitCode":-3,"signal":null,"error":{"type":"execution_timeout","message":"m"},"outcome":"timed_out","notices":[1.5e3,true,false,null,{"a":[]}]}}"#,
        ),
        update(
            r#"{"sessionUpdate":"tool_call","toolCallId":"c1","title":"t","kind":"execute","rawInput":{"command":"ls","timeout":25000}}"#,
        ),
        format!(
            " \n{}\t\r\n",
            update(
                r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}"#
            )
        ),
    ];
    for frame in &hot {
        assert!(crate::scan::reads(frame), "{frame}");
        assert_paths_agree(frame.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    }
    let given_to_serde = [
        // A request, a response, another notification.
        r#"{"jsonrpc":"2.0","id":1,"method":"session/update","params":{"sessionId":"s1","update":{}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","method":"_qwen/notify","params":{}}"#.to_owned(),
        // Duplicate known keys (serde's derive refuses them), at every level.
        r#"{"jsonrpc":"2.0","method":"session/update","method":"session/update","params":{"sessionId":"s1"}}"#.to_owned(),
        update(r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","toolCallId":"c2","status":"in_progress"}"#),
        update(r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress","_meta":{"shellProgress":{"elapsedMs":1,"elapsedMs":2}}}"#),
        update(r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed","rawOutput":{"error":{"type":"a","type":"b"}}}"#),
        // An escaped key; a surrogate escape (S4 repairs lone ones on the serde path).
        update(r#"{"session\u0055pdate":"tool_call_update","toolCallId":"c1","status":"in_progress"}"#),
        update(r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"\ud83d\ude00 \ud83d"}}"#),
        // Numbers serde does not read into an integer field; structs read from arrays.
        update(r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed","rawOutput":{"exitCode":-0}}"#),
        update(r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress","_meta":{"shellProgress":{"elapsedMs":1e3}}}"#),
        update(r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress","_meta":{"usage":{"inputTokens":18446744073709551616}}}"#),
        update(r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed","rawOutput":["out","timed_out"]}"#),
        update(r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"failed","rawOutput":{"error":["execution_timeout"]}}"#),
        update(r#"{"sessionUpdate":"tool_call","toolCallId":"c1","rawInput":[5000]}"#),
        update(r#"{"sessionUpdate":"plan","entries":[]}"#),
        // Invalid JSON of every kind.
        update(r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress"} x"#),
        update(r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress","n":01}"#),
        update(r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress","n":1.}"#),
        update(r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress","n":-}"#),
        update(r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress",}"#),
        update(r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress","s":"\x"}"#),
        update(r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress","s":"\u12G4"}"#),
        update("{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"c\u{1}1\",\"status\":\"in_progress\"}"),
        update(r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress","t":tru}"#),
        format!("{}{}{}", update(r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress","d":"#), "[".repeat(60), "]".repeat(60) + "}"),
    ];
    for frame in &given_to_serde {
        assert!(!crate::scan::reads(frame), "{frame}");
        assert_paths_agree(frame.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// A string as a JavaScript daemon might write it: plain, or with characters escaped (`\n`, `\"`,
/// `\uXXXX`, surrogate pairs for characters beyond the BMP, lone halves).
fn any_json_string() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let piece = prop_oneof![
        any::<char>().prop_map(|c| serde_json::to_string(&c.to_string()).expect("json")),
        any::<char>().prop_map(|c| {
            let mut units = [0u16; 2];
            c.encode_utf16(&mut units)
                .iter()
                .map(|u| format!("\\u{u:04x}"))
                .collect::<String>()
        }),
        prop::sample::select(vec![
            "\\n", "\\\"", "\\\\", "\\/", "\\b", "\\f", "\\r", "\\t", "\\ud83d", "\\uDE00",
            "\\u0000", "\\x", "\\u12", "\u{1}", "\u{7f}", "é", "💥",
        ])
        .prop_map(str::to_owned),
        "[a-z_]{0,6}".prop_map(|s| format!("\"{s}\"")),
    ];
    prop::collection::vec(piece, 0..6).prop_map(|parts| {
        // Each JSON-quoted piece loses its quotes; the others go in as they are.
        let inner: String = parts
            .iter()
            .map(|p| {
                p.strip_prefix('"')
                    .and_then(|p| p.strip_suffix('"'))
                    .unwrap_or(p)
            })
            .collect();
        format!("\"{inner}\"")
    })
}

/// A JSON text (as it would appear on the wire, sometimes invalid) for a value where the reader
/// expects one of the ACP fields.
fn any_wire_value() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| f.to_string()),
        prop::sample::select(vec![
            "-0",
            "0",
            "1e3",
            "1E+400",
            "-1.5e-7",
            "01",
            "1.",
            "-",
            "18446744073709551616",
            "9223372036854775808",
            "-9223372036854775809",
            "25000",
        ])
        .prop_map(str::to_owned),
        any_json_string(),
        prop::sample::select(vec![
            "tool_call_update",
            "tool_call",
            "agent_message_chunk",
            "in_progress",
            "completed",
            "failed",
            "timed_out",
            "execution_timeout",
            "text",
            "c1",
            "s1",
        ])
        .prop_map(|s| format!("\"{s}\"")),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        let key = prop_oneof![
            prop::sample::select(vec![
                "sessionUpdate",
                "toolCallId",
                "status",
                "kind",
                "title",
                "content",
                "rawOutput",
                "rawInput",
                "_meta",
                "type",
                "text",
                "output",
                "outcome",
                "exitCode",
                "signal",
                "error",
                "timeout",
                "toolName",
                "shellProgress",
                "usage",
                "elapsedMs",
                "timeoutMs",
                "inputTokens",
                "entries",
                "session\\u0055pdate",
            ])
            .prop_map(|k| format!("\"{k}\"")),
            any_json_string(),
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec((key, inner), 0..5).prop_map(|kv| {
                let fields: Vec<String> = kv.into_iter().map(|(k, v)| format!("{k}:{v}")).collect();
                format!("{{{}}}", fields.join(","))
            }),
        ]
    })
}

/// The captured frames but the 570 kB skills list (mutating it adds no shapes, only time).
static SMALL_CAPTURES: std::sync::LazyLock<Vec<Vec<u8>>> = std::sync::LazyLock::new(|| {
    capture_frames()
        .into_iter()
        .map(|(_, b)| b)
        .filter(|b| b.len() < 8192)
        .collect()
});

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 1500, ..proptest::prelude::ProptestConfig::default() })]

    /// Issue 20: whatever bytes arrive, the hand-written reader and the serde path agree.
    #[test]
    fn the_hand_written_reader_agrees_with_serde_on_arbitrary_bytes(
        bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256),
    ) {
        assert_paths_agree(&bytes)?;
    }

    /// Issue 20: captured frames with bytes replaced, removed or inserted (invalid JSON, invalid
    /// UTF-8, broken escapes) classify the same on both paths.
    #[test]
    fn the_hand_written_reader_agrees_with_serde_on_mutated_captures(
        pick in proptest::prelude::any::<proptest::sample::Index>(),
        edits in proptest::collection::vec(
            (proptest::prelude::any::<proptest::sample::Index>(), proptest::prelude::any::<u8>(), 0u8..4),
            1..6,
        ),
    ) {
        let frames = &*SMALL_CAPTURES;
        let original = &frames[pick.index(frames.len())];
        let mut bytes = original.clone();
        for (at, byte, op) in edits {
            if bytes.is_empty() { break; }
            let i = at.index(bytes.len());
            match op {
                0 => bytes[i] = byte,
                1 => { bytes.remove(i); }
                2 => bytes.insert(i, byte),
                // A structural or escape byte, where mutations most often matter.
                _ => bytes[i] = b"{}[],:\"\\-0e."[usize::from(byte) % 12],
            }
        }
        // Against a classifier that learned the original's shape (a heartbeat's) too.
        assert_paths_agree(&bytes)?;
        assert_paths_agree_after(original, &bytes)?;
    }

    /// Issue 20: ACP-shaped updates with any values in the fields the reader types (escaped and
    /// raw strings over all of Unicode, numbers of every form, wrong types, duplicates) classify
    /// the same on both paths.
    #[test]
    fn the_hand_written_reader_agrees_with_serde_on_any_update(
        fields in proptest::collection::vec(
            (
                proptest::sample::select(vec![
                    "sessionUpdate", "toolCallId", "status", "kind", "title", "content", "rawOutput",
                    "rawInput", "_meta", "other",
                ]),
                any_wire_value(),
            ),
            0..7,
        ),
        kind in proptest::sample::select(vec![
            "\"tool_call_update\"", "\"tool_call\"", "\"agent_message_chunk\"", "\"agent_thought_chunk\"", "\"user_message_chunk\"",
        ]),
        status in proptest::sample::select(vec!["\"completed\"", "\"failed\"", "\"in_progress\"", "\"pending\""]),
        session in proptest::prop_oneof![proptest::strategy::Just("\"s1\"".to_owned()), any_wire_value()],
    ) {
        let mut body = vec![format!("\"sessionUpdate\":{kind}"), "\"toolCallId\":\"c1\"".to_owned(), format!("\"status\":{status}")];
        body.extend(fields.into_iter().map(|(k, v)| format!("\"{k}\":{v}")));
        // Later keys override the defaults above in neither path: a repeated key is a duplicate.
        let frame = format!(
            r#"{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":{session},"update":{{{}}}}}}}"#,
            body.join(",")
        );
        assert_paths_agree(frame.as_bytes())?;
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 1500, ..proptest::prelude::ProptestConfig::default() })]

    /// Issue 20: a captured result, start or heartbeat with one of its strings (typed, or skipped
    /// as unknown) replaced by any string a daemon might write — valid escapes, invalid ones,
    /// control characters, all of Unicode, surrogate halves — classifies the same on both paths.
    #[test]
    fn the_hand_written_reader_agrees_with_serde_on_any_string_in_a_captured_frame(
        pick in proptest::sample::select(vec![
            ("\"status\":\"completed\"", "\"Command: python3"),
            ("\"status\":\"completed\"", "\"42\""),
            ("\"status\":\"completed\"", "\"/tmp/qwen/ws\""),
            ("\"status\":\"failed\"", "\"timed_out\""),
            ("\"status\":\"failed\"", "\"shell_result\""),
            ("\"sessionUpdate\":\"tool_call\"", "\"Shell\""),
            ("\"sessionUpdate\":\"tool_call\"", "\"preparing\""),
            ("elapsedMs\":20001", "\"run_shell_command\""),
            ("elapsedMs\":20001", "\"shell_progress\""),
            ("elapsedMs\":20001", "\"111f4f4e-"),
            ("elapsedMs\":20001", "\"call_1795983579263\""),
            ("Command finished.", "\"Command finished.\""),
        ]),
        replacement in any_json_string(),
    ) {
        let (frame, needle) = pick;
        let original = SMALL_CAPTURES
            .iter()
            .filter_map(|b| std::str::from_utf8(b).ok())
            .find(|f| f.contains(frame) && f.contains(needle))
            .unwrap_or_else(|| panic!("a captured frame with {frame} and {needle}"));
        // The needle's whole string (up to its closing quote) is replaced.
        let at = original.find(needle).unwrap_or_default();
        let end = original[at + 1..]
            .char_indices()
            .scan(false, |escaped, (i, c)| {
                let close = c == '"' && !*escaped;
                *escaped = c == '\\' && !*escaped;
                Some((i, close))
            })
            .find(|(_, close)| *close)
            .map_or(original.len(), |(i, _)| at + 1 + i + 1);
        let mutated = format!("{}{}{}", &original[..at], replacement, &original[end..]);
        assert_paths_agree(mutated.as_bytes())?;
        assert_paths_agree_after(original.as_bytes(), mutated.as_bytes())?;
    }

    /// Issue 20 item 4: a heartbeat of a learned shape with any number where its progress numbers
    /// are (every JSON number form, and what is no number) classifies as the reader and serde do.
    #[test]
    fn a_learned_heartbeat_shape_agrees_with_serde_on_any_progress_number(
        which in proptest::sample::select(vec!["20001", "19232", "25000", "\"totalBytes\":7", "\"totalLines\":1"]),
        number in proptest::prop_oneof![
            "-?(0|[1-9][0-9]{0,21})(\\.[0-9]{1,3})?([eE][+-]?[0-9]{1,3})?",
            "0[0-9]{1,3}",
            "[0-9]{18,21}",
            proptest::strategy::Just("18446744073709551615".to_owned()),
            proptest::strategy::Just("18446744073709551616".to_owned()),
            proptest::strategy::Just("null".to_owned()),
            proptest::strategy::Just("\"1\"".to_owned()),
            proptest::strategy::Just(String::new()),
        ],
    ) {
        let original = String::from_utf8(heartbeat_capture()).expect("utf-8");
        let mutated = match which.split_once(':') {
            Some((key, _)) => original.replacen(which, &format!("{key}:{number}"), 1),
            None => original.replacen(which, &number, 1),
        };
        assert_paths_agree_after(original.as_bytes(), mutated.as_bytes())?;
    }
}

/// The captured heartbeat with all five progress numbers, as `capture_frames` has it (compact).
fn heartbeat_capture() -> Vec<u8> {
    SMALL_CAPTURES
        .iter()
        .find(|b| std::str::from_utf8(b).is_ok_and(|t| t.contains("\"elapsedMs\":20001")))
        .expect("the captured heartbeat")
        .clone()
}

/// Issue 20 item 4: the ids of a heartbeat of a learned shape replaced by any string a daemon might
/// write (escapes, control characters, all of Unicode, nothing) classify as on the other paths;
/// and one of the shape's heartbeats is read through the shape, not the reader.
#[test]
fn a_learned_heartbeat_shape_reads_the_next_heartbeat_and_only_that() {
    let original = String::from_utf8(heartbeat_capture()).expect("utf-8");
    let next = original
        .replace("111f4f4e-c5c0-4d46-b04c-f5c858718827", "another-session")
        .replace("call_1795983579263", "call_2")
        .replace("20001", "30001");
    assert_paths_agree_after(original.as_bytes(), next.as_bytes())
        .unwrap_or_else(|e| panic!("{e}"));
    let mut c = Classifier::new();
    let _ = c.classify(original.as_bytes());
    assert!(
        c.shape.as_ref().and_then(|s| s.read(&next)).is_some(),
        "the next heartbeat has the learned shape"
    );
    match c.classify(next.as_bytes()) {
        Inbound::Event(DaemonEvent::ToolProgress {
            session,
            call,
            progress,
            beats: 1,
        }) => {
            assert_eq!(session.as_str(), "another-session");
            assert_eq!(call.as_str(), "call_2");
            assert_eq!(progress.elapsed_ms, Some(30001));
            assert_eq!(progress.total_lines, Some(1));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.stats().heartbeats, 2);
    assert_eq!(c.stats().frames, 2);
}

/// One step of a connection's reading: a frame, or the fold handed on (no frame waiting).
enum Read {
    Frame(String),
    HandOn,
}

/// What a connection hands on for `reads`: with `folding`, heartbeats folded as they are
/// classified (`classify_folding`); without, every event made and folded after (`Fold::add`, the
/// reference). Any other event hands on the fold before it, as the connection does.
fn handed_on(folding: bool, reads: &[Read]) -> (Vec<DaemonEvent>, ClassifierStats) {
    let mut c = Classifier::new();
    let mut out = Vec::new();
    for read in reads {
        let frame = match read {
            Read::HandOn => {
                out.extend(c.fold().take());
                continue;
            }
            Read::Frame(f) => f,
        };
        let inbound = if folding {
            c.classify_folding(frame)
        } else {
            Some(c.classify_text(frame))
        };
        if let Some(Inbound::Event(event)) = inbound
            && let Some(other) = c.fold().add(event)
        {
            out.extend(c.fold().take());
            out.push(other);
        }
    }
    out.extend(c.fold().take());
    (out, c.stats())
}

/// qwen's heartbeat of `session`'s `call` at `elapsed` ms; `odd` gives it another shape (compact,
/// an extra field), which the learned shape misses and the reader reads.
fn beat_frame(session: usize, call: usize, elapsed: u64, odd: bool) -> String {
    if odd {
        return format!(
            r#"{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s{session}","update":{{"sessionUpdate":"tool_call_update","toolCallId":"c{call}","status":"in_progress","extra":1,"_meta":{{"shellProgress":{{"elapsedMs":{elapsed}}}}}}}}}}}"#
        );
    }
    String::from_utf8(heartbeat_capture())
        .expect("utf-8")
        .replace(
            "111f4f4e-c5c0-4d46-b04c-f5c858718827",
            &format!("s{session}"),
        )
        .replace("call_1795983579263", &format!("c{call}"))
        .replace("20001", &elapsed.to_string())
}

fn tool_frame(session: usize, call: usize, status: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s{session}","update":{{"sessionUpdate":"tool_call","toolCallId":"c{call}","title":"make","kind":"execute","status":"{status}"}}}}}}"#
    )
}

#[test]
fn f1_heartbeats_folded_as_they_are_classified_hand_on_what_folding_their_events_hands_on() {
    let reads = vec![
        Read::Frame(tool_frame(1, 1, "in_progress")),
        Read::Frame(tool_frame(1, 2, "in_progress")),
        Read::Frame(tool_frame(2, 1, "in_progress")),
        Read::Frame(beat_frame(1, 1, 1, false)),
        Read::Frame(beat_frame(2, 1, 2, false)),
        Read::Frame(beat_frame(1, 1, 3, false)),
        Read::Frame(beat_frame(1, 2, 4, false)),
        Read::HandOn,
        Read::Frame(beat_frame(1, 1, 5, false)),
        Read::Frame(beat_frame(1, 1, 6, true)),
        Read::Frame(beat_frame(1, 2, 7, false)),
        // The call ends: what was folded goes first; a heartbeat after it is late, not folded.
        Read::Frame(tool_frame(1, 2, "completed")),
        Read::Frame(beat_frame(1, 2, 8, false)),
        // A call and a session never started: read, then folded like the rest.
        Read::Frame(beat_frame(2, 9, 9, false)),
        Read::Frame(beat_frame(3, 1, 10, false)),
        Read::Frame(beat_frame(2, 9, 11, false)),
    ];
    let (want, want_stats) = handed_on(false, &reads);
    let (got, got_stats) = handed_on(true, &reads);
    assert_eq!(got, want);
    assert_eq!(got_stats, want_stats);
    let beats: Vec<(String, u32, Option<u64>)> = got
        .iter()
        .filter_map(|e| match e {
            DaemonEvent::ToolProgress {
                session,
                call,
                progress,
                beats,
            } => Some((format!("{session}/{call}"), *beats, progress.elapsed_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(
        beats,
        [
            ("s1/c1".into(), 2, Some(3)),
            ("s2/c1".into(), 1, Some(2)),
            ("s1/c2".into(), 1, Some(4)),
            ("s1/c1".into(), 2, Some(6)),
            ("s1/c2".into(), 1, Some(7)),
            ("s2/c9".into(), 2, Some(11)),
            ("s3/c1".into(), 1, Some(10)),
        ]
    );
    assert!(
        got.iter()
            .any(|e| matches!(e, DaemonEvent::LateUpdate { call, .. } if call.as_str() == "c2")),
        "the heartbeat after the end is late: {got:?}"
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// F1: folding heartbeats as they are classified hands on exactly the events that folding the
    /// classifier's events hands on, for any mix of heartbeats (of either shape), starts, ends and
    /// hand-ons over a few sessions and calls.
    #[test]
    fn f1_folding_in_place_agrees_with_folding_events(
        steps in proptest::collection::vec((1usize..4, 1usize..4, 0u8..8, 0u64..1_000_000), 0..120),
    ) {
        let reads: Vec<Read> = steps
            .iter()
            .map(|&(s, c, what, n)| match what {
                0 => Read::HandOn,
                1 => Read::Frame(tool_frame(s, c, "in_progress")),
                2 => Read::Frame(tool_frame(s, c, "completed")),
                3 => Read::Frame(beat_frame(s, c, n, true)),
                _ => Read::Frame(beat_frame(s, c, n, false)),
            })
            .collect();
        let (want, want_stats) = handed_on(false, &reads);
        let (got, got_stats) = handed_on(true, &reads);
        proptest::prop_assert_eq!(got, want);
        proptest::prop_assert_eq!(got_stats, want_stats);
    }
}

/// F2 (an outside tester): a frame whose params do not decode — a duplicate key in its update —
/// is malformed and its warning still names the session the params name.
#[test]
fn f2_a_malformed_update_names_its_session_when_its_params_do() {
    let mut c = Classifier::new();
    let frame = br#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call_update","toolCallId":"c1","toolCallId":"c2","status":"in_progress"}}}"#;
    match c.classify(frame) {
        Inbound::Event(DaemonEvent::Malformed { session, reason }) => {
            assert_eq!(
                session.as_ref().map(SessionId::as_str),
                Some("s1"),
                "{reason}"
            );
        }
        other => panic!("malformed, not {other:?}"),
    }
    // A sessionId that is itself repeated names none.
    let frame = br#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","sessionId":"s2","update":{"sessionUpdate":"tool_call_update","toolCallId":"c1"}}}"#;
    assert!(matches!(
        c.classify(frame),
        Inbound::Event(DaemonEvent::Malformed { session: None, .. })
    ));
}
