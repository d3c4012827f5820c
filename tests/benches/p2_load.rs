//! P2: the bridge under many concurrent sessions, each running a silent command whose daemon sends a
//! heartbeat every second (qwen's real heartbeat frame), on a loopback daemon, with a chat that
//! records when each message arrives.
//!
//! Measured: latency from the daemon sending a tool's result frame to that result reaching the chat
//! (frame → outbox → chat; the outbox step is inside it), CPU and peak RSS of the process (the load
//! daemon runs in it too, so both are upper bounds for the bridge), and that heartbeats never become
//! chat messages (exactly one post and one edit per tool).
//!
//! `cargo bench -p chat-bridge-tests --bench p2_load` runs N = 1,000 sessions on the store
//! `DATABASE_URL` names (a fresh database on it) when set, else SQLite; `cargo test` (CI) runs
//! N = 100 on SQLite and then, when `DATABASE_URL` is set, on PostgreSQL, printing both. Each run
//! ends with a `P2_RESULT {json}` line (scripts/p2-chart reads it). Above 1,000 sessions the targets
//! are issue 20's (p99 ≤ 10 ms, RSS ≤ 300 MB). The open file descriptors at the end are printed.
//! `P2_SESSIONS`, `P2_HEARTBEATS` (per tool, default 10; 5 under `cargo test`) override.
//! `P2_DUMP=FILE` writes each result's send time and its outbox row's time (unix ms, one pair a
//! line), to see when in the run the slow ones fell. `P2_PROBE=FILE` writes when a 5 ms sleep woke
//! more than 10 ms late, on a runtime task and on an OS thread (unix ms, lateness ms, which), to tell a
//! busy runtime from a stalled host.
//!
//! Soak: `P2_SOAK_MINUTES=30 P2_SESSIONS=200 cargo bench -p chat-bridge-tests --bench p2_load` keeps
//! the load up for that long (each session starts a new tool when one ends), samples RSS and the live
//! heap (a counting allocator) every minute and checks the second half of the soak stays flat within
//! 10% (the first half includes the warm-up of bounded caches; its growth is printed too).
//! `--features heap-profile` runs it under dhat instead and writes `dhat-heap.json` (what is live
//! just before shutdown, by call stack). `P2_PROJECTS=4` spreads the sessions over that many
//! `[[projects]]` (each its own loopback daemon and daemon connection, its channels on two
//! platforms: even projects on `slack`, odd ones on `discord`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chat_bridge::app::Application;
use chat_bridge::channel::{
    BoxFuture, Capabilities, Channel, DeliveryError, Inbound, InboundKind, Message, Target, Tone,
};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message as Ws;
use tokio_util::sync::CancellationToken;

/// The system allocator, counting the bytes live on the heap, so the soak can tell a leak (live
/// heap grows) from allocator fragmentation (RSS grows, live heap flat).
#[cfg_attr(feature = "heap-profile", allow(dead_code))]
struct Counting;

#[cfg_attr(feature = "heap-profile", allow(dead_code))]
static LIVE_HEAP: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the counter only observes sizes.
#[allow(unsafe_code)]
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { std::alloc::System.alloc(layout) };
        if !p.is_null() {
            LIVE_HEAP.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: `ptr` came from `alloc`/`realloc` above with this layout.
        unsafe { std::alloc::System.dealloc(ptr, layout) };
        LIVE_HEAP.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { std::alloc::System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE_HEAP.fetch_add(new_size, Ordering::Relaxed);
            LIVE_HEAP.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

#[cfg(not(feature = "heap-profile"))]
#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[cfg(feature = "heap-profile")]
#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

/// Bytes live on the heap now.
fn live_heap() -> usize {
    #[cfg(feature = "heap-profile")]
    {
        dhat::HeapStats::get().curr_bytes
    }
    #[cfg(not(feature = "heap-profile"))]
    {
        LIVE_HEAP.load(Ordering::Relaxed)
    }
}

/// When each session's result frame was sent (monotonic, and unix ms for the store's clock).
type Sent = Arc<Mutex<HashMap<String, (Instant, f64)>>>;

fn unix_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// The chat: records posts and edits; a ✅ edit closes a sample.
#[derive(Default)]
struct Chat {
    posts: AtomicU64,
    edits: AtomicU64,
    progress: AtomicU64,
    /// thread → when its latest result was delivered.
    results: Mutex<HashMap<String, Instant>>,
    /// Results delivered so far.
    delivered: AtomicU64,
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
        t: &'a Target,
        _id: &'a str,
        m: &'a Message,
    ) -> BoxFuture<'a, Result<(), DeliveryError>> {
        self.edits.fetch_add(1, Ordering::SeqCst);
        if m.tone == Tone::Success {
            self.results
                .lock()
                .expect("lock")
                .insert(t.thread.clone(), Instant::now());
            self.delivered.fetch_add(1, Ordering::SeqCst);
        } else if m.tone == Tone::Running {
            self.progress.fetch_add(1, Ordering::SeqCst);
        }
        Box::pin(async { Ok(()) })
    }
}

