//! Q1: SIGKILL the real bridge binary at 20 random points of a scripted workload on the fake Slack
//! (several conversations; silent commands, timeouts and quick ones, each behind an approval a person
//! clicks; a follow-up message in every thread arriving at a random moment of the kills, usually
//! while the first command still runs), restarting it on the same database each time. Afterwards
//! every expected chat message exists exactly once — two tool messages per conversation in a final
//! state, an approval per command (one the process died before recording is refused by the daemon,
//! and its tool message says so) — and every tool result is stored once.
//!
//! The daemon (the real shell agent) runs outside the bridge, so commands outlive the kills. Posts
//! carry an idempotency key (Slack message metadata); a post whose outcome a kill hid is looked up
//! with `conversations.replies` before it is sent again. An event is acknowledged to Slack only once
//! it is recorded in the inbox, and the fake, like Slack, delivers unacknowledged events again after
//! a reconnect; a follow-up recorded but waiting behind a running turn when the process dies is taken
//! from the inbox at the next start. A person clicks an approval again if its buttons are still there
//! a few seconds later, as people do.
//!
//! `Q1_SEED` replays a run; `Q1_KILLS` changes the number of kills.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chat_bridge::store::bind::FetchExt;
use chat_bridge::store::{Store, history, tool_calls};
use chat_bridge_tests::fake_slack::{FakeSlack, event_envelope};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use shell_agent::{AgentConfig, ShellAgent};

const THREADS: usize = 6;

fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join("chat-bridge"))
        .expect("target dir");
    if !bin.exists() {
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "-p", "chat-bridge", "--bin", "chat-bridge"])
            .status()
            .expect("cargo build");
        assert!(status.success(), "building chat-bridge");
    }
    bin
}

fn start_bridge(fake: &FakeSlack, db: &str, agent: &ShellAgent, dir: &std::path::Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("bridge.log"))
        .expect("log");
    Command::new(binary())
        .current_dir(dir)
        .env_remove("CHAT_BRIDGE_CONFIG")
        .env("CHAT_BRIDGE_SERVICE__PLATFORM", "slack")
        .env("CHAT_BRIDGE_SLACK__BOT_TOKEN", "xoxb-test")
        .env("CHAT_BRIDGE_SLACK__APP_TOKEN", "xapp-1-test")
        .env("CHAT_BRIDGE_SLACK__API_BASE_URL", &fake.base_url)
        .env("CHAT_BRIDGE_ACCESS__OPEN", "true")
        .env("CHAT_BRIDGE_DATABASE__URL", db)
        .env("CHAT_BRIDGE_DAEMON__URL", agent.url())
        .env("CHAT_BRIDGE_DAEMON__TOKEN", agent.token())
        .env("CHAT_BRIDGE_LIVENESS__IDLE", "4s")
        .env("CHAT_BRIDGE_SERVICE__DRAIN_TIMEOUT", "2s")
        .env("CHAT_BRIDGE_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start chat-bridge")
}

/// Commands whose lives spread over the kill window: silent ones of 2–7 s, timeouts after 2–7 s,
/// quick ones.
fn prompt(i: usize) -> String {
    match i % 3 {
        0 => format!("sleep {}; echo silent-{i}", 2 + i),
        1 => format!("timeout={}s echo partial-{i}; sleep 30", 2 + i),
        _ => format!("sleep 0.{i}; echo quick-{i}"),
    }
}

fn thread_ts(i: usize) -> String {
    format!("1700.{:06}", 100 + i)
}

fn title(m: &Value) -> String {
    m["text"].as_str().unwrap_or("").to_owned()
}

/// The latest state of each posted message: ts → (thread, first text, latest body).
fn messages(fake: &FakeSlack) -> Vec<(String, String, Value)> {
    let updates = fake.calls_of("chat.update");
    fake.posted()
        .into_iter()
        .map(|m| {
            let ts = m["ts"].as_str().unwrap_or("").to_owned();
            let latest = updates
                .iter()
                .rev()
                .find(|u| u.body["ts"] == ts.as_str())
                .map_or_else(|| m.clone(), |u| u.body.clone());
            (
                m["thread_ts"].as_str().unwrap_or("").to_owned(),
                title(&m),
                latest,
            )
        })
        .collect()
}

fn buttons(body: &Value) -> Option<String> {
    body["attachments"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|a| a["blocks"].as_array().cloned().unwrap_or_default())
        .chain(body["blocks"].as_array().cloned().unwrap_or_default())
        .find(|b| b["type"] == "actions")
        .and_then(|b| b["elements"][0]["value"].as_str().map(str::to_owned))
}

