//! Ingest close to the limit (issue 20, item 4): how many heartbeat frames per second one bridge
//! absorbs, against a bare tokio-tungstenite reader of the same frames on the same loopback, in the
//! same run, alternating.
//!
//! The frame is qwen's real heartbeat (`shell-heartbeat-completed.jsonl` of the 0.24.4 captures),
//! byte for byte except its `sessionId` and `toolCallId`, which name the run's own sessions and calls.
//! Both sides read from the same kind of loopback server: one WebSocket connection, `TCP_NODELAY`,
//! the frames queued to it in batches of 256 and flushed per batch, so the writer is never the slower
//! side (the bare reader's rate bounds it from below).
//!
//! - **Bare reader**: a tokio-tungstenite client counts text frames until it has all `N`; nothing
//!   else. Timed from the server's first write to the client's last frame.
//! - **Classifying reader**: the same bare reader handing every frame to a daemon client's
//!   `Classifier` and dropping the event — the validating decode every frame must pass, and nothing
//!   else: the most a bridge could absorb.
//! - **Bridge**: the whole product, a real `Application` on the store (`DATABASE_URL` when set, else
//!   SQLite) with a real `DaemonClient`. `S` threads each start a tool (one post each); then the server
//!   sends the `N` heartbeats round-robin over the `S` sessions, then one update of each tool's call
//!   (its title again: nothing to store or show, but not a heartbeat, so its conversation puts its
//!   count on the live board at once — heartbeats alone reach it at most every 250 ms). Every frame
//!   goes through the daemon client's transport (tungstenite, UTF-8 check, frame limits), its decode
//!   and `Classifier` (F-rules, F4 memory, the fold of a burst's heartbeats per call), its event
//!   channel, the core's router (metrics, session lookup), the conversation's mailbox and state
//!   machine (liveness re-armed by each folded event; the tool's heartbeat count) and the batched
//!   counts to the progress writer and the store (every [`PROGRESS_FLUSH`] here, so they are
//!   written while the heartbeats come). Timed from the server's first write until the live board
//!   shows every tool with exactly all its heartbeats counted, polled every millisecond or two —
//!   as the bare reader's clock stops at its last frame read. Only then are the results sent (each
//!   tool's result and its prompt's end); the time they take to reach the chat through the store and
//!   the outbox is printed beside, outside the clock. No figure is printed before the store's
//!   heartbeat counts add up to every frame sent so far.
//!
//! `cargo bench -p chat-bridge-tests --bench ingest`: N = 1,000,000 frames over S = 100 sessions
//! (a shorter run is dominated by the connection's start and its first hand-ons), 3 rounds of each
//! side, alternating. `INGEST_FRAMES`, `INGEST_SESSIONS`, `INGEST_ROUNDS` override.
//! `cargo test` runs it small (N = 5,000, S = 10, 1 round) so CI keeps it compiling and correct.
//! Prints `INGEST_RESULT {json}` per round and `INGEST_SUMMARY {json}` (the median ratio, the rounds
//! at ≥ 50%, the load average before and after). Target: the bridge takes heartbeats in at ≥ 50% of
//! the bare reader's rate.
//! `INGEST_ONLY=bridge` runs only the bridge's rounds (to profile it alone).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chat_bridge::app::Application;
use chat_bridge::channel::{
    BoxFuture, Capabilities, Channel, DeliveryError, Inbound, InboundKind, Message, Target, Tone,
};
use chat_bridge::store::bind::FetchExt;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Mutex, mpsc};
use tokio_tungstenite::tungstenite::{Message as Ws, Utf8Bytes};
use tokio_util::sync::CancellationToken;

/// The chat: counts posts and results.
#[derive(Default)]
struct Chat {
    posts: AtomicU64,
    results: AtomicU64,
}

