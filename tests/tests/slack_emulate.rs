//! The Slack adapter against a Slack Web API written by others (npm `emulate@0.12.2`), in the HTTP
//! Events API mode: the test posts the person's message into the emulator, then the signed event (or
//! button click) to the bridge, shaped as Slack documents them, and reads back what the emulator
//! stored. R8: what a person typed runs as typed (`&gt;`, `&amp;&amp;`, `<https://…>` decoded) and
//! nothing the person or the agent wrote can ping (`<!channel>` never reaches Slack unescaped); R3: a
//! timeout is an error; R6: approvals by the requester, a refusal for another person.
//!
//! When npm cannot install the emulator, each test says SKIPPED loudly and passes.

use std::time::Duration;

use chat_bridge_tests::bridge::SLACK_SIGNING_SECRET;
use chat_bridge_tests::slack_emulate::{self, SlackEmulator};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

struct Rig {
    slack: SlackEmulator,
    channel: String,
    bot: String,
    alice: String,
    bob: String,
    events: String,
    interactive: String,
    http: reqwest::Client,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    _dir: tempfile::TempDir,
}

async fn rig(tweak: impl FnOnce(&mut chat_bridge::config::Config)) -> Option<Rig> {
    let slack = match SlackEmulator::start().await {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "!!! SKIPPED: the Slack emulator (npm emulate) could not be installed: {e:?} !!!"
            );
            return None;
        }
    };
    chat_bridge_tests::init_tracing();
    let channel = slack.channel("general").await;
    let bot = slack.call("auth.test", &json!({})).await.expect("auth")["user_id"]
        .as_str()
        .expect("bot id")
        .to_owned();
    let (alice, bob) = (slack.user("alice").await, slack.user("bob").await);
    slack
        .call(
            "conversations.invite",
            &json!({"channel": channel, "users": format!("{alice},{bob}")}),
        )
        .await
        .expect("invite alice and bob");
    let dir = tempfile::tempdir().expect("tmp");
    let port = chat_bridge_tests::free_port();
    let mut cfg = chat_bridge_tests::bridge::config(
        &format!("sqlite://{}", dir.path().join("slack.db").display()),
        dir.path(),
    );
    cfg.slack_mut().bot_token = Some(slack_emulate::TOKEN.into());
    cfg.slack_mut().api_base_url = slack.api_base.clone();
    cfg.slack_mut().mode = chat_bridge::config::SlackMode::Http;
    cfg.slack_mut().listen = format!("127.0.0.1:{port}");
    cfg.slack_mut().signing_secret = Some(SLACK_SIGNING_SECRET.into());
    cfg.slack_mut().allowed_users = vec![alice.clone(), bob.clone()];
    tweak(&mut cfg);
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let stop = stop.clone();
        async move { chat_bridge::startup::run(&cfg, stop).await }
    });
    let rig = Rig {
        slack,
        channel,
        bot,
        alice,
        bob,
        events: format!("http://127.0.0.1:{port}/slack/events"),
        interactive: format!("http://127.0.0.1:{port}/slack/interactive"),
        http: reqwest::Client::new(),
        stop,
        task,
        _dir: dir,
    };
    // The Events API endpoint comes up once the bridge is built.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let challenge = json!({"type": "url_verification", "challenge": "c"}).to_string();
        let up = rig
            .http
            .post(&rig.events)
            .body(challenge)
            .send()
            .await
            .is_ok();
        if up {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the bridge came up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Some(rig)
}

impl Rig {
    /// A person's message, stored in the emulator as Slack stores it, then its signed event sent to
    /// the bridge. Returns the message's `ts`.
    async fn say(&self, user: &str, thread: Option<&str>, wire_text: &str) -> String {
        let ts = self.slack.post(&self.channel, thread, wire_text).await;
        let mut event = json!({"type": if thread.is_some() { "message" } else { "app_mention" },
            "user": user, "channel": self.channel, "channel_type": "channel", "ts": ts, "event_ts": ts,
            "text": wire_text});
        if let Some(t) = thread {
            event["thread_ts"] = json!(t);
        }
        let body = json!({"type": "event_callback", "team_id": "T000000001", "api_app_id": "A1",
            "event_id": format!("Ev{}", ts.replace('.', "")), "event_time": 1, "event": event})
        .to_string();
        let r = slack_emulate::post_signed(
            &self.http,
            &self.events,
            SLACK_SIGNING_SECRET,
            "application/json",
            body,
        )
        .await;
        assert_eq!(r.status(), 200, "the bridge took the event");
        ts
    }

    /// A click on a button of message `message_ts` in `thread`, signed, as Slack posts it.
    async fn click(&self, user: &str, thread: &str, message_ts: &str, value: &str) {
        let payload = json!({"type": "block_actions", "trigger_id": format!("trig-{user}-{message_ts}"),
            "user": {"id": user}, "team": {"id": "T000000001"}, "channel": {"id": self.channel},
            "message": {"ts": message_ts, "thread_ts": thread},
            "actions": [{"action_id": "choice_0", "block_id": "b", "type": "button", "value": value}]});
        let body = serde_urlencoded::to_string([("payload", payload.to_string())]).expect("form");
        let r = slack_emulate::post_signed(
            &self.http,
            &self.interactive,
            SLACK_SIGNING_SECRET,
            "application/x-www-form-urlencoded",
            body,
        )
        .await;
        assert_eq!(r.status(), 200, "the bridge took the click");
    }