fn heartbeat(session: &str, call: &str, elapsed_ms: u64) -> String {
    json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":session,"update":{
        "_meta":{"toolName":"run_shell_command","shellProgress":{"type":"shell_progress","elapsedMs":elapsed_ms,"timeoutMs":600_000}},
        "status":"in_progress","toolCallId":call,"sessionUpdate":"tool_call_update"}}}).to_string()
}

/// The loopback daemon: one connection, many sessions; each prompt runs a silent "command" that
/// heartbeats every second `beats` to `2 × beats - 1` times and then completes. The commands of a
/// round start their heartbeats together once all `per_round` prompts of the round have arrived (until
/// then they heartbeat every second too), so all N sessions are concurrent however long opening
/// them takes (at 10,000 sessions, longer than a tool runs).
async fn load_daemon(
    listener: TcpListener,
    beats: u64,
    sent: Sent,
    heartbeats: Arc<AtomicU64>,
    prefix: String,
    per_round: usize,
    prompts: Arc<(std::sync::atomic::AtomicUsize, tokio::sync::Notify)>,
) {
    let Ok((tcp, _)) = listener.accept().await else {
        return;
    };
    // As real daemons do (qwen's `ws` library, shell-agent): without it, Nagle's algorithm holds a
    // small frame for the bridge's delayed ACK, 40 ms — the tail this bench once measured.
    let _ = tcp.set_nodelay(true);
    let Ok(ws) = tokio_tungstenite::accept_async(tcp).await else {
        return;
    };
    let (mut sink, mut stream) = ws.split();
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        while let Some(text) = rx.recv().await {
            if sink.send(Ws::text(text)).await.is_err() {
                return;
            }
        }
    });
    let next = AtomicU64::new(0);
    while let Some(Ok(frame)) = stream.next().await {
        let Ws::Text(text) = frame else { continue };
        let Ok(msg) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        let reply =
            |result: Value| json!({"jsonrpc":"2.0","id":msg["id"],"result":result}).to_string();
        match msg["method"].as_str() {
            Some("initialize") => {
                let _ = tx.send(reply(
                    json!({"protocolVersion":1,"agentCapabilities":{"loadSession":true}}),
                ));
            }
            Some("session/new") => {
                let n = next.fetch_add(1, Ordering::SeqCst);
                let _ = tx.send(reply(json!({"sessionId": format!("{prefix}s{n}")})));
            }
            Some("session/prompt") => {
                let session = msg["params"]["sessionId"].as_str().unwrap_or("").to_owned();
                let id = msg["id"].clone();
                let (tx, sent, heartbeats) = (tx.clone(), sent.clone(), heartbeats.clone());
                let arrived = prompts.0.fetch_add(1, Ordering::SeqCst) + 1;
                let all = arrived.div_ceil(per_round.max(1)) * per_round.max(1);
                if arrived == all {
                    prompts.1.notify_waiters();
                }
                let prompts = prompts.clone();
                tokio::spawn(async move {
                    let call = format!("call-{}", uuid::Uuid::new_v4().simple());
                    let update = |u: Value| {
                        json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":session,"update":u}}).to_string()
                    };
                    let _ = tx.send(update(json!({"sessionUpdate":"tool_call","toolCallId":call,"title":"make test","kind":"execute","status":"in_progress"})));
                    // A command waiting for the others is running too: it heartbeats meanwhile.
                    let mut waited = 0;
                    loop {
                        let released = prompts.1.notified();
                        tokio::pin!(released);
                        released.as_mut().enable();
                        if prompts.0.load(Ordering::SeqCst) >= all {
                            break;
                        }
                        tokio::select! {
                            () = released => break,
                            () = tokio::time::sleep(Duration::from_secs(1)) => {
                                waited += 1;
                                let _ = tx.send(heartbeat(&session, &call, waited * 1000));
                                heartbeats.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    // Start at a random point of the second, as real sessions do, and end over the
                    // next `beats` seconds: N sessions running tools of about `beats` seconds back
                    // to back finish N / `beats` tools a second, not all N at once.
                    tokio::time::sleep(Duration::from_millis(rand::random::<u64>() % 1000)).await;
                    let beats = beats + rand::random::<u64>() % beats.max(1);
                    for i in 1..=beats {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        let _ = tx.send(heartbeat(&session, &call, (waited + i) * 1000));
                        heartbeats.fetch_add(1, Ordering::Relaxed);
                    }
                    let done = update(
                        json!({"sessionUpdate":"tool_call_update","toolCallId":call,"status":"completed","rawOutput":{"output":"ok","exitCode":0}}),
                    );
                    sent.lock()
                        .expect("lock")
                        .insert(session.clone(), (Instant::now(), unix_ms()));
                    let _ = tx.send(done);
                    let _ = tx.send(
                        json!({"jsonrpc":"2.0","id":id,"result":{"stopReason":"end_turn"}})
                            .to_string(),
                    );
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

/// PostgreSQL's next transaction id (cluster-wide; the bench is the only writer it measures).
async fn writing_transactions(app: &Application, backend: Backend) -> Option<i64> {
    if !matches!(backend, Backend::Postgres) {
        return None;
    }
    let mut c = app.store.conn().await.expect("conn");
    let rows: Vec<(i64,)> = sqlx::query_as("SELECT txid_current()")
        .fetch_all(&mut *c)
        .await
        .expect("txid_current");
    rows.first().map(|r| r.0)
}

fn proc_status(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// CPU seconds used by this process so far.
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = after
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    // After the comm field: state is not numeric, so utime/stime are the 12th/13th numbers.
    let ticks = f.get(10).copied().unwrap_or(0) + f.get(11).copied().unwrap_or(0);
    ticks as f64 / 100.0
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Where session `i` talks: the console's "load" channel, or with `projects` > 1 project
/// `i % projects`'s channel (`load<k>`, on slack for even k, discord for odd k).
fn place(i: usize, projects: usize) -> (&'static str, String) {
    if projects <= 1 {
        return ("console", "load".into());
    }
    let k = i % projects;
    (
        if k.is_multiple_of(2) {
            "slack"
        } else {
            "discord"
        },
        format!("load{k}"),
    )
}

fn inbound(i: usize, projects: usize, text: &str) -> Inbound {
    let (platform, channel) = place(i, projects);
    Inbound {
        event_id: uuid::Uuid::new_v4().to_string(),
        platform: platform.into(),
        target: Target {
            workspace: "local".into(),
            channel,
            thread: format!("t{i}"),
        },
        user: "load".into(),
        message_id: None,
        opens: true,
        kind: InboundKind::Message(text.into()),
    }
}

type ProbeLines = Arc<Mutex<Vec<String>>>;

/// Two sleepers of 5 ms, one a runtime task and one an OS thread, each recording when it woke more
/// than 10 ms late: late on both is the host (CPU taken, the VM paused), late on the task only is the
/// runtime (a worker busy or blocked).
fn start_probes() -> (ProbeLines, CancellationToken) {
    let lines: ProbeLines = Arc::default();
    let stop = CancellationToken::new();
    let tick = Duration::from_millis(5);
    let record = |lines: &ProbeLines, late: Duration, which: &str| {
        if late > Duration::from_millis(10) {
            lines.lock().expect("lock").push(format!(
                "{:.0} {} {which}\n",
                unix_ms(),
                late.as_millis()
            ));
        }
    };
    {
        let (lines, stop) = (lines.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                let t = Instant::now();
                tokio::time::sleep(tick).await;
                record(&lines, t.elapsed().saturating_sub(tick), "task");
            }
        });
    }
    {
        let (lines, stop) = (lines.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.is_cancelled() {
                let t = Instant::now();
                std::thread::sleep(tick);
                record(&lines, t.elapsed().saturating_sub(tick), "thread");
            }
        });
    }
    (lines, stop)
}

/// The store a run uses.
#[derive(Clone, Copy, Debug)]
enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
        }
    }
}

/// File descriptors open now: sessions share their project's one daemon connection, so this stays
/// near the pools' size whatever N is (RLIMIT_NOFILE is not what bounds the session count).
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count)
}

/// Resets the process's peak RSS (VmHWM), so each run of one invocation reports its own peak.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let n = env("P2_SESSIONS", if bench { 1000 } else { 100 }) as usize;
    // CI runs two backends one after the other: 5 heartbeats per tool keep each run near 6 s.
    let beats = env("P2_HEARTBEATS", if bench { 10 } else { 5 });
    let soak = Duration::from_secs(env("P2_SOAK_MINUTES", 0) * 60);
    let projects = env("P2_PROJECTS", 1).max(1) as usize;
    let pg = std::env::var("DATABASE_URL").is_ok();
    // `cargo bench`: the backend `DATABASE_URL` says. `cargo test` (CI): SQLite, then PostgreSQL when
    // `DATABASE_URL` is set, so both backends' figures are printed on every run.
    let backends: Vec<Backend> = match (bench, pg) {
        (true, true) => vec![Backend::Postgres],
        (true, false) | (false, false) => vec![Backend::Sqlite],
        (false, true) => vec![Backend::Sqlite, Backend::Postgres],
    };
    for backend in backends {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(run(backend, n, beats, soak, projects));
    }
}

