//! Q4 in bench mode: a million random and mutated frames through the decoder, without a panic.
//!
//! `cargo bench -p daemon-client --bench fuzz` runs 1,000,000 inputs (`Q4_INPUTS` overrides, `Q4_SEED`
//! picks the seed); under `cargo test` (CI) the same driver runs a 20,000-input pass. Inputs, in turn:
//! byte-level mutations of every real qwen capture frame (flips, inserts, deletes, truncations,
//! splices of two frames), random bytes, random JSON built from the ACP field names, and deep
//! nesting. One classifier sees them all, so state carried between frames is exercised too; after
//! each input a real heartbeat must still classify as a heartbeat. A panic prints the seed and the
//! input's index and bytes so it can be replayed.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use daemon_client::{Classifier, DaemonEvent, Inbound};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn captures() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/acp-qwen-0.24.4");
    let mut out = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .expect("captures")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    names.sort();
    for path in names {
        let text = std::fs::read_to_string(&path).expect("capture");
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if v["dir"] == "in" {
                let bytes = serde_json::to_vec(&v["msg"]).expect("msg");
                // The 570 kB skills frame slows mutation without adding shapes.
                if bytes.len() < 16_384 {
                    out.push(bytes);
                }
            }
        }
    }
    assert!(!out.is_empty(), "no captures found in {}", dir.display());
    out
}

const KEYS: &[&str] = &[
    "jsonrpc",
    "id",
    "method",
    "params",
    "result",
    "error",
    "sessionId",
    "update",
    "sessionUpdate",
    "toolCallId",
    "status",
    "kind",
    "title",
    "content",
    "rawInput",
    "rawOutput",
    "_meta",
    "shellProgress",
    "elapsedMs",
    "stopReason",
    "options",
    "optionId",
    "text",
    "type",
];
const STRINGS: &[&str] = &[
    "2.0",
    "session/update",
    "session/request_permission",
    "tool_call",
    "tool_call_update",
    "in_progress",
    "completed",
    "failed",
    "agent_message_chunk",
    "end_turn",
    "cancelled",
    "",
    "\u{0}",
    "\u{fffd}",
    "𝄞",
];

fn random_json(rng: &mut StdRng, depth: u32, out: &mut String) {
    let pick = if depth > 6 {
        rng.random_range(0..4)
    } else {
        rng.random_range(0..6)
    };
    match pick {
        0 => out.push_str(["null", "true", "false"][rng.random_range(0..3)]),
        1 => out.push_str(&rng.random::<i64>().to_string()),
        2 => out.push_str(&format!("{:e}", rng.random::<f64>() * 1e300)),
        3 => {
            out.push('"');
            out.push_str(STRINGS[rng.random_range(0..STRINGS.len())]);
            out.push('"');
        }
        4 => {
            out.push('[');
            for i in 0..rng.random_range(0..5) {
                if i > 0 {
                    out.push(',');
                }
                random_json(rng, depth + 1, out);
            }
            out.push(']');
        }
        _ => {
            out.push('{');
            for i in 0..rng.random_range(0..6) {
                if i > 0 {
                    out.push(',');
                }
                out.push('"');
                out.push_str(KEYS[rng.random_range(0..KEYS.len())]);
                out.push_str("\":");
                random_json(rng, depth + 1, out);
            }
            out.push('}');
        }
    }
}

fn mutate(rng: &mut StdRng, frames: &[Vec<u8>]) -> Vec<u8> {
    let mut bytes = frames[rng.random_range(0..frames.len())].clone();
    for _ in 0..rng.random_range(1..8) {
        if bytes.is_empty() {
            break;
        }
        let i = rng.random_range(0..bytes.len());
        match rng.random_range(0..6) {
            0 => bytes[i] = rng.random(),
            1 => {
                bytes.remove(i);
            }
            2 => bytes.insert(i, rng.random()),
            3 => bytes.truncate(i),
            4 => {
                // Splice the tail of another frame in.
                let other = &frames[rng.random_range(0..frames.len())];
                let j = rng.random_range(0..other.len().max(1));
                bytes.truncate(i);
                bytes.extend_from_slice(&other[j.min(other.len())..]);
            }
            _ => {
                // A structural character where it hurts.
                bytes[i] = b"{}[]\",:\\"[rng.random_range(0..8)];
            }
        }
    }
    bytes
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let n: u64 = std::env::var("Q4_INPUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if full { 1_000_000 } else { 20_000 });
    let seed: u64 = std::env::var("Q4_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x0051_5134);
    let frames = captures();
    let heartbeat = frames
        .iter()
        .find(|f| {
            matches!(
                Classifier::new().classify(f),
                Inbound::Event(DaemonEvent::ToolProgress { .. })
            )
        })
        .expect("a heartbeat among the captures")
        .clone();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut classifier = Classifier::new();
    let (mut malformed, mut events, mut other) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    for index in 0..n {
        let input = match index % 10 {
            0..=5 => mutate(&mut rng, &frames),
            6 | 7 => {
                let mut s = String::new();
                random_json(&mut rng, 0, &mut s);
                s.into_bytes()
            }
            8 => (0..rng.random_range(0..256))
                .map(|_| rng.random())
                .collect(),
            _ => {
                let depth = rng.random_range(1..5_000);
                let open = ["[", "{\"a\":"][rng.random_range(0..2)];
                open.repeat(depth).into_bytes()
            }
        };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let got = classifier.classify(&input);
            let again = classifier.classify(&heartbeat);
            (got, again)
        }));
        match outcome {
            Ok((got, again)) => {
                match got {
                    Inbound::Event(DaemonEvent::Malformed { .. }) => malformed += 1,
                    Inbound::Event(_) => events += 1,
                    _ => other += 1,
                }
                assert!(
                    matches!(
                        again,
                        Inbound::Event(
                            DaemonEvent::ToolProgress { .. } | DaemonEvent::LateUpdate { .. }
                        )
                    ),
                    "after input {index} (seed {seed}) a real heartbeat no longer classifies as one"
                );
            }
            Err(_) => {
                let path = std::env::temp_dir().join(format!("q4-panic-{seed}-{index}.bin"));
                let _ = std::fs::File::create(&path).and_then(|mut f| f.write_all(&input));
                panic!(
                    "Q4: the decoder panicked on input {index} (seed {seed}); the input is in {}",
                    path.display()
                );
            }
        }
    }
    let took = started.elapsed();
    println!(
        "Q4: {n} inputs (seed {seed}) in {:.1} s ({:.0} inputs/s), no panic: {malformed} malformed, {events} events, {other} other",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64()
    );
}