impl Channel for Chat {
    fn platform(&self) -> &'static str {
        "console"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            max_message_len: 40_000,
            answer_len: 40_000,
            output_cap: 3_000,
            can_edit: true,
            has_buttons: true,
            has_threads: true,
            has_reactions: false,
            takes_requests: false,
        }
    }
    fn post<'a>(
        &'a self,
        _t: &'a Target,
        _m: &'a Message,
    ) -> BoxFuture<'a, Result<String, DeliveryError>> {
        let n = self.posts.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move { Ok(format!("m{n}")) })
    }
    fn edit<'a>(
        &'a self,
        _t: &'a Target,
        _id: &'a str,
        m: &'a Message,
    ) -> BoxFuture<'a, Result<(), DeliveryError>> {
        if m.tone == Tone::Success {
            self.results.fetch_add(1, Ordering::SeqCst);
        }
        Box::pin(async { Ok(()) })
    }
}

/// qwen's heartbeat frame as captured, with `{SESSION}` and `{CALL}` where its ids were.
fn heartbeat_template() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/acp-qwen-0.24.4/shell-heartbeat-completed.jsonl");
    let path = if path.exists() {
        path
    } else {
        std::path::PathBuf::from(
            "/work/shared/fixtures/acp-qwen-0.24.4/shell-heartbeat-completed.jsonl",
        )
    };
    let text = std::fs::read_to_string(&path).expect("qwen heartbeat capture");
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let msg = &v["msg"];
        if msg["method"] == "session/update"
            && !msg["params"]["update"]["_meta"]["shellProgress"].is_null()
        {
            let mut msg = msg.clone();
            msg["params"]["sessionId"] = json!("{SESSION}");
            msg["params"]["update"]["toolCallId"] = json!("{CALL}");
            return msg.to_string();
        }
    }
    panic!("no heartbeat frame in {}", path.display());
}

/// Sends batches of frames on one connection, flushing once per batch.
async fn writer<S>(mut sink: S, mut rx: mpsc::UnboundedReceiver<Vec<Utf8Bytes>>)
where
    S: futures_util::Sink<Ws> + Unpin,
{
    while let Some(batch) = rx.recv().await {
        for text in batch {
            if sink.feed(Ws::Text(text)).await.is_err() {
                return;
            }
        }
        if sink.flush().await.is_err() {
            return;
        }
    }
}

/// Queues `n` frames, round-robin over `frames`, in batches of 256.
fn blast(tx: &mpsc::UnboundedSender<Vec<Utf8Bytes>>, frames: &[Utf8Bytes], n: usize) {
    let mut sent = 0;
    while sent < n {
        let k = 256.min(n - sent);
        let batch = (sent..sent + k)
            .map(|i| frames[i % frames.len()].clone())
            .collect();
        let _ = tx.send(batch);
        sent += k;
    }
}

/// The bare side: one connection that, once accepted, is sent `n` frames; the client counts them
/// (with `classify`, it also hands each to a daemon client's `Classifier` and drops the event: the
/// reader plus the validating decode alone, without anything the bridge does with the event).
/// Returns frames per second from the server's first write to the client's last frame.
async fn bare_round(frames: &[Utf8Bytes], n: usize, classify: bool) -> f64 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("ws://{}/acp", listener.local_addr().expect("addr"));
    let (start_tx, start_rx) = tokio::sync::oneshot::channel::<Instant>();
    let frames = frames.to_vec();
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.expect("accept");
        let _ = tcp.set_nodelay(true);
        let ws = tokio_tungstenite::accept_async(tcp).await.expect("ws");
        let (sink, mut stream) = ws.split();
        let (tx, rx) = mpsc::unbounded_channel();
        let w = tokio::spawn(writer(sink, rx));
        let _ = start_tx.send(Instant::now());
        blast(&tx, &frames, n);
        drop(tx);
        let _ = w.await;
        // Keep the connection until the client has read everything and closed it.
        while let Some(Ok(_)) = stream.next().await {}
    });
    let (mut ws, _) = tokio_tungstenite::connect_async(&url)
        .await
        .expect("connect");
    let mut got = 0usize;
    let mut classifier = daemon_client::Classifier::new();
    let mut heartbeats = 0usize;
    while got < n {
        match ws.next().await {
            Some(Ok(Ws::Text(text))) => {
                got += 1;
                if classify
                    && let daemon_client::Inbound::Event(daemon_client::DaemonEvent::ToolProgress {
                        ..
                    }) = classifier.classify_text(text.as_str())
                {
                    heartbeats += 1;
                }
            }
            Some(Ok(_)) => {}
            _ => panic!("the bare reader's connection ended after {got} frames"),
        }
    }
    let end = Instant::now();
    if classify {
        assert_eq!(heartbeats, n, "every frame classified as a heartbeat");
    }
    let start = start_rx.await.expect("start");
    let _ = ws.close(None).await;
    drop(ws);
    let _ = server.await;
    n as f64 / end.duration_since(start).as_secs_f64()
}