async fn run(backend: Backend, n: usize, beats: u64, soak: Duration, projects: usize) {
    chat_bridge_tests::init_tracing();
    #[cfg(feature = "heap-profile")]
    let profiler = dhat::Profiler::new_heap();
    reset_peak_rss();
    let db = match backend {
        Backend::Postgres => {
            chat_bridge_tests::db::TestDb::new(chat_bridge::store::Backend::Postgres).await
        }
        Backend::Sqlite => {
            chat_bridge_tests::db::TestDb::new(chat_bridge::store::Backend::Sqlite).await
        }
    };
    let dir = tempfile::tempdir().expect("tmp");
    let sent: Sent = Arc::default();
    let heartbeats = Arc::new(AtomicU64::new(0));
    let mut urls = Vec::new();
    // Every daemon's prompts, counted together: all N commands start heartbeating at once.
    let prompts = Arc::new((
        std::sync::atomic::AtomicUsize::new(0),
        tokio::sync::Notify::new(),
    ));
    for k in 0..projects {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        urls.push(format!("ws://{}/acp", listener.local_addr().expect("addr")));
        // Session ids are the daemon's own: each daemon's are distinct, as real daemons' are.
        let prefix = if projects > 1 {
            format!("p{k}-")
        } else {
            String::new()
        };
        tokio::spawn(load_daemon(
            listener,
            beats,
            sent.clone(),
            heartbeats.clone(),
            prefix,
            n,
            prompts.clone(),
        ));
    }
    let mut cfg = chat_bridge_tests::bridge::config(&db.url, dir.path());
    if projects > 1 {
        let token_file = dir.path().join("load.token");
        std::fs::write(&token_file, "load").expect("token file");
        cfg.daemon.cwd = None;
        cfg.projects = urls
            .iter()
            .enumerate()
            .map(|(k, url)| {
                let (platform, channel) = place(k, projects);
                chat_bridge::config::Project {
                    name: format!("p{k}"),
                    channels: vec![format!("{platform}:{channel}")],
                    daemon: chat_bridge::config::Daemon {
                        url: Some(url.clone()),
                        token: Some("load".into()),
                        token_file: Some(token_file.clone()),
                        ..chat_bridge::config::Daemon::default()
                    },
                    ..chat_bridge::config::Project::default()
                }
            })
            .collect();
    } else {
        cfg.daemon.url = Some(urls[0].clone());
        cfg.daemon.token = Some("load".into());
    }
    cfg.liveness.idle = Duration::from_secs(5);
    cfg.liveness.progress_after = Duration::from_secs(3600);
    if let Some(n) = std::env::var("P2_DB_CONNECTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        cfg.database.max_connections = n;
    }
    let probe = std::env::var("P2_PROBE")
        .ok()
        .map(|path| (path, start_probes()));
    let chat = Arc::new(Chat::default());
    let app = Application::build(&cfg, chat.clone()).await.expect("build");
    let stop = CancellationToken::new();
    let opening = Instant::now();
    let (mut cpu0, mut t0) = (cpu_secs(), Instant::now());
    let mut rss_samples = Vec::new();
    let mut rounds = 0usize;
    let mut xid0 = None;
    loop {
        rounds += 1;
        for i in 0..n {
            app.accept(inbound(i, projects, "make test"), &stop).await;
        }
        if rounds == 1 {
            // From here all N sessions heartbeat at once: CPU and wall time are of that.
            println!(
                "P2: {n} sessions opened in {:.1} s",
                opening.elapsed().as_secs_f64()
            );
            (cpu0, t0) = (cpu_secs(), Instant::now());
            xid0 = writing_transactions(&app, backend).await;
        }
        tokio::time::timeout(Duration::from_secs(2 * beats + 120), async {
            while (chat.delivered.load(Ordering::SeqCst) as usize) < n * rounds {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .unwrap_or_else(|_| {
            panic!(
                "not every result arrived: {} of {}",
                chat.delivered.load(Ordering::SeqCst),
                n * rounds
            )
        });
        chat_bridge_tests::bridge::settle(&app).await;
        let elapsed = t0.elapsed();
        if soak.is_zero() || elapsed >= soak {
            break;
        }
        if rss_samples.len() < (elapsed.as_secs() / 60) as usize + 1 {
            rss_samples.push((elapsed.as_secs() / 60, proc_status("VmRSS:")));
            println!(
                "P2 soak: minute {} RSS {} kB, live heap {} kB",
                elapsed.as_secs() / 60,
                proc_status("VmRSS:"),
                live_heap() / 1024
            );
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_secs() - cpu0;
    // Transactions that wrote, from the sessions' release to the end (PostgreSQL's transaction
    // ids: each is one commit, synchronous or not; the two reads take one each).
    let writes = match (xid0, writing_transactions(&app, backend).await) {
        (Some(a), Some(b)) => Some(b - a - 1),
        _ => None,
    };
    let sent = sent.lock().expect("lock").clone();
    // Latency of the last result per session (earlier rounds' send times were overwritten).
    let last = chat.results.lock().expect("lock").clone();
    let mut lat: Vec<Duration> = Vec::new();
    let mut to_outbox: Vec<Duration> = Vec::new();
    // The results' outbox rows: the newest edit of each conversation (unix ms, as the store keeps
    // it), read in one statement rather than one per session.
    let newest_edit: HashMap<String, i64> = {
        let mut c = app.store.conn().await.expect("conn");
        sqlx::query_as::<_, (String, i64)>(
            "SELECT conversation_id, MAX(created_at) FROM outbox WHERE kind = 'edit' GROUP BY conversation_id",
        )
        .fetch_all(&mut *c)
        .await
        .expect("outbox rows")
        .into_iter()
        .collect()
    };
    // `P2_DUMP=FILE`: each result's send time and its outbox row's time (unix ms), one per line,
    // to see when in the run the slow ones fell.
    let mut dump: Vec<(f64, i64)> = Vec::new();
    for (thread, delivered) in &last {
        // thread t{i} → its conversation and daemon session, from the store.
        let mut c = app.store.conn().await.expect("conn");
        let i: usize = thread.trim_start_matches('t').parse().expect("t<i>");
        let (platform, channel) = place(i, projects);
        let key = chat_bridge::store::conversations::Key {
            platform,
            workspace: "local",
            channel: &channel,
            thread,
        };
        let conv = chat_bridge::store::conversations::find(&mut c, &key)
            .await
            .expect("find")
            .expect("conversation");
        let Some((at, at_ms)) = conv
            .daemon_session
            .as_deref()
            .and_then(|s| sent.get(s))
            .copied()
        else {
            continue;
        };
        lat.push(delivered.saturating_duration_since(at));
        let created = *newest_edit.get(&conv.id).expect("the result's outbox row");
        dump.push((at_ms, created));
        to_outbox.push(Duration::from_secs_f64(
            ((created as f64 - at_ms).max(0.0)) / 1000.0,
        ));
    }
    if let Ok(path) = std::env::var("P2_DUMP") {
        dump.sort_by(|a, b| a.0.total_cmp(&b.0));
        let lines: String = dump
            .iter()
            .map(|(at, created)| format!("{at:.0} {created}\n"))
            .collect();
        std::fs::write(&path, lines).expect("P2_DUMP");
    }
    if let Some((path, (lines, stop_probes))) = probe {
        stop_probes.cancel();
        let lines = lines.lock().expect("lock").concat();
        std::fs::write(&path, lines).expect("P2_PROBE");
    }
    to_outbox.sort();
    lat.sort();
    let posts = chat.posts.load(Ordering::SeqCst);
    let edits = chat.edits.load(Ordering::SeqCst);
    let beats_sent = heartbeats.load(Ordering::SeqCst);
    let tools = (n * rounds) as u64;
    let rss_mb = proc_status("VmHWM:") / 1024;
    let fds = open_fds();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "P2 ({}): {n} sessions over {projects} project(s), {rounds} round(s), {beats_sent} heartbeats in {wall:.1} s; frame→outbox p50 {:?} p99 {:?} (ms resolution); frame→chat p50 {:?} p99 {:?} max {:?} ({} samples); CPU {:.2} s ({:.0}% of one core, {:.1}% per 1,000 sessions); peak RSS {rss_mb} MB; {fds} open files; chat: {posts} posts, {edits} edits for {tools} tools",
        backend.name(),
        percentile(&to_outbox, 0.5),
        percentile(&to_outbox, 0.99),
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat.last().copied().unwrap_or_default(),
        lat.len(),
        cpu,
        100.0 * cpu / wall,
        100.0 * cpu / wall * 1000.0 / n as f64,
    );
    // The targets: issue 20's for more than 1,000 sessions (10,000: p99 ≤ 10 ms, RSS ≤ 300 MB), P2's
    // for up to 1,000.
    let (p99_target, rss_target) = if n > 1000 {
        (Duration::from_millis(10), 300)
    } else {
        (Duration::from_millis(5), 150)
    };
    let p99 = percentile(&to_outbox, 0.99);
    let one_each = posts == tools && edits == tools;
    if let Some(writes) = writes {
        println!(
            "P2 commits: {writes} writing transactions from the release on ({:.2} per tool)",
            writes as f64 / tools as f64
        );
    }
    println!(
        "P2 targets: frame→outbox p99 {p99:?} (≤ {p99_target:?}: {}), peak RSS {rss_mb} MB (≤ {rss_target} MB: {}), no chat message per heartbeat: {}",
        if p99 <= p99_target { "met" } else { "MISSED" },
        if rss_mb <= rss_target {
            "met"
        } else {
            "MISSED"
        },
        if one_each { "met" } else { "MISSED" },
    );
    // One line for scripts (scripts/p2-chart reads it).
    println!(
        "P2_RESULT {}",
        json!({
            "backend": backend.name(),
            "sessions": n,
            "projects": projects,
            "rounds": rounds,
            "heartbeats": beats_sent,
            "wall_s": wall,
            "outbox_p50_ms": ms(percentile(&to_outbox, 0.5)),
            "outbox_p99_ms": ms(p99),
            "chat_p50_ms": ms(percentile(&lat, 0.5)),
            "chat_p99_ms": ms(percentile(&lat, 0.99)),
            "chat_max_ms": ms(lat.last().copied().unwrap_or_default()),
            "cpu_s": cpu,
            "cpu_pct": 100.0 * cpu / wall,
            "cpu_pct_per_1k": 100.0 * cpu / wall * 1000.0 / n as f64,
            "peak_rss_mb": rss_mb,
            "open_fds": fds,
            "posts": posts,
            "edits": edits,
            "tools": tools,
            "commits": writes,
        })
    );
    assert_eq!(lat.len(), n, "a latency sample per session");
    assert!(
        rss_mb <= rss_target,
        "peak RSS {rss_mb} MB over {rss_target} MB"
    );
    assert!(beats_sent >= tools * beats, "every heartbeat was sent");
    assert_eq!(
        posts, tools,
        "one message per tool: no chat message per heartbeat"
    );
    assert_eq!(
        edits, tools,
        "one edit per tool (its result): heartbeats never edit"
    );
    if rss_samples.len() > 4 {
        // Warm-up fills bounded memory (pool connections and their statement caches, the F4 memory of
        // 64 settled calls per session); a leak keeps growing after it. Both are printed; the
        // second half of the soak must stay within 10% of its first sample.
        let ratio = |from: usize| {
            let base = rss_samples[from].1 as f64;
            rss_samples[from..]
                .iter()
                .map(|(_, r)| *r as f64 / base)
                .fold(0.0f64, f64::max)
        };
        let half = rss_samples.len() / 2;
        println!(
            "P2 soak: RSS samples (minute, kB) {rss_samples:?}; max / minute 1 = {:.3}; second half max / its start = {:.3}",
            ratio(1),
            ratio(half)
        );
        assert!(
            ratio(half) <= 1.10,
            "RSS kept growing in the second half of the soak: {rss_samples:?}"
        );
    }
    // The profile shows what is live now, before shutdown frees it.
    #[cfg(feature = "heap-profile")]
    drop(profiler);
    app.shutdown().await;
    db.cleanup().await;
}