fn click(envelope: usize, thread: &str, ts: &str, value: &str) -> Value {
    json!({"envelope_id": format!("click-{envelope}"), "type": "interactive", "accepts_response_payload": false, "payload": {
        "type": "block_actions", "user": {"id": "U1"}, "team": {"id": "T1"}, "channel": {"id": "C1"},
        "message": {"ts": ts, "thread_ts": thread},
        "actions": [{"action_id": "choice_0", "block_id": "b", "value": value, "type": "button"}]}})
}

/// Clicks "Allow once" on approvals still showing buttons (again, if an earlier click did not take).
fn clicker(fake: &FakeSlack, last: &mut HashMap<String, Instant>, envelopes: &mut usize) {
    for (thread, _, body) in messages(fake) {
        let ts = body["ts"].as_str().unwrap_or("").to_owned();
        if let Some(value) = buttons(&body)
            && last
                .get(&ts)
                .is_none_or(|t| t.elapsed() > Duration::from_secs(3))
        {
            *envelopes += 1;
            fake.push(click(*envelopes, &thread, &ts, &value));
            last.insert(ts, Instant::now());
        }
    }
}

/// Every conversation in the store (the suite has six).
async fn conversations(
    c: &mut sqlx::AnyConnection,
) -> Vec<chat_bridge::store::conversations::Conversation> {
    history::list(
        c,
        &history::Filter {
            limit: Some(100),
            ..Default::default()
        },
    )
    .await
    .expect("list")
    .items
}