/// A started tool: its session and call, waiting for the heartbeats.
#[derive(Clone)]
struct Started {
    session: String,
    call: String,
    prompt_id: Value,
}

/// The bridge's daemon: answers the handshake and sessions; each prompt starts a tool and reports it.
async fn bridge_daemon(
    listener: TcpListener,
    frames_tx: mpsc::UnboundedSender<mpsc::UnboundedSender<Vec<Utf8Bytes>>>,
    started: mpsc::UnboundedSender<Started>,
) {
    let Ok((tcp, _)) = listener.accept().await else {
        return;
    };
    let _ = tcp.set_nodelay(true);
    let Ok(ws) = tokio_tungstenite::accept_async(tcp).await else {
        return;
    };
    let (sink, mut stream) = ws.split();
    let (tx, rx) = mpsc::unbounded_channel::<Vec<Utf8Bytes>>();
    tokio::spawn(writer(sink, rx));
    let _ = frames_tx.send(tx.clone());
    let mut next = 0u64;
    let mut calls = 0u64;
    while let Some(Ok(frame)) = stream.next().await {
        let Ws::Text(text) = frame else { continue };
        let Ok(msg) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        let reply = |result: Value| {
            vec![Utf8Bytes::from(
                json!({"jsonrpc":"2.0","id":msg["id"],"result":result}).to_string(),
            )]
        };
        match msg["method"].as_str() {
            Some("initialize") => {
                let _ = tx.send(reply(
                    json!({"protocolVersion":1,"agentCapabilities":{"loadSession":true}}),
                ));
            }
            Some("session/new") => {
                next += 1;
                let _ = tx.send(reply(json!({"sessionId": format!("ingest-s{next}")})));
            }
            Some("session/prompt") => {
                let session = msg["params"]["sessionId"].as_str().unwrap_or("").to_owned();
                calls += 1;
                let call = format!("call_{calls}");
                let _ = tx.send(vec![Utf8Bytes::from(
                    json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":session,"update":{
                        "sessionUpdate":"tool_call","toolCallId":call,"title":"make test","kind":"execute","status":"in_progress"}}})
                    .to_string(),
                )]);
                let _ = started.send(Started {
                    session,
                    call,
                    prompt_id: msg["id"].clone(),
                });
            }
            _ => {
                if msg.get("id").is_some() && msg.get("method").is_some() {
                    let _ = tx.send(reply(json!({})));
                }
            }
        }
    }
}

fn inbound(i: usize) -> Inbound {
    Inbound {
        event_id: uuid::Uuid::new_v4().to_string(),
        platform: "console".into(),
        target: Target {
            workspace: "local".into(),
            channel: "ingest".into(),
            thread: format!("t{i}"),
        },
        user: "ingest".into(),
        message_id: None,
        opens: true,
        kind: InboundKind::Message("make test".into()),
    }
}

