//! P1: decode + classify against `serde_json::from_slice::<Value>` of the same bytes, same run.
//!
//! Target (DESIGN.md §7): classify ≤ 0.7× the `Value` parse. Run with `cargo bench -p daemon-client`.

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use daemon_client::Classifier;

#[derive(serde::Deserialize)]
struct Line {
    dir: String,
    msg: serde_json::Value,
}

fn capture(name: &str) -> Vec<Vec<u8>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/acp-qwen-0.24.4")
        .join(name);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter_map(|l| serde_json::from_str::<Line>(l).ok())
        .filter(|l| l.dir == "in")
        // Compact, as the daemon sends it (the recorder re-spaced the file): the heartbeat is 327 bytes.
        .map(|l| serde_json::to_vec(&l.msg).unwrap_or_default())
        .collect()
}

fn heartbeat(c: &mut Criterion) {
    let frames = capture("shell-heartbeat-completed.jsonl");
    let hb = frames
        .iter()
        .find(|f| std::str::from_utf8(f).is_ok_and(|s| s.contains("shellProgress")))
        .cloned()
        .unwrap_or_default();
    assert_eq!(hb.len(), 327, "the captured qwen heartbeat");
    let mut g = c.benchmark_group("heartbeat");
    g.throughput(Throughput::Bytes(hb.len() as u64));
    g.bench_function("value_parse_baseline", |b| {
        b.iter(|| black_box(serde_json::from_slice::<serde_json::Value>(black_box(&hb)).ok()));
    });
    let mut classifier = Classifier::new();
    g.bench_function("classify", |b| {
        b.iter(|| black_box(classifier.classify(black_box(&hb))))
    });
    g.finish();
}

fn whole_captures(c: &mut Criterion) {
    for name in [
        "shell-heartbeat-completed.jsonl",
        "permission-denied-then-load.jsonl",
    ] {
        let frames = capture(name);
        let bytes: usize = frames.iter().map(Vec::len).sum();
        let mut g = c.benchmark_group(format!("capture/{name}"));
        g.throughput(Throughput::Bytes(bytes as u64));
        g.sample_size(30);
        g.bench_function("value_parse_baseline", |b| {
            b.iter(|| {
                for f in &frames {
                    black_box(serde_json::from_slice::<serde_json::Value>(f).ok());
                }
            });
        });
        g.bench_function("classify", |b| {
            b.iter(|| {
                let mut classifier = Classifier::new();
                for f in &frames {
                    black_box(classifier.classify(f));
                }
            });
        });
        g.finish();
    }
}

/// P1 with the stdio framing: heartbeats as newline-delimited lines in the child's stdout buffer,
/// each read out with `read_until` (a copy into the line buffer, as `stdio::read_line` does) and then
/// decoded. Both sides pay the same framing; the ratio is what the transport leaves of P1.
fn stdio_heartbeat(c: &mut Criterion) {
    use std::io::BufRead;
    let frames = capture("shell-heartbeat-completed.jsonl");
    let hb = frames
        .iter()
        .find(|f| std::str::from_utf8(f).is_ok_and(|s| s.contains("shellProgress")))
        .cloned()
        .unwrap_or_default();
    const LINES: usize = 64;
    let mut stream = Vec::with_capacity((hb.len() + 1) * LINES);
    for _ in 0..LINES {
        stream.extend_from_slice(&hb);
        stream.push(b'\n');
    }
    let mut g = c.benchmark_group("stdio_heartbeat");
    g.throughput(Throughput::Bytes(stream.len() as u64));
    g.bench_function("lines_value_parse_baseline", |b| {
        b.iter(|| {
            let mut reader = std::io::BufReader::new(black_box(&stream[..]));
            let mut line = Vec::with_capacity(512);
            while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
                line.pop();
                black_box(serde_json::from_slice::<serde_json::Value>(&line).ok());
                line.clear();
            }
        });
    });
    let mut classifier = Classifier::new();
    g.bench_function("lines_classify", |b| {
        b.iter(|| {
            let mut reader = std::io::BufReader::new(black_box(&stream[..]));
            let mut line = Vec::with_capacity(512);
            while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
                line.pop();
                black_box(classifier.classify(&line));
                line.clear();
            }
        });
    });
    g.finish();
}

criterion_group!(benches, heartbeat, whole_captures, stdio_heartbeat);
criterion_main!(benches);