    async fn finish(self) {
        self.stop.cancel();
        self.task.await.expect("join").expect("clean shutdown");
    }
}

/// Every message the bridge posted in the thread as the emulator stored it (text, blocks,
/// attachments), as JSON; the people's own messages (`theirs`) left out.
async fn wire(rig: &Rig, thread: &str, theirs: &[&str]) -> String {
    let messages = rig.slack.replies(&rig.channel, thread).await;
    Value::Array(
        messages
            .into_iter()
            .filter(|m| !theirs.iter().any(|ts| m["ts"] == *ts))
            .collect(),
    )
    .to_string()
}

/// The first `actions` block anywhere in a message (top level or in an attachment).
fn find_actions(v: &Value) -> Option<Value> {
    match v {
        Value::Object(o) if o.get("type").is_some_and(|t| t == "actions") => Some(v.clone()),
        Value::Object(o) => o.values().find_map(find_actions),
        Value::Array(a) => a.iter().find_map(find_actions),
        _ => None,
    }
}

fn text_starts(m: &Value, prefix: &str) -> bool {
    m["text"].as_str().is_some_and(|t| t.starts_with(prefix))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_emulate_a_mention_runs_what_was_typed_a_reply_continues_and_channel_never_pings() {
    let Some(rig) = rig(|_| {}).await else { return };
    // What Slack sends when alice types: @chat-bridge echo hi > f && cat f && echo 'https://example.com/a?b=1&c=2'
    let thread = rig
        .say(
            &rig.alice,
            None,
            &format!(
                "<@{}> echo hi &gt; f &amp;&amp; cat f &amp;&amp; echo '<https://example.com/a?b=1&amp;c=2>'",
                rig.bot
            ),
        )
        .await;
    let done = rig
        .slack
        .wait_for(&rig.channel, &thread, "the first result", |m| {
            text_starts(m, "✅ echo hi &gt; f &amp;&amp; cat f")
        })
        .await;
    let shown = done.to_string();
    assert!(
        shown.contains("```\\nhi\\r\\nhttps://example.com/a?b=1&amp;c=2")
            || shown.contains("```\\nhi\\nhttps://example.com/a?b=1&amp;c=2"),
        "the command ran as typed (no shell syntax error) and its output is escaped: {shown}"
    );
    assert_eq!(done["thread_ts"], thread.as_str(), "a reply in the thread");

    // alice replies in the thread; Slack encodes her `<!channel>` as text, and the bridge's echo of it
    // (the command line and the output) must not turn into a ping on the way out.
    let reply = rig
        .say(
            &rig.alice,
            Some(&thread),
            "cat f &amp;&amp; echo '&lt;!channel&gt;' 2&gt;&amp;1",
        )
        .await;
    let second = rig
        .slack
        .wait_for(&rig.channel, &thread, "the reply's result", |m| {
            text_starts(m, "✅ cat f &amp;&amp; echo")
        })
        .await;
    let shown = second.to_string();
    assert!(
        shown.contains("```\\nhi\\r\\n&lt;!channel&gt;")
            || shown.contains("```\\nhi\\n&lt;!channel&gt;"),
        "the reply continued in the same place (f is there) and its output is escaped: {shown}"
    );
    let ours = wire(&rig, &thread, &[&thread, &reply]).await;
    assert!(ours.contains("&lt;!channel&gt;"), "{ours}");
    for raw in ["<!channel>", "<!here>", "<!everyone>", "<https://"] {
        assert!(!ours.contains(raw), "{raw} reached Slack unescaped: {ours}");
    }
    rig.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r3_emulate_a_timeout_shows_as_an_error_with_its_partial_output() {
    let Some(rig) = rig(|_| {}).await else { return };
    let thread = rig
        .say(
            &rig.alice,
            None,
            &format!("<@{}> timeout=1s echo partial; sleep 30", rig.bot),
        )
        .await;
    let timed_out = rig
        .slack
        .wait_for(&rig.channel, &thread, "the timeout", |m| {
            text_starts(m, "⏱ echo partial; sleep 30")
        })
        .await;
    assert_eq!(
        timed_out["attachments"][0]["color"], "danger",
        "marked as an error: {timed_out}"
    );
    assert!(timed_out.to_string().contains("partial"), "{timed_out}");
    rig.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r6_emulate_another_person_is_refused_privately_and_the_requester_approves() {
    let Some(rig) = rig(|cfg| cfg.shell_agent.require_approval = true).await else {
        return;
    };
    let thread = rig
        .say(&rig.alice, None, &format!("<@{}> echo approved", rig.bot))
        .await;
    let ask = rig
        .slack
        .wait_for(&rig.channel, &thread, "the approval message", |m| {
            m.to_string().contains("\"actions\"")
        })
        .await;
    let ask_ts = ask["ts"].as_str().expect("ts").to_owned();
    let actions = find_actions(&ask).expect("buttons");
    let allow = actions["elements"][0]["value"]
        .as_str()
        .expect("value")
        .to_owned();
    assert_eq!(actions["elements"][0]["text"]["text"], "Allow once");
    assert!(
        ask.to_string().contains("```\\ncommand: echo approved"),
        "the approval shows what will run: {ask}"
    );

    rig.click(&rig.bob, &thread, &ask_ts, &allow).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let page = rig.slack.inspector(&rig.channel).await;
        if page.contains("ephemeral") && page.contains("not allowed") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "bob got no ephemeral refusal: {page}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !wire(&rig, &thread, &[&thread])
            .await
            .contains("✅ echo approved"),
        "bob's click ran nothing"
    );

    rig.click(&rig.alice, &thread, &ask_ts, &allow).await;
    rig.slack
        .wait_for(
            &rig.channel,
            &thread,
            "the approved command's result",
            |m| text_starts(m, "✅ echo approved"),
        )
        .await;
    rig.finish().await;
}

/// A scripted daemon that answers every prompt at once and keeps each prompt's text, in order.
async fn recording_daemon() -> (
    chat_bridge_tests::scripted::ScriptedDaemon,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    use chat_bridge_tests::scripted::{Peer, ScriptedDaemon};
    let prompts = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = prompts.clone();
    let daemon = ScriptedDaemon::start(move |mut peer: Peer| {
        let kept = kept.clone();
        async move {
            peer.handshake().await;
            while let Some(msg) = peer.recv().await {
                match msg["method"].as_str() {
                    Some("session/new") => peer.reply(&msg, json!({"sessionId": "team"})).await,
                    Some("session/prompt") => {
                        let text: String = msg["params"]["prompt"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|b| b["text"].as_str())
                            .collect();
                        kept.lock().expect("prompts").push(text);
                        peer.reply(&msg, json!({"stopReason": "end_turn"})).await;
                    }
                    _ if msg.get("id").is_some() => peer.reply(&msg, json!({})).await,
                    _ => {}
                }
            }
        }
    })
    .await;
    (daemon, prompts)
}

async fn wait_prompts(prompts: &std::sync::Mutex<Vec<String>>, n: usize) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let seen = prompts.lock().expect("prompts").clone();
        if seen.len() >= n {
            return seen;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the daemon got {} of {n} prompts: {seen:?}",
            seen.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2_emulate_two_people_in_a_shared_thread_reach_the_agent_with_their_names() {
    let (daemon, prompts) = recording_daemon().await;
    let Some(rig) = rig(|cfg| {
        cfg.daemon.url = Some(daemon.url.clone());
        cfg.daemon.token = Some(daemon.token.clone().into());
        cfg.access.threads = chat_bridge::config::ThreadAccess::Shared;
    })
    .await
    else {
        return;
    };
    let thread = rig
        .say(
            &rig.alice,
            None,
            &format!("<@{}> please look at the failing build", rig.bot),
        )
        .await;
    wait_prompts(&prompts, 1).await;
    rig.say(&rig.bob, Some(&thread), "and the flaky test too")
        .await;
    rig.say(&rig.alice, Some(&thread), "thanks").await;
    let seen = wait_prompts(&prompts, 3).await;
    // The names are the display names emulate's users.info gives, not the ids.
    let slack = &rig.slack;
    let shown = |id: String| async move {
        let info = slack
            .call("users.info", &json!({"user": id}))
            .await
            .expect("users.info");
        info["user"]["profile"]["display_name"]
            .as_str()
            .expect("display name")
            .to_owned()
    };
    let (alice, bob) = (shown(rig.alice.clone()).await, shown(rig.bob.clone()).await);
    assert_eq!((alice.as_str(), bob.as_str()), ("alice", "bob"));
    assert_eq!(
        seen,
        [
            "[alice] please look at the failing build",
            "[bob] and the flaky test too",
            "[alice] thanks",
        ],
        "each prompt names its speaker"
    );
    assert!(
        !seen
            .iter()
            .any(|p| p.contains(&rig.alice) || p.contains(&rig.bob))
    );
    rig.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulate_speaker_prefix_off_sends_what_was_typed() {
    let (daemon, prompts) = recording_daemon().await;
    let Some(rig) = rig(|cfg| {
        cfg.daemon.url = Some(daemon.url.clone());
        cfg.daemon.token = Some(daemon.token.clone().into());
        cfg.turns.speaker_prefix = false;
    })
    .await
    else {
        return;
    };
    rig.say(&rig.alice, None, &format!("<@{}> just this", rig.bot))
        .await;
    assert_eq!(wait_prompts(&prompts, 1).await, ["just this"]);
    rig.finish().await;
}
