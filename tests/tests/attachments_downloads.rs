//! Turns whose message's files are still downloading, on the fake Slack (whose own host serves a
//! file that drips 10 bytes every 100 ms and never ends) with a scripted daemon that records every
//! method it receives: `/cancel` during the downloads ends the turn before any prompt is sent — the
//! daemon hears neither the prompt nor a cancel — and a follow-up meanwhile is acknowledged; a slow
//! file is given up after `attachments.download_timeout` with a notice that says it took too long,
//! and the message's text still runs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chat_bridge_tests::fake_slack::{FakeSlack, event_envelope, run_bridge};
use chat_bridge_tests::scripted::{Peer, ScriptedDaemon};
use serde_json::{Value, json};

/// What the daemon received: each method, with a prompt's text.
type Heard = Arc<Mutex<Vec<String>>>;

/// A daemon that answers every prompt with one line, recording what it receives.
async fn daemon(heard: Heard) -> ScriptedDaemon {
    ScriptedDaemon::start(move |mut peer: Peer| {
        let heard = heard.clone();
        async move {
            peer.handshake().await;
            while let Some(msg) = peer.recv().await {
                let method = msg["method"].as_str().unwrap_or("").to_owned();
                let text = msg["params"]["prompt"][0]["text"]
                    .as_str()
                    .map(|t| format!(" {t}"))
                    .unwrap_or_default();
                heard.lock().expect("lock").push(format!("{method}{text}"));
                match method.as_str() {
                    "session/new" => peer.reply(&msg, json!({"sessionId": "s1"})).await,
                    "session/prompt" => {
                        peer.send(json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1",
                            "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "I saw it."}}}}))
                            .await;
                        peer.reply(&msg, json!({"stopReason": "end_turn"})).await;
                    }
                    _ if msg.get("id").is_some() => peer.reply(&msg, json!({})).await,
                    _ => {}
                }
            }
        }
    })
    .await
}

fn mention_with_file(ts: &str, text: &str, file_url: &str) -> Value {
    json!({"type": "app_mention", "user": "U1", "channel": "C1", "ts": ts, "event_ts": ts,
        "text": format!("<@UBOT> {text}"),
        "files": [{"id": "F1", "name": "build.log", "mimetype": "text/plain", "size": 100,
                   "url_private_download": file_url}]})
}

fn in_thread(ts: &str, text: &str) -> Value {
    json!({"type": "message", "user": "U1", "channel": "C1", "ts": ts, "thread_ts": "1700.000100",
        "text": text})
}

/// Whether some message posted to the thread says `text`.
fn said(f: &FakeSlack, text: &str) -> bool {
    f.calls_of("chat.postMessage")
        .iter()
        .any(|c| c.body.to_string().contains(text))
}

fn heard(h: &Heard) -> Vec<String> {
    h.lock().expect("lock").clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_while_files_download_ends_the_turn_before_any_prompt_is_sent() {
    let fake = FakeSlack::start().await;
    let h = Heard::default();
    let d = daemon(h.clone()).await;
    let dir = tempfile::tempdir().expect("tmp");
    let (stop, task) = run_bridge(&fake, dir.path(), |cfg| {
        cfg.daemon.url = Some(d.url.clone());
        cfg.daemon.token = Some(d.token.clone().into());
    })
    .await;
    fake.push(event_envelope(
        "env-1",
        "Ev1",
        0,
        mention_with_file(
            "1700.000100",
            "what broke?",
            &fake.file_url("slow-build.log"),
        ),
    ));
    fake.wait_for("the download to start", |f| f.file_gets() >= 1)
        .await;
    // A follow-up while the file downloads is acknowledged at once (👀), not held by the download.
    fake.push(event_envelope(
        "env-2",
        "Ev2",
        0,
        in_thread("1700.000200", "and also this"),
    ));
    fake.wait_for("the follow-up's 👀", |f| {
        f.calls_of("reactions.add")
            .iter()
            .any(|c| c.body["timestamp"] == "1700.000200" && c.body["name"] == "eyes")
    })
    .await;
    fake.push(event_envelope(
        "env-3",
        "Ev3",
        0,
        in_thread("1700.000300", "/cancel"),
    ));
    fake.wait_for("the cancel's notice", |f| {
        said(
            f,
            "Cancelled before it reached the agent (1 queued message dropped).",
        )
    })
    .await;
    // The thread is free: the next message runs at once, and is the only prompt the agent gets.
    fake.push(event_envelope(
        "env-4",
        "Ev4",
        0,
        in_thread("1700.000400", "try again"),
    ));
    fake.wait_for("the next message's answer", |f| said(f, "I saw it."))
        .await;
    let got = heard(&h);
    let prompts: Vec<&String> = got
        .iter()
        .filter(|m| m.starts_with("session/prompt"))
        .collect();
    assert_eq!(
        prompts.len(),
        1,
        "only the message after the cancel ran: {got:#?}"
    );
    assert!(prompts[0].contains("try again"), "{got:#?}");
    assert!(
        !got.iter().any(|m| m.starts_with("session/cancel")),
        "no cancel for a prompt that was never sent: {got:#?}"
    );
    assert!(
        !said(&fake, "Cancelling the running turn"),
        "{:#?}",
        fake.posted()
    );
    chat_bridge_tests::bridge::stop_cleanly(stop, task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_file_is_given_up_after_the_download_timeout_and_the_text_runs() {
    let fake = FakeSlack::start().await;
    let h = Heard::default();
    let d = daemon(h.clone()).await;
    let dir = tempfile::tempdir().expect("tmp");
    let (stop, task) = run_bridge(&fake, dir.path(), |cfg| {
        cfg.daemon.url = Some(d.url.clone());
        cfg.daemon.token = Some(d.token.clone().into());
        cfg.attachments.download_timeout = Duration::from_secs(1);
    })
    .await;
    let started = tokio::time::Instant::now();
    fake.push(event_envelope(
        "env-1",
        "Ev1",
        0,
        mention_with_file(
            "1700.000100",
            "what broke?",
            &fake.file_url("slow-build.log"),
        ),
    ));
    fake.wait_for("the answer", |f| said(f, "I saw it.")).await;
    assert!(
        said(&fake, "took too long to download"),
        "the person hears why the file was left out: {:#?}",
        fake.posted()
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "bounded by attachments.download_timeout"
    );
    let got = heard(&h);
    let prompts: Vec<&String> = got
        .iter()
        .filter(|m| m.starts_with("session/prompt"))
        .collect();
    assert_eq!(prompts.len(), 1, "{got:#?}");
    assert!(prompts[0].contains("what broke?"), "{got:#?}");
    assert!(!prompts[0].contains("build.log"), "{got:#?}");
    chat_bridge_tests::bridge::stop_cleanly(stop, task).await;
}

/// D3/D6: the bridge restarts while a message's files download. Its prompt was never sent, so
/// nothing is resumed or declared interrupted: the message is taken again from the inbox at the
/// start, its files downloaded again, and its prompt reaches the agent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d6_a_restart_while_files_download_runs_the_message_again_at_start() {
    let fake = FakeSlack::start().await;
    let h = Heard::default();
    let d = daemon(h.clone()).await;
    let dir = tempfile::tempdir().expect("tmp");
    let (stop, task) = run_bridge(&fake, dir.path(), |cfg| {
        cfg.daemon.url = Some(d.url.clone());
        cfg.daemon.token = Some(d.token.clone().into());
    })
    .await;
    fake.push(event_envelope(
        "env-1",
        "Ev1",
        0,
        mention_with_file(
            "1700.000100",
            "what broke?",
            &fake.file_url("slow-build.log"),
        ),
    ));
    fake.wait_for("the download to start", |f| f.file_gets() >= 1)
        .await;
    chat_bridge_tests::bridge::stop_cleanly(stop, task).await;
    assert!(
        !heard(&h).iter().any(|m| m.starts_with("session/prompt")),
        "{:#?}",
        heard(&h)
    );
    // Started again; the file is still slow, and this time it is given up after a second.
    let (stop, task) = run_bridge(&fake, dir.path(), |cfg| {
        cfg.daemon.url = Some(d.url.clone());
        cfg.daemon.token = Some(d.token.clone().into());
        cfg.attachments.download_timeout = Duration::from_secs(1);
    })
    .await;
    fake.wait_for("the answer after the restart", |f| said(f, "I saw it."))
        .await;
    assert!(fake.file_gets() >= 2, "its file was downloaded again");
    let got = heard(&h);
    let prompts: Vec<&String> = got
        .iter()
        .filter(|m| m.starts_with("session/prompt"))
        .collect();
    assert_eq!(prompts.len(), 1, "{got:#?}");
    assert!(prompts[0].contains("what broke?"), "{got:#?}");
    assert!(!said(&fake, "interrupted"), "{:#?}", fake.posted());
    chat_bridge_tests::bridge::stop_cleanly(stop, task).await;
}

/// `turns.while_busy = "steer"` while the running turn's files download: that turn ends before its
/// prompt is sent, the steering message runs next, and the daemon hears no cancel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_while_files_download_cancels_nothing_at_the_daemon() {
    let fake = FakeSlack::start().await;
    let h = Heard::default();
    let d = daemon(h.clone()).await;
    let dir = tempfile::tempdir().expect("tmp");
    let (stop, task) = run_bridge(&fake, dir.path(), |cfg| {
        cfg.daemon.url = Some(d.url.clone());
        cfg.daemon.token = Some(d.token.clone().into());
        cfg.turns.while_busy = chat_bridge::conversation::busy::WhileBusy::Steer;
    })
    .await;
    fake.push(event_envelope(
        "env-1",
        "Ev1",
        0,
        mention_with_file(
            "1700.000100",
            "what broke?",
            &fake.file_url("slow-build.log"),
        ),
    ));
    fake.wait_for("the download to start", |f| f.file_gets() >= 1)
        .await;
    fake.push(event_envelope(
        "env-2",
        "Ev2",
        0,
        in_thread("1700.000200", "never mind, look here"),
    ));
    fake.wait_for("the steering message's answer", |f| said(f, "I saw it."))
        .await;
    assert!(
        said(&fake, "cancelled before it reached the agent"),
        "{:#?}",
        fake.posted()
    );
    let got = heard(&h);
    let prompts: Vec<&String> = got
        .iter()
        .filter(|m| m.starts_with("session/prompt"))
        .collect();
    assert_eq!(prompts.len(), 1, "{got:#?}");
    assert!(prompts[0].contains("never mind, look here"), "{got:#?}");
    assert!(!prompts[0].contains("what broke?"), "{got:#?}");
    assert!(
        !got.iter().any(|m| m.starts_with("session/cancel")),
        "{got:#?}"
    );
    chat_bridge_tests::bridge::stop_cleanly(stop, task).await;
}
