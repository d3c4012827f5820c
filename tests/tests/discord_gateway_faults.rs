//! The Discord gateway loop against a peer that misbehaves on purpose (issue 24 items 1 and 2:
//! `/readyz` says whether channels are connected; as L4 for the daemon, heartbeats check the
//! transport): a close frame without a status code, a RESUME never answered, heartbeats never
//! ACKed, a peer that stops reading, and a refused token. Short deadlines ([`Timing`]) keep each case under a few
//! seconds; `connected` (what `/readyz` reads) is checked at every step.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chat_bridge::channel::Channel;
use chat_bridge::channel::discord::events::Access;
use chat_bridge::channel::discord::gateway::Timing;
use chat_bridge::channel::discord::{self, Gateway};
use chat_bridge::core::redact::Redactor;
use chat_bridge_tests::fake_discord::{BOT, FakeDiscord, TOKEN, user};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_util::sync::CancellationToken;

/// What one connection of the peer does after HELLO and the client's IDENTIFY or RESUME.
#[derive(Debug, Clone, Copy)]
enum Then {
    /// READY (or RESUMED after a RESUME), ACK heartbeats, and after `ms` a close frame without a code.
    UpThenCloseWithoutCode { ms: u64 },
    /// READY/RESUMED, then never ACK a heartbeat.
    UpNoAcks,
    /// Answer nothing (a RESUME left hanging), ACK heartbeats.
    Silent,
    /// READY/RESUMED, ACK heartbeats, stay up.
    Up,
    /// READY, then stop reading the socket altogether.
    UpThenDeaf,
    /// Close with this code.
    Close(u16),
}

/// Every frame the peer received: (connection number from 1, op, the frame).
type Log = Arc<Mutex<Vec<(usize, u64, Value)>>>;

async fn peer(script: Vec<Then>, heartbeat_ms: u64) -> (String, Log) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("ws://{}", listener.local_addr().expect("addr"));
    let log: Log = Arc::default();
    let frames = log.clone();
    tokio::spawn(async move {
        let mut n = 0;
        while let Ok((tcp, _)) = listener.accept().await {
            let Ok(ws) = tokio_tungstenite::accept_async(tcp).await else {
                continue;
            };
            n += 1;
            let then = script.get(n - 1).copied().unwrap_or(Then::Up);
            tokio::spawn(connection(ws, n, then, heartbeat_ms, frames.clone()));
        }
    });
    (url, log)
}

async fn connection(
    mut ws: tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
    n: usize,
    then: Then,
    heartbeat_ms: u64,
    log: Log,
) {
    let hello = json!({"op": 10, "s": null, "t": null, "d": {"heartbeat_interval": heartbeat_ms}});
    if ws.send(Message::text(hello.to_string())).await.is_err() {
        return;
    }
    let mut seq = 0;
    let mut answered = false;
    let close_at = match then {
        Then::UpThenCloseWithoutCode { ms } => {
            Some(tokio::time::Instant::now() + Duration::from_millis(ms))
        }
        _ => None,
    };
    loop {
        let next = tokio::select! {
            f = ws.next() => f,
            () = async { tokio::time::sleep_until(close_at.expect("set")).await }, if close_at.is_some() && answered => {
                let _ = ws.send(Message::Close(None)).await;
                // Keep the socket open without answering: what a peer that has gone away looks like.
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return;
            }
        };
        let Some(Ok(Message::Text(text))) = next else {
            return;
        };
        let frame: Value = serde_json::from_str(&text).expect("json");
        let op = frame["op"].as_u64().unwrap_or(99);
        log.lock().expect("lock").push((n, op, frame.clone()));
        match op {
            2 | 6 => {
                if let Then::Close(code) = then {
                    let close = CloseFrame {
                        code: code.into(),
                        reason: "peer says no".into(),
                    };
                    let _ = ws.send(Message::Close(Some(close))).await;
                    return;
                }
                if matches!(then, Then::Silent) {
                    continue;
                }
                seq += 1;
                let reply = if op == 2 {
                    json!({"op": 0, "s": seq, "t": "READY", "d": {
                        "v": 10, "user": user(BOT, "chat-bridge", true), "guilds": [],
                        "session_id": "session-1", "resume_gateway_url": null,
                        "application": {"id": BOT, "flags": 0}}})
                } else {
                    json!({"op": 0, "s": seq, "t": "RESUMED", "d": {}})
                };
                if ws.send(Message::text(reply.to_string())).await.is_err() {
                    return;
                }
                answered = true;
                if matches!(then, Then::UpThenDeaf) {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    return;
                }
            }
            1 if !matches!(then, Then::UpNoAcks) => {
                let ack = json!({"op": 11, "s": null, "t": null, "d": null});
                if ws.send(Message::text(ack.to_string())).await.is_err() {
                    return;
                }
            }
            _ => {}
        }
    }
}

fn timing() -> Timing {
    Timing {
        establish: Duration::from_millis(300),
        backoff_min: Duration::from_millis(50),
        backoff_max: Duration::from_millis(200),
        ..Timing::default()
    }
}

struct Running {
    channel: discord::Discord,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    log: Log,
    _fake: FakeDiscord,
    _inbound: tokio::sync::mpsc::Receiver<chat_bridge::channel::Arrival>,
}