/// How often each running tool's heartbeat count goes to the store in the bridge's rounds.
const PROGRESS_FLUSH: Duration = Duration::from_millis(100);

/// One bridge round's figures.
struct Round {
    /// Frames per second until every heartbeat was taken in by its conversation.
    ingest_fps: f64,
    /// From sending the results (after the heartbeats were taken in) to the last in the chat.
    results_ms: f64,
}

/// The bridge, running; one round after another on it.
struct Bridge {
    app: Application,
    chat: Arc<Chat>,
    frames: mpsc::UnboundedSender<Vec<Utf8Bytes>>,
    started: Mutex<mpsc::UnboundedReceiver<Started>>,
    stop: CancellationToken,
    _db: chat_bridge_tests::db::TestDb,
    _dir: tempfile::TempDir,
}

impl Bridge {
    async fn start() -> Self {
        let db = if std::env::var("DATABASE_URL").is_ok() {
            chat_bridge_tests::db::TestDb::new(chat_bridge::store::Backend::Postgres).await
        } else {
            chat_bridge_tests::db::TestDb::new(chat_bridge::store::Backend::Sqlite).await
        };
        let dir = tempfile::tempdir().expect("tmp");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("ws://{}/acp", listener.local_addr().expect("addr"));
        let (frames_tx, mut frames_rx) = mpsc::unbounded_channel();
        let (started_tx, started_rx) = mpsc::unbounded_channel();
        tokio::spawn(bridge_daemon(listener, frames_tx, started_tx));
        let mut cfg = chat_bridge_tests::bridge::config(&db.url, dir.path());
        cfg.daemon.url = Some(url);
        cfg.daemon.token = Some("ingest".into());
        // Liveness is fed by every heartbeat; no stall may interrupt a round, and no progress line.
        cfg.liveness.idle = Duration::from_secs(600);
        cfg.liveness.progress_after = Duration::from_secs(3600);
        // The counts go to the store while the heartbeats come (the product's 10 s would leave a
        // half-second round without a write: the batched counts would not be in the clock).
        cfg.liveness.progress_flush = PROGRESS_FLUSH;
        let chat = Arc::new(Chat::default());
        let app = Application::build(&cfg, chat.clone()).await.expect("build");
        let frames = frames_rx.recv().await.expect("the bridge connected");
        Self {
            app,
            chat,
            frames,
            started: Mutex::new(started_rx),
            stop: CancellationToken::new(),
            _db: db,
            _dir: dir,
        }
    }