/// (conversations, turns, open turns, pending outbox rows, unhandled inbox entries).
async fn counts(store: &Store) -> (usize, usize, usize, i64, usize) {
    let mut c = store.conn().await.expect("conn");
    let convs = conversations(&mut c).await;
    let open: (i64,) = sqlx::query_as("SELECT COUNT(*) FROM turns WHERE status = 'open'")
        .only(&mut *c)
        .await
        .expect("turns");
    let turns: (i64,) = sqlx::query_as("SELECT COUNT(*) FROM turns")
        .only(&mut *c)
        .await
        .expect("turns");
    let unhandled = chat_bridge::store::inbound::unhandled(&mut c)
        .await
        .expect("inbox")
        .len();
    let pending = chat_bridge::store::outbox::stats(&mut c, chat_bridge::store::now_ms())
        .await
        .expect("stats")
        .pending;
    let n = |v: i64| usize::try_from(v).unwrap_or(0);
    (convs.len(), n(turns.0), n(open.0), pending, unhandled)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q1_sigkill_at_20_random_points_every_chat_message_once_and_every_result_stored_once() {
    chat_bridge_tests::init_tracing();
    let seed: u64 = std::env::var("Q1_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let kills: usize = std::env::var("Q1_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    println!("Q1 seed {seed} ({kills} kills)");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("tmp");
    let db = format!("sqlite://{}", dir.path().join("q1.db").display());
    let fake = FakeSlack::start().await;
    let agent = ShellAgent::start(
        "127.0.0.1:0".parse().expect("addr"),
        None,
        AgentConfig {
            heartbeat_interval: Duration::from_millis(200),
            require_approval: true,
            ..AgentConfig::default()
        },
    )
    .await
    .expect("agent");

    let mut bridge = start_bridge(&fake, &db, &agent, dir.path());
    fake.wait_for("Socket Mode", |f| f.sockets() >= 1).await;
    for i in 0..THREADS {
        let mention = json!({"type": "app_mention", "user": "U1", "channel": "C1", "ts": thread_ts(i),
                             "text": format!("<@UBOT> {}", prompt(i)), "event_ts": thread_ts(i)});
        fake.push(event_envelope(
            &format!("env-{i}"),
            &format!("Ev{i}"),
            0,
            mention,
        ));
    }
    let store = Store::connect(&db).await.expect("store");
    let deadline = Instant::now() + Duration::from_secs(30);
    while counts(&store).await.0 < THREADS {
        assert!(Instant::now() < deadline, "the prompts were not all taken");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Each thread's follow-up arrives before one of the kills, at a random moment of its wait.
    let follow_ups: Vec<usize> = (0..THREADS)
        .map(|_| rng.random_range(0..kills.max(1)))
        .collect();
    let (mut last_click, mut envelopes) = (HashMap::new(), 0usize);
    for k in 0..kills {
        let wait = Duration::from_millis(rng.random_range(100..900));
        let start = Instant::now();
        let mut due: Vec<(Duration, usize)> = follow_ups
            .iter()
            .enumerate()
            .filter(|&(_, &at)| at == k)
            .map(|(i, _)| (wait.mul_f64(rng.random_range(0.0..1.0)), i))
            .collect();
        loop {
            let done = start.elapsed() >= wait;
            clicker(&fake, &mut last_click, &mut envelopes);
            // Past the wait, whatever is still due goes now: every follow-up is sent before its kill.
            due.retain(|&(at, i)| {
                if !done && start.elapsed() < at {
                    return true;
                }
                let reply = json!({"type": "message", "user": "U1", "channel": "C1",
                                   "ts": format!("1800.{:06}", 100 + i), "thread_ts": thread_ts(i),
                                   "text": format!("echo followup-{i}")});
                fake.push(event_envelope(
                    &format!("env-f{i}"),
                    &format!("EvF{i}"),
                    0,
                    reply,
                ));
                false
            });
            if done {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        bridge.kill().expect("SIGKILL");
        let _ = bridge.wait();
        let sockets = fake.sockets();
        bridge = start_bridge(&fake, &db, &agent, dir.path());
        fake.wait_for("the restarted bridge's socket", |f| f.sockets() > sockets)
            .await;
    }
    // Let the workload finish.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        clicker(&fake, &mut last_click, &mut envelopes);
        let (convs, turns, open, pending, unhandled) = counts(&store).await;
        if convs == THREADS && turns == 2 * THREADS && open == 0 && pending == 0 && unhandled == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the workload did not finish (seed {seed}): {turns} of {} turns, {open} open, {pending} pending, {unhandled} unhandled; log in {}",
            2 * THREADS,
            dir.path().display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(bridge.id()).expect("pid")),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    assert!(
        bridge.wait().expect("wait").success(),
        "exit 0 after SIGTERM"
    );

    let all = messages(&fake);
    for i in 0..THREADS {
        let thread = thread_ts(i);
        let here: Vec<&(String, String, Value)> =
            all.iter().filter(|(t, _, _)| *t == thread).collect();
        let titles: Vec<&str> = here.iter().map(|(_, t, _)| t.as_str()).collect();
        let mut seen = std::collections::HashSet::new();
        for t in &titles {
            assert!(
                seen.insert(*t),
                "thread {i}: {t:?} posted twice (seed {seed}): {titles:?}"
            );
        }
        let approvals = titles
            .iter()
            .filter(|t| t.starts_with("🔐 approval needed"))
            .count();
        // One per command — fewer when a kill landed between the daemon asking and the bridge
        // recording the question: the daemon then refuses the command ("nobody could approve"),
        // which its tool message shows.
        assert!(
            (1..=2).contains(&approvals),
            "thread {i}: an approval message per command at most (seed {seed}): {titles:?}"
        );
        let tools: Vec<&&(String, String, Value)> = here
            .iter()
            .filter(|(_, t, _)| t.starts_with("⏳"))
            .collect();
        assert_eq!(
            tools.len(),
            2,
            "thread {i}: one tool message per command (seed {seed}): {titles:?}"
        );
        for tool in &tools {
            let last = tool.2["text"].as_str().unwrap_or("");
            assert!(
                ["✅", "⏱", "❌", "⏹"].iter().any(|p| last.starts_with(p)),
                "thread {i}: the tool message ends in a final state (seed {seed}): {last:?}"
            );
        }
        assert!(
            tools.iter().any(|t| t.1.contains(&format!("followup-{i}"))),
            "thread {i}: the follow-up ran (seed {seed}): {titles:?}"
        );
    }
    let mut c = store.conn().await.expect("conn");
    let convs = conversations(&mut c).await;
    assert_eq!(convs.len(), THREADS);
    for conv in &convs {
        let calls = tool_calls::of_conversation(&mut c, &conv.id)
            .await
            .expect("calls");
        assert_eq!(
            calls.len(),
            2,
            "one stored result per command (seed {seed})"
        );
        assert!(
            calls.iter().all(|c| c.status != "running"),
            "seed {seed}: {calls:?}"
        );
    }
    drop(c);
    let log = std::fs::read_to_string(dir.path().join("bridge.log")).unwrap_or_default();
    println!(
        "Q1: {kills} kills, {} posts, {} edits, {} clicks; posts found again instead of re-sent: {}; events redelivered by Slack: {}; inbox events taken again at a start: {}",
        fake.posted().len(),
        fake.calls_of("chat.update").len(),
        envelopes,
        log.matches("found the message an interrupted attempt posted")
            .count(),
        fake.redelivered(),
        log.matches("taking chat events the previous run recorded")
            .count()
    );
    store.close().await;
    agent.shutdown().await;
}