async fn run(script: Vec<Then>, heartbeat_ms: u64) -> Running {
    chat_bridge_tests::init_tracing();
    let fake = FakeDiscord::start(heartbeat_ms).await;
    let (url, log) = peer(script, heartbeat_ms).await;
    // The resume URL is the same peer (READY's resume_gateway_url is null).
    fake.set_gateway_url(&url);
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let gateway = Gateway::build_with(
        discord::http(TOKEN, &fake.base_url),
        Access::default(),
        Redactor::new(&[]).expect("redactor"),
        tx,
        timing(),
    )
    .await
    .expect("gateway");
    let channel = gateway.channel.clone();
    let stop = CancellationToken::new();
    let task = tokio::spawn(gateway.run(stop.clone()));
    Running {
        channel,
        stop,
        task,
        log,
        _fake: fake,
        _inbound: rx,
    }
}

impl Running {
    async fn until(&self, what: &str, within: Duration, pred: impl Fn(&Self) -> bool) {
        let deadline = tokio::time::Instant::now() + within;
        while !pred(self) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: not within {within:?}; frames {:?}",
                self.ops()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// (connection, op) of every frame the peer received.
    fn ops(&self) -> Vec<(usize, u64)> {
        self.log
            .lock()
            .expect("lock")
            .iter()
            .map(|(n, op, _)| (*n, *op))
            .collect()
    }

    fn has(&self, n: usize, op: u64) -> bool {
        self.ops().contains(&(n, op))
    }

    async fn stop_within(self, bound: Duration) -> anyhow::Result<()> {
        self.stop.cancel();
        tokio::time::timeout(bound, self.task)
            .await
            .expect("returns in time")
            .expect("join")
    }
}

/// `/readyz`: a close frame without a status code is a disconnect (not connected at once), then a
/// RESUME of the same session on a new connection, connected again on RESUMED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_gateway_a_close_without_a_code_disconnects_then_resumes() {
    let r = run(
        vec![Then::UpThenCloseWithoutCode { ms: 300 }, Then::Up],
        41_250,
    )
    .await;
    r.until("READY", Duration::from_secs(5), |r| r.channel.connected())
        .await;
    r.until("the disconnect", Duration::from_secs(2), |r| {
        !r.channel.connected()
    })
    .await;
    r.until("RESUMED", Duration::from_secs(5), |r| r.channel.connected())
        .await;
    let log = r.log.lock().expect("lock").clone();
    let resume = log
        .iter()
        .find(|(n, op, _)| *n == 2 && *op == 6)
        .expect("a RESUME on connection 2");
    assert_eq!(resume.2["d"]["session_id"], "session-1");
    assert_eq!(resume.2["d"]["seq"], 1, "the last sequence number seen");
    assert!(!r.has(2, 2), "no new IDENTIFY: the session was resumed");
    r.stop_within(Duration::from_secs(2))
        .await
        .expect("clean stop");
}

/// A RESUME never answered is not connected, and becomes a new session (IDENTIFY) after
/// `Timing::establish`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_gateway_an_unanswered_resume_becomes_a_new_session() {
    let r = run(
        vec![
            Then::UpThenCloseWithoutCode { ms: 200 },
            Then::Silent,
            Then::Up,
        ],
        41_250,
    )
    .await;
    r.until("READY", Duration::from_secs(5), |r| r.channel.connected())
        .await;
    r.until("the RESUME", Duration::from_secs(5), |r| r.has(2, 6))
        .await;
    assert!(
        !r.channel.connected(),
        "a RESUME not answered is not connected"
    );
    r.until("a new IDENTIFY", Duration::from_secs(5), |r| r.has(3, 2))
        .await;
    r.until("READY again", Duration::from_secs(5), |r| {
        r.channel.connected()
    })
    .await;
    r.stop_within(Duration::from_secs(2))
        .await
        .expect("clean stop");
}

/// A heartbeat not ACKed before the next is due is a dead connection: not connected, reconnected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_gateway_a_missing_heartbeat_ack_is_a_dead_connection() {
    let r = run(vec![Then::UpNoAcks, Then::Up], 200).await;
    r.until("READY", Duration::from_secs(5), |r| r.channel.connected())
        .await;
    r.until("a heartbeat", Duration::from_secs(2), |r| r.has(1, 1))
        .await;
    r.until("the dead connection noticed", Duration::from_secs(2), |r| {
        !r.channel.connected()
    })
    .await;
    r.until("resumed on a new connection", Duration::from_secs(5), |r| {
        r.has(2, 6) && r.channel.connected()
    })
    .await;
    r.stop_within(Duration::from_secs(2))
        .await
        .expect("clean stop");
}

/// Shutdown returns at once even when the peer no longer reads or answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_gateway_stop_returns_at_once_when_the_peer_stopped_reading() {
    let r = run(vec![Then::UpThenDeaf], 41_250).await;
    r.until("READY", Duration::from_secs(5), |r| r.channel.connected())
        .await;
    let channel = r.channel.clone();
    let started = std::time::Instant::now();
    r.stop_within(Duration::from_secs(2))
        .await
        .expect("clean stop");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(!channel.connected(), "not connected once stopped");
}

/// A refused token (close code 4004) ends the gateway with words for the operator, no retry loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_gateway_a_refused_token_is_fatal_with_a_clear_error() {
    let r = run(vec![Then::Close(4004)], 41_250).await;
    let task = r.task;
    let err = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("ends")
        .expect("join")
        .expect_err("fatal");
    assert!(
        format!("{err:#}").contains("CHAT_BRIDGE_DISCORD__TOKEN"),
        "{err:#}"
    );
    let ops = r.log.lock().expect("lock").len();
    assert_eq!(ops, 1, "one IDENTIFY, no retry");
}