    /// Starts one tool on each of `sessions` threads, sends `n` heartbeats over them and then each
    /// result; returns frames per second until every heartbeat was taken in by its conversation
    /// (ingest), and until the last result reached the chat (end to end).
    async fn round(&self, template: &str, sessions: usize, n: usize) -> Round {
        let results0 = self.chat.results.load(Ordering::SeqCst);
        let posts0 = self.chat.posts.load(Ordering::SeqCst);
        for i in 0..sessions {
            self.app.accept(inbound(i), &self.stop).await;
        }
        let mut tools = Vec::with_capacity(sessions);
        {
            let mut started = self.started.lock().await;
            while tools.len() < sessions {
                tools.push(started.recv().await.expect("a tool started"));
            }
        }
        // Every tool's post is out before the clock starts: the round is the heartbeats.
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.chat.posts.load(Ordering::SeqCst) < posts0 + sessions as u64
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let frames: Vec<Utf8Bytes> = tools
            .iter()
            .map(|t| {
                Utf8Bytes::from(
                    template
                        .replace("{SESSION}", &t.session)
                        .replace("{CALL}", &t.call),
                )
            })
            .collect();
        // After its heartbeats each tool's call is updated once with the title it has: nothing to
        // store or show, but not a heartbeat, so its conversation puts its count on the live board
        // at once (heartbeats alone reach the board at most every 250 ms).
        let marks: Vec<Utf8Bytes> = tools
            .iter()
            .map(|t| {
                Utf8Bytes::from(
                    json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":t.session,"update":{
                        "sessionUpdate":"tool_call_update","toolCallId":t.call,"title":"make test",
                        "status":"in_progress"}}})
                    .to_string(),
                )
            })
            .collect();
        let results: Vec<Utf8Bytes> = tools
            .iter()
            .flat_map(|t| {
                [
                    json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":t.session,"update":{
                        "sessionUpdate":"tool_call_update","toolCallId":t.call,"status":"completed",
                        "rawOutput":{"output":"ok","exitCode":0}}}})
                    .to_string(),
                    json!({"jsonrpc":"2.0","id":t.prompt_id,"result":{"stopReason":"end_turn"}})
                        .to_string(),
                ]
            })
            .map(Utf8Bytes::from)
            .collect();
        // What each tool's conversation must count: `blast` goes round-robin over the tools.
        let expected: Vec<(String, u64)> = tools
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let share = n / sessions + usize::from(i < n % sessions);
                (format!("{}/{}", t.session, t.call), share as u64)
            })
            .collect();
        let zero: Vec<(String, u64)> = expected.iter().map(|(id, _)| (id.clone(), 0)).collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.shows(&zero) {
            assert!(Instant::now() < deadline, "every tool on the live board");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let start = Instant::now();
        blast(&self.frames, &frames, n);
        let _ = self.frames.send(marks);
        // Ingest: until the live board shows every tool with all its heartbeats counted by its
        // conversation (each folded event re-armed its liveness), as the bare reader's clock stops
        // at its last frame read. The results are not sent yet: nothing leaves the board.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.shows(&expected) {
            assert!(
                Instant::now() < deadline,
                "every heartbeat taken in within 60 s; the board shows {:?}",
                self.app.core.live().snapshot().turns
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let ingest = start.elapsed().as_secs_f64();
        // Then the results, through the store and the outbox to the chat.
        let sent = Instant::now();
        let _ = self.frames.send(results);
        let want = results0 + sessions as u64;
        while self.chat.results.load(Ordering::SeqCst) < want {
            assert!(Instant::now() < deadline, "every result arrived");
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        let results_ms = 1000.0 * sent.elapsed().as_secs_f64();
        chat_bridge_tests::bridge::settle(&self.app).await;
        Round {
            ingest_fps: n as f64 / ingest,
            results_ms,
        }
    }

    /// Whether the live board shows exactly `expected`: each tool (by its scoped id) with that many
    /// heartbeats. More than expected is a bug, not a wait.
    fn shows(&self, expected: &[(String, u64)]) -> bool {
        let snapshot = self.app.core.live().snapshot();
        let shown: std::collections::HashMap<&str, u64> = snapshot
            .turns
            .iter()
            .flat_map(|t| {
                t.tools
                    .iter()
                    .map(|tool| (tool.id.as_str(), tool.heartbeats))
            })
            .collect();
        expected
            .iter()
            .all(|(id, want)| match shown.get(id.as_str()) {
                Some(&seen) => {
                    assert!(seen <= *want, "{id} shows {seen} heartbeats of {want}");
                    seen == *want
                }
                None => false,
            })
    }

    /// Waits until the store's heartbeat counts add up to `want` (the progress writer's last batch
    /// and the results' writes); panics after 30 s.
    async fn store_counts(&self, want: u64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let counted = self.counted().await;
            if counted == want as i64 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the store counted {counted} heartbeats of {want}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Heartbeats the store counted, in all.
    async fn counted(&self) -> i64 {
        let mut c = self.app.store.conn().await.expect("conn");
        let (sum,): (Option<i64>,) =
            sqlx::query_as("SELECT CAST(SUM(heartbeats) AS BIGINT) FROM tool_calls")
                .only(&mut *c)
                .await
                .expect("sum");
        sum.unwrap_or(0)
    }
}

/// The one-minute load average (`/proc/loadavg`), to say how quiet the machine was.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let n = env("INGEST_FRAMES", if bench { 1_000_000 } else { 5_000 });
    let sessions = env("INGEST_SESSIONS", if bench { 100 } else { 10 }).max(1);
    let rounds = env("INGEST_ROUNDS", if bench { 3 } else { 1 }).max(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        chat_bridge_tests::init_tracing();
        let template = heartbeat_template();
        let bare_frames: Vec<Utf8Bytes> = (0..sessions)
            .map(|i| {
                Utf8Bytes::from(
                    template
                        .replace("{SESSION}", &format!("ingest-s{}", i + 1))
                        .replace("{CALL}", &format!("call_{}", i + 1)),
                )
            })
            .collect();
        let bridge = Bridge::start().await;
        let backend = if std::env::var("DATABASE_URL").is_ok() {
            "postgres"
        } else {
            "sqlite"
        };
        let mut ratios = Vec::new();
        let load_before = load_average();
        // For profiling one side: `INGEST_ONLY=bridge` runs the bridge's rounds alone.
        let only_bridge = std::env::var("INGEST_ONLY").is_ok_and(|v| v == "bridge");
        for round in 1..=rounds {
            if only_bridge {
                let ours = bridge.round(&template, sessions, n).await;
                bridge.store_counts((n * round) as u64).await;
                println!(
                    "ingest round {round}: bridge ({backend}) {:.0} frames/s taken in; the {sessions} results then {:.1} ms",
                    ours.ingest_fps, ours.results_ms
                );
                continue;
            }
            let bare = bare_round(&bare_frames, n, false).await;
            let classifying = bare_round(&bare_frames, n, true).await;
            let ours = bridge.round(&template, sessions, n).await;
            // No figure before the store has every heartbeat of the round counted.
            bridge.store_counts((n * round) as u64).await;
            let ratio = ours.ingest_fps / bare;
            ratios.push(ratio);
            println!(
                "ingest round {round}: {n} heartbeat frames ({} bytes each) over {sessions} sessions: bare tokio-tungstenite reader {bare:.0} frames/s, the same reader classifying each frame {classifying:.0} frames/s ({:.0}%), bridge ({backend}) {:.0} frames/s taken in, ratio {:.0}% (target ≥ 50%: {}); the {sessions} results then {:.1} ms to the chat",
                bare_frames[0].len(),
                100.0 * classifying / bare,
                ours.ingest_fps,
                100.0 * ratio,
                if ratio >= 0.5 { "met" } else { "MISSED" },
                ours.results_ms,
            );
            println!(
                "INGEST_RESULT {}",
                json!({"round": round, "frames": n, "sessions": sessions, "backend": backend,
                       "bare_fps": bare, "classifying_fps": classifying,
                       "bridge_fps": ours.ingest_fps, "ratio": ratio,
                       "results_ms": ours.results_ms})
            );
        }
        if !ratios.is_empty() {
            let mut sorted = ratios.clone();
            sorted.sort_by(f64::total_cmp);
            let median = sorted[sorted.len() / 2];
            let met = ratios.iter().filter(|r| **r >= 0.5).count();
            let load_after = load_average();
            println!(
                "ingest: median ratio {:.1}% over {} rounds, {met} at ≥ 50%; load average {load_before} before, {load_after} after",
                100.0 * median,
                ratios.len(),
            );
            println!(
                "INGEST_SUMMARY {}",
                json!({"backend": backend, "rounds": ratios.len(), "median_ratio": median,
                       "rounds_met": met, "load_before": load_before, "load_after": load_after})
            );
        }
        assert_eq!(
            bridge.chat.posts.load(Ordering::SeqCst),
            (sessions * rounds) as u64,
            "one post per tool: no chat message per heartbeat"
        );
        bridge.app.shutdown().await;
    });
}
