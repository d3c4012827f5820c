//! Q4 at CI scale: arbitrary bytes, arbitrary JSON and mutated real captures never panic the decoder.
//! Set `PROPTEST_CASES` for a longer run (the bench/soak mode of DESIGN.md §7 Q4).

use std::path::Path;
use std::sync::LazyLock;

use daemon_client::{Classifier, DaemonEvent, Inbound};
use proptest::prelude::*;

static CAPTURES: LazyLock<Vec<Vec<u8>>> = LazyLock::new(load_captures);

fn load_captures() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/acp-qwen-0.24.4");
    let mut out = Vec::new();
    for name in [
        "shell-heartbeat-completed.jsonl",
        "shell-timeout-partial.jsonl",
        "shell-cancel.jsonl",
        "shell-timeout-silent.jsonl",
    ] {
        let text = std::fs::read_to_string(dir.join(name)).expect("capture");
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("line");
            let bytes = serde_json::to_vec(&v["msg"]).expect("msg");
            // The 570 kB skills frame makes mutation slow without adding shapes; keep the rest.
            if v["dir"] == "in" && bytes.len() < 8192 {
                out.push(bytes);
            }
        }
    }
    out
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f)
            .map_or(serde_json::Value::Null, serde_json::Value::Number)),
        prop_oneof![
            "[a-z_/]{0,12}",
            Just("session/update".to_owned()),
            Just("tool_call_update".to_owned()),
            Just("in_progress".to_owned()),
            Just("failed".to_owned())
        ]
        .prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("jsonrpc".to_owned()),
                    Just("id".to_owned()),
                    Just("method".to_owned()),
                    Just("params".to_owned()),
                    Just("sessionId".to_owned()),
                    Just("update".to_owned()),
                    Just("sessionUpdate".to_owned()),
                    Just("toolCallId".to_owned()),
                    Just("status".to_owned()),
                    Just("content".to_owned()),
                    Just("rawOutput".to_owned()),
                    Just("_meta".to_owned()),
                    "[a-zA-Z]{1,8}",
                ],
                inner,
                0..6
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

fn check(classifier: &mut Classifier, bytes: &[u8]) {
    // Classification must return, whatever the input; malformed input must say so, not panic.
    if let Inbound::Event(DaemonEvent::Malformed { reason, .. }) = classifier.classify(bytes) {
        assert!(!reason.is_empty());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn q4_arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        check(&mut Classifier::new(), &bytes);
    }

    #[test]
    fn q4_arbitrary_json_never_panics(v in json_value()) {
        let bytes = serde_json::to_vec(&v).expect("serialise");
        check(&mut Classifier::new(), &bytes);
    }

    #[test]
    fn q4_mutated_captures_never_panic(
        pick in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..8),
    ) {
        let frames = &*CAPTURES;
        let mut bytes = frames[pick.index(frames.len())].clone();
        for (at, byte, op) in edits {
            if bytes.is_empty() { break; }
            let i = at.index(bytes.len());
            match op {
                0 => bytes[i] = byte,
                1 => { bytes.remove(i); }
                _ => bytes.insert(i, byte),
            }
        }
        let mut c = Classifier::new();
        check(&mut c, &bytes);
        // The classifier keeps working after whatever it just saw.
        check(&mut c, &frames[0]);
    }
}

#[test]
fn q4_deeply_nested_json_is_malformed_not_a_stack_overflow() {
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let mut c = Classifier::new();
    assert!(matches!(
        c.classify(deep.as_bytes()),
        Inbound::Event(DaemonEvent::Malformed { .. })
    ));
    let deep_obj = format!(
        r#"{{"jsonrpc":"2.0","method":"session/update","params":{}{}}}"#,
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    assert!(matches!(c.classify(deep_obj.as_bytes()), Inbound::Event(_)));
}
