//! The bridge on Slack, end to end: a fake Slack (Web API over HTTP, Socket Mode over a WebSocket)
//! and the real shell-agent. A mention becomes a thread reply that is edited into the result; every
//! envelope is acknowledged; a retried event is not a second prompt; a Socket Mode disconnect
//! mid-turn loses nothing.

use std::time::Duration;

use chat_bridge_tests::bridge::SLACK_SIGNING_SECRET;
use chat_bridge_tests::fake_slack::{FakeSlack, event_envelope};
use chat_bridge_tests::init_tracing;
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn mention(ts: &str, text: &str) -> serde_json::Value {
    json!({"type": "app_mention", "user": "U1", "channel": "C1", "ts": ts, "text": format!("<@UBOT> {text}"), "event_ts": ts})
}

async fn bridge(
    fake: &FakeSlack,
    dir: &std::path::Path,
) -> (
    CancellationToken,
    tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    bridge_with(fake, dir, |_| {}).await
}

/// Runs the bridge on the fake Slack (Socket Mode) after `tweak` adjusts its configuration.
async fn bridge_with(
    fake: &FakeSlack,
    dir: &std::path::Path,
    tweak: impl FnOnce(&mut chat_bridge::config::Config),
) -> (
    CancellationToken,
    tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    chat_bridge_tests::fake_slack::run_bridge(fake, dir, tweak).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_mention_becomes_a_thread_reply_edited_into_the_result_and_a_retry_is_not_a_second_prompt()
 {
    let fake = FakeSlack::start().await;
    let dir = tempfile::tempdir().expect("tmp");
    let (stop, task) = bridge(&fake, dir.path()).await;
    fake.push(event_envelope(
        "env-1",
        "Ev1",
        0,
        mention("1700.000100", "sleep 0.3; echo from slack"),
    ));
    fake.wait_for("the result edit", |f| {
        f.calls_of("chat.update")
            .iter()
            .any(|c| c.body["text"].as_str().is_some_and(|t| t.starts_with("✅")))
    })
    .await;
    // Slack retries an event it thinks was not delivered: same event_id, retry_attempt 1.
    fake.push(event_envelope(
        "env-2",
        "Ev1",
        1,
        mention("1700.000100", "sleep 0.3; echo from slack"),
    ));
    fake.wait_for("the retry's ack", |f| {
        f.acks().contains(&"env-2".to_owned())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;

    assert_eq!(
        fake.acks(),
        ["env-1", "env-2"],
        "every envelope acknowledged"
    );
    let posts = fake.calls_of("chat.postMessage");
    assert_eq!(
        posts.len(),
        1,
        "one thread reply; the retry started nothing: {posts:#?}"
    );
    assert_eq!(
        posts[0].body["thread_ts"], "1700.000100",
        "the reply is in the mention's thread"
    );
    assert_eq!(posts[0].body["channel"], "C1");
    assert_eq!(posts[0].body["text"], "⏳ sleep 0.3; echo from slack");
    let updates = fake.calls_of("chat.update");
    let last = updates.last().expect("an edit");
    assert_eq!(
        last.body["ts"], "1700000000.000001",
        "the tool message (the first post) is edited in place"
    );
    assert_eq!(last.body["attachments"][0]["color"], "good");
    assert!(
        last.body.to_string().contains("from slack"),
        "{}",
        last.body
    );
    fake.wait_for("the outcome reaction", |f| {
        f.calls_of("reactions.add").len() == 2
    })
    .await;
    let reactions: Vec<(String, String, String)> = fake
        .calls()
        .into_iter()
        .filter(|c| c.method.starts_with("reactions."))
        .map(|c| {
            (
                c.method,
                c.body["name"].as_str().unwrap_or("").to_owned(),
                c.body["timestamp"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let on_mention = |m: &str, n: &str| (m.to_owned(), n.to_owned(), "1700.000100".to_owned());
    assert_eq!(
        reactions,
        [
            on_mention("reactions.add", "eyes"),
            on_mention("reactions.remove", "eyes"),
            on_mention("reactions.add", "white_check_mark")
        ],
        "👀 on receipt, then the outcome on the person's message"
    );
    stop.cancel();
    task.await.expect("join").expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_a_timeout_is_a_danger_attachment_and_a_socket_disconnect_mid_turn_loses_nothing() {
    let fake = FakeSlack::start().await;
    let dir = tempfile::tempdir().expect("tmp");
    let (stop, task) = bridge(&fake, dir.path()).await;
    fake.push(event_envelope(
        "env-1",
        "Ev1",
        0,
        mention("1700.000100", "timeout=1s echo partial; sleep 30"),
    ));
    fake.wait_for("the tool message", |f| {
        !f.calls_of("chat.postMessage").is_empty()
    })
    .await;
    // Slack refreshes the connection while the command runs; a reply in the thread arrives on the new one.
    fake.push(json!({"type": "disconnect", "reason": "refresh_requested", "debug_info": {"host": "fake"}}));
    fake.push(event_envelope("env-2", "Ev2", 0, json!({"type": "message", "user": "U1", "channel": "C1", "ts": "1700.000200", "thread_ts": "1700.000100", "text": "echo second"})));
    fake.wait_for("both results", |f| {
        let texts: Vec<String> = f
            .calls_of("chat.update")
            .iter()
            .filter_map(|c| c.body["text"].as_str().map(str::to_owned))
            .collect();
        texts.iter().any(|t| t.contains("timed out"))
            && texts.iter().any(|t| t.starts_with("✅ echo second"))
    })
    .await;
    assert!(fake.sockets() >= 2, "reconnected after the disconnect");
    assert_eq!(fake.acks(), ["env-1", "env-2"]);
    let timed_out = fake
        .calls_of("chat.update")
        .into_iter()
        .find(|c| {
            c.body["text"]
                .as_str()
                .is_some_and(|t| t.contains("timed out"))
        })
        .expect("timeout edit");
    assert_eq!(timed_out.body["attachments"][0]["color"], "danger");
    assert!(
        timed_out.body.to_string().contains(r"```\npartial```"),
        "{}",
        timed_out.body
    );
    stop.cancel();
    task.await.expect("join").expect("clean shutdown");
}

fn click(envelope_id: &str, user: &str, value: &str) -> serde_json::Value {
    json!({"envelope_id": envelope_id, "type": "interactive", "accepts_response_payload": false, "payload": {
        "type": "block_actions", "user": {"id": user}, "team": {"id": "T1"}, "channel": {"id": "C1"},
        "message": {"ts": "1700000000.000001", "thread_ts": "1700.000100"},
        "actions": [{"action_id": "choice_0", "block_id": "b", "value": value, "type": "button"}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_approval_clicks_by_an_outsider_get_an_ephemeral_no_and_the_requester_decides() {
    let fake = FakeSlack::start().await;
    let dir = tempfile::tempdir().expect("tmp");
    let (stop, task) = bridge_with(&fake, dir.path(), |cfg| {
        cfg.shell_agent.require_approval = true
    })
    .await;
    fake.push(event_envelope(
        "env-1",
        "Ev1",
        0,
        mention("1700.000100", "echo approved"),
    ));
    let buttons = |f: &FakeSlack| -> Option<(String, String)> {
        f.calls_of("chat.postMessage").into_iter().find_map(|c| {
            let attachments = c.body["attachments"].as_array()?.clone();
            let actions = attachments
                .iter()
                .flat_map(|a| a["blocks"].as_array().cloned().unwrap_or_default())
                .find(|b| b["type"] == "actions")?;
            Some((
                actions["elements"][0]["value"].as_str()?.to_owned(),
                actions["elements"][0]["text"]["text"].as_str()?.to_owned(),
            ))
        })
    };
    fake.wait_for("the approval message", |f| buttons(f).is_some())
        .await;
    let (allow, label) = buttons(&fake).expect("buttons");
    assert_eq!(label, "Allow once");

    fake.push(click("env-2", "U2", &allow));
    fake.wait_for("the ephemeral refusal", |f| {
        !f.calls_of("chat.postEphemeral").is_empty()
    })
    .await;
    let eph = &fake.calls_of("chat.postEphemeral")[0];
    assert_eq!(
        (eph.body["user"].as_str(), eph.body["thread_ts"].as_str()),
        (Some("U2"), Some("1700.000100"))
    );
    assert!(
        eph.body["text"]
            .as_str()
            .is_some_and(|t| t.contains("not allowed")),
        "{}",
        eph.body
    );

    fake.push(click("env-3", "U1", &allow));
    fake.wait_for("the command's result", |f| {
        f.calls_of("chat.update").iter().any(|c| {
            c.body["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("✅ echo approved"))
        })
    })
    .await;
    let decided = fake.calls_of("chat.update").into_iter().find(|c| {
        let body = c.body.to_string();
        // People as the platform names them (a mention), and a heading that says the outcome.
        body.contains("<@U1> chose: Allow once") && body.contains("Allowed once by <@U1>")
    });
    assert!(
        decided.is_some(),
        "the approval message says who decided what: {:#?}",
        fake.calls_of("chat.update")
    );
    assert_eq!(fake.acks(), ["env-1", "env-2", "env-3"]);
    stop.cancel();
    task.await.expect("join").expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_a_429_on_the_result_edit_delays_it_and_loses_nothing() {
    let fake = FakeSlack::start().await;
    let dir = tempfile::tempdir().expect("tmp");
    let (stop, task) = bridge(&fake, dir.path()).await;
    fake.script(
        "chat.update",
        chat_bridge_tests::fake_slack::Reply::RateLimited(1),
    );
    fake.push(event_envelope(
        "env-1",
        "Ev1",
        0,
        mention("1700.000100", "echo rate limited"),
    ));
    fake.wait_for("the result after the retry", |f| {
        f.calls_of("chat.update")
            .iter()
            .filter(|c| {
                c.body["text"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("✅ echo rate limited"))
            })
            .count()
            == 2
    })
    .await;
    let posts = fake.calls_of("chat.postMessage");
    assert_eq!(posts.len(), 1, "no duplicate message");
    stop.cancel();
    task.await.expect("join").expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_a_100kb_output_becomes_a_valid_message_split_into_sections_keeping_the_tail() {
    let fake = FakeSlack::start().await;
    let dir = tempfile::tempdir().expect("tmp");
    let (stop, task) = bridge(&fake, dir.path()).await;
    fake.push(event_envelope(
        "env-1",
        "Ev1",
        0,
        mention("1700.000100", "seq 1 20000"),
    ));
    let result = |f: &FakeSlack| {
        f.calls_of("chat.update").into_iter().find(|c| {
            c.body["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("✅ seq 1 20000"))
        })
    };
    fake.wait_for("the result", |f| result(f).is_some()).await;
    let body = result(&fake).expect("result").body;
    let blocks: Vec<serde_json::Value> = body["attachments"][0]["blocks"]
        .as_array()
        .expect("blocks")
        .clone();
    let texts: Vec<String> = blocks
        .iter()
        .filter_map(|b| b["text"]["text"].as_str().map(str::to_owned))
        .collect();
    assert!(blocks.len() <= 50, "{} blocks", blocks.len());
    assert!(
        texts.iter().all(|t| t.chars().count() <= 3000),
        "every section within 3,000"
    );
    assert!(
        texts.iter().map(String::len).sum::<usize>() <= 40_000,
        "the message within 40,000"
    );
    let code: Vec<&String> = texts.iter().filter(|t| t.starts_with("```")).collect();
    assert!(
        code.len() >= 5,
        "split into several code sections: {}",
        code.len()
    );
    assert!(
        code.iter().all(|t| t.ends_with("```")),
        "each section closes its own fence"
    );
    assert!(
        code.last().is_some_and(|t| t.contains("19999\n20000")),
        "the tail is kept"
    );
    assert!(
        texts.iter().any(|t| t.contains("earlier lines not shown")),
        "the cut is told"
    );
    assert_eq!(fake.calls_of("chat.postMessage").len(), 1);
    stop.cancel();
    task.await.expect("join").expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_http_events_mode_verifies_signatures_answers_the_challenge_and_runs_mentions() {
    use chat_bridge::channel::slack::signature::sign;
    let fake = FakeSlack::start().await;
    let dir = tempfile::tempdir().expect("tmp");
    init_tracing();
    let port = chat_bridge_tests::free_port();
    let (stop, task) = bridge_with(&fake, dir.path(), |cfg| {
        cfg.slack_mut().app_token = None;
        cfg.slack_mut().mode = chat_bridge::config::SlackMode::Http;
        cfg.slack_mut().listen = format!("127.0.0.1:{port}");
        cfg.slack_mut().signing_secret = Some(SLACK_SIGNING_SECRET.into());
    })
    .await;
    daemon_client::install_crypto_provider();
    let http = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/slack/events");
    let now = || (chat_bridge::store::now_ms() / 1000).to_string();
    let send = |body: String, ts: String, sig: String| {
        http.post(&url)
            .header("x-slack-request-timestamp", ts)
            .header("x-slack-signature", sig)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    // The server comes up once the bridge is built.
    let challenge = json!({"type": "url_verification", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "token": "x"}).to_string();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let answer = loop {
        let ts = now();
        match send(
            challenge.clone(),
            ts.clone(),
            sign(SLACK_SIGNING_SECRET.as_bytes(), &ts, challenge.as_bytes()),
        )
        .await
        {
            Ok(r) => break r,
            Err(_) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the Events API endpoint came up"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(answer.status(), 200);
    let v: serde_json::Value = answer.json().await.expect("json");
    assert_eq!(
        v["challenge"],
        "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    );

    let event =
        json!({"type": "event_callback", "team_id": "T1", "api_app_id": "A1", "event_id": "Ev1",
                       "event": mention("1700.000100", "echo over http")})
        .to_string();
    let ts = now();
    let tampered = event.replace("over http", "over HTTP");
    let r = send(
        tampered,
        ts.clone(),
        sign(SLACK_SIGNING_SECRET.as_bytes(), &ts, event.as_bytes()),
    )
    .await
    .expect("send");
    assert_eq!(r.status(), 401, "a tampered body is refused");
    let stale = (chat_bridge::store::now_ms() / 1000 - 600).to_string();
    let r = send(
        event.clone(),
        stale.clone(),
        sign(SLACK_SIGNING_SECRET.as_bytes(), &stale, event.as_bytes()),
    )
    .await
    .expect("send");
    assert_eq!(r.status(), 401, "a stale timestamp is refused");
    assert!(
        fake.calls_of("chat.postMessage").is_empty(),
        "refused requests start nothing"
    );

    let r = send(
        event.clone(),
        ts.clone(),
        sign(SLACK_SIGNING_SECRET.as_bytes(), &ts, event.as_bytes()),
    )
    .await
    .expect("send");
    assert_eq!(r.status(), 200);
    fake.wait_for("the result", |f| {
        f.calls_of("chat.update").iter().any(|c| {
            c.body["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("✅ echo over http"))
        })
    })
    .await;
    assert_eq!(
        fake.calls_of("chat.postMessage")[0].body["thread_ts"],
        "1700.000100"
    );
    stop.cancel();
    task.await.expect("join").expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_replies_in_threads_the_bridge_does_not_own_are_ignored() {
    let fake = FakeSlack::start().await;
    let dir = tempfile::tempdir().expect("tmp");
    let (stop, task) = bridge(&fake, dir.path()).await;
    let stranger = json!({"type": "message", "user": "U1", "channel": "C1", "ts": "1700.000900", "thread_ts": "1700.000800", "text": "echo not for the bot"});
    fake.push(event_envelope("env-1", "Ev1", 0, stranger));
    // A mention afterwards shows the connection is live and everything before it was handled.
    fake.push(event_envelope(
        "env-2",
        "Ev2",
        0,
        mention("1700.001000", "echo for the bot"),
    ));
    fake.wait_for("the mention's result", |f| {
        f.calls_of("chat.update").iter().any(|c| {
            c.body["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("✅ echo for the bot"))
        })
    })
    .await;
    // Each envelope is acknowledged once recorded, each on its own: in no set order.
    fake.wait_for("both acknowledged", |f| f.acks().len() >= 2)
        .await;
    let mut acks = fake.acks();
    acks.sort();
    assert_eq!(acks, ["env-1", "env-2"], "both acknowledged, once each");
    let posts = fake.calls_of("chat.postMessage");
    assert_eq!(posts.len(), 1, "only the mention got a reply: {posts:#?}");
    assert_eq!(posts[0].body["thread_ts"], "1700.001000");
    stop.cancel();
    task.await.expect("join").expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_reports_stopping_takes_no_new_prompt_and_drains_a_rate_limited_result() {
    daemon_client::install_crypto_provider();
    let fake = FakeSlack::start().await;
    let dir = tempfile::tempdir().expect("tmp");
    let port = chat_bridge_tests::free_port();
    let (stop, task) = bridge_with(&fake, dir.path(), |cfg| {
        cfg.http.listen = Some(format!("127.0.0.1:{port}"));
        cfg.service.drain_timeout = Duration::from_secs(15);
    })
    .await;
    fake.script(
        "chat.update",
        chat_bridge_tests::fake_slack::Reply::RateLimited(2),
    );
    fake.push(event_envelope(
        "env-1",
        "Ev1",
        0,
        mention("1700.000100", "echo drained"),
    ));
    fake.wait_for("the rate-limited result edit", |f| {
        !f.calls_of("chat.update").is_empty()
    })
    .await;
    // What SIGTERM does (main's signal handler cancels this token).
    stop.cancel();
    fake.push(event_envelope(
        "env-2",
        "Ev2",
        0,
        mention("1700.000200", "echo too late"),
    ));
    let http = reqwest::Client::new();
    let mut saw_stopping = false;
    while !task.is_finished() {
        if let Ok(r) = http
            .get(format!("http://127.0.0.1:{port}/readyz"))
            .send()
            .await
        {
            let status = r.status().as_u16();
            let body: serde_json::Value = r.json().await.unwrap_or_default();
            if body["role"] == "stopping" {
                assert_eq!(status, 503, "a stopping replica is not ready: {body}");
                saw_stopping = true;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    task.await.expect("join").expect("clean shutdown");
    assert!(saw_stopping, "/readyz said stopping while draining");
    let results = fake
        .calls_of("chat.update")
        .iter()
        .filter(|c| {
            c.body["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("✅ echo drained"))
        })
        .count();
    assert_eq!(results, 2, "the refused edit was delivered while draining");
    assert!(
        !fake
            .calls()
            .iter()
            .any(|c| c.body.to_string().contains("too late")),
        "no new prompt after SIGTERM"
    );
}
