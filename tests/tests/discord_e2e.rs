//! The bridge on Discord, end to end: a fake Discord (REST over HTTP, the gateway over a WebSocket
//! speaking the real opcodes) and the real shell-agent. A mention creates a thread from the message;
//! the tool message in it is edited into a coloured result embed; approvals are buttons; a gateway
//! disconnect is resumed without losing the events sent meanwhile; a 429 delays and loses nothing.

use std::time::Duration;

use chat_bridge_tests::bridge::config;
use chat_bridge_tests::fake_discord::{
    BOT, CHANNEL, FakeDiscord, GUILD, Reply, TOKEN, message, person_message, user,
};
use chat_bridge_tests::init_tracing;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const PERSON: &str = "501";

/// Runs the bridge on the fake Discord after `tweak` adjusts its configuration.
async fn bridge_with(
    fake: &FakeDiscord,
    dir: &std::path::Path,
    tweak: impl FnOnce(&mut chat_bridge::config::Config),
) -> (
    CancellationToken,
    tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    init_tracing();
    let mut cfg = config(
        &format!("sqlite://{}", dir.join("discord.db").display()),
        dir,
    );
    cfg.discord_mut().token = Some(TOKEN.into());
    cfg.discord_mut().api_base_url = fake.base_url.clone();
    // A1: these tests let everyone in on purpose (the access tests set allowlists in `tweak`).
    cfg.access.open = true;
    tweak(&mut cfg);
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let stop = stop.clone();
        async move { chat_bridge::startup::run(&cfg, stop).await }
    });
    fake.wait_for("the gateway session (IDENTIFY)", |f| {
        !f.frames_op(2).is_empty()
    })
    .await;
    (stop, task)
}

fn mention(id: &str, prompt: &str) -> Value {
    person_message(id, CHANNEL, PERSON, &format!("<@{BOT}> {prompt}"), true)
}

/// The title of a message's first embed, or its content.
fn headline(m: &Value) -> String {
    m["embeds"][0]["title"].as_str().map_or_else(
        || m["content"].as_str().unwrap_or("").to_owned(),
        str::to_owned,
    )
}

fn text_of(m: &Value) -> String {
    let mut s = m["content"].as_str().unwrap_or("").to_owned();
    for e in m["embeds"].as_array().into_iter().flatten() {
        for k in ["title", "description"] {
            s.push_str(e[k].as_str().unwrap_or(""));
            s.push('\n');
        }
        s.push_str(e["footer"]["text"].as_str().unwrap_or(""));
    }
    s
}

fn result_in(fake: &FakeDiscord, thread: &str, prefix: &str) -> Option<Value> {
    fake.messages_in(thread)
        .into_iter()
        .find(|m| headline(m).starts_with(prefix))
}

/// Every limit Discord enforces on a message.
fn assert_valid(m: &Value) {
    let content = m["content"].as_str().unwrap_or("");
    assert!(content.chars().count() <= 2000, "content over 2,000");
    let embeds = m["embeds"].as_array().cloned().unwrap_or_default();
    assert!(embeds.len() <= 10, "more than 10 embeds");
    let mut total = 0;
    for e in &embeds {
        let title = e["title"].as_str().unwrap_or("").chars().count();
        let description = e["description"].as_str().unwrap_or("");
        let footer = e["footer"]["text"].as_str().unwrap_or("").chars().count();
        assert!(title <= 256 && description.chars().count() <= 4096 && footer <= 2048);
        assert_eq!(
            description.matches("```").count() % 2,
            0,
            "a fence left open"
        );
        total += title + description.chars().count() + footer;
    }
    assert!(total <= 6000, "embeds over 6,000 characters: {total}");
}

async fn stop_bridge(stop: CancellationToken, task: tokio::task::JoinHandle<anyhow::Result<()>>) {
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("stops in time")
        .expect("join")
        .expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_mention_creates_a_thread_and_the_tool_message_becomes_a_green_result_embed() {
    let fake = FakeDiscord::start(300).await;
    let dir = tempfile::tempdir().expect("tmp");
    let (stop, task) = bridge_with(&fake, dir.path(), |_| {}).await;
    let identify = &fake.frames_op(2)[0];
    assert!(
        identify["d"]["token"]
            .as_str()
            .is_some_and(|t| t.ends_with(TOKEN)),
        "IDENTIFY carries the token"
    );
    let intents = identify["d"]["intents"].as_u64().expect("intents");
    for (bit, name) in [
        (1, "GUILDS"),
        (1 << 9, "GUILD_MESSAGES"),
        (1 << 12, "DIRECT_MESSAGES"),
        (1 << 15, "MESSAGE_CONTENT"),
    ] {
        assert_ne!(intents & bit, 0, "{name} intent");
    }

    fake.dispatch(
        "MESSAGE_CREATE",
        mention("1001", "sleep 0.3; echo from discord"),
    );
    fake.wait_for("the green result", |f| {
        result_in(f, "1001", "✅ sleep 0.3; echo from discord").is_some()
    })
    .await;
    let threads = fake.threads();
    assert_eq!(
        threads.get("1001").map(String::as_str),
        Some(CHANNEL),
        "thread from the mention"
    );
    let create = &fake.requests_to(&format!("POST /channels/{CHANNEL}/messages/1001/threads"))[0];
    assert_eq!(create.body["name"], "sleep 0.3; echo from discord");
    assert_eq!(create.auth, format!("Bot {TOKEN}"));

    let in_thread = fake.messages_in("1001");
    assert_eq!(
        in_thread.len(),
        1,
        "one tool message, edited in place: {in_thread:#?}"
    );
    let result = &in_thread[0];
    assert_eq!(result["embeds"][0]["color"], 0x2E_CC71, "green");
    assert!(text_of(result).contains("from discord"), "{result}");
    assert_valid(result);
    let edits = fake.requests_to("PATCH /channels/1001/messages/");
    assert!(
        !edits.is_empty(),
        "the tool message was edited into the result"
    );
    let posts = fake.requests_to("POST /channels/1001/messages");
    assert_eq!(posts.len(), 1);
    assert!(
        posts[0].body["nonce"]
            .as_str()
            .is_some_and(|n| n.len() <= 25)
            && posts[0].body["enforce_nonce"] == true,
        "a post carries its idempotency key as a nonce Discord enforces: {}",
        posts[0].body
    );
    // The mention (in the parent channel) gets 👀 then ✅.
    fake.wait_for("the outcome reaction", |f| {
        !f.requests_to(&format!(
            "PUT /channels/{CHANNEL}/messages/1001/reactions/✅"
        ))
        .is_empty()
    })
    .await;
    assert_eq!(
        fake.requests_to(&format!(
            "PUT /channels/{CHANNEL}/messages/1001/reactions/👀"
        ))
        .len(),
        1
    );
    assert_eq!(
        fake.requests_to(&format!(
            "DELETE /channels/{CHANNEL}/messages/1001/reactions/👀"
        ))
        .len(),
        1
    );

    // The same dispatch again (a replay) is not a second prompt; a reply in the thread continues.
    fake.dispatch(
        "MESSAGE_CREATE",
        mention("1001", "sleep 0.3; echo from discord"),
    );
    fake.dispatch(
        "MESSAGE_CREATE",
        person_message("1002", "1001", PERSON, "echo second", false),
    );
    fake.wait_for("the reply's result", |f| {
        result_in(f, "1001", "✅ echo second").is_some()
    })
    .await;
    assert_eq!(fake.threads().len(), 1);
    assert_eq!(
        fake.messages_in("1001")
            .iter()
            .filter(|m| headline(m).contains("echo from discord"))
            .count(),
        1,
        "the replayed mention started nothing"
    );
    // The bot's own messages and other bots are ignored.
    let mut own = message(
        "1003",
        "1001",
        &user(BOT, "chat-bridge", true),
        "echo from myself",
    );
    own["guild_id"] = json!(GUILD);
    fake.dispatch("MESSAGE_CREATE", own);
    // Heartbeats were sent and acknowledged on the 300 ms interval.
    fake.wait_for("heartbeats", |f| f.frames_op(1).len() >= 2)
        .await;
    stop_bridge(stop, task).await;
    assert!(result_in(&fake, "1001", "✅ echo from myself").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_a_timeout_is_a_red_embed_with_its_partial_output() {
    let fake = FakeDiscord::start(41_250).await;
    let dir = tempfile::tempdir().expect("tmp");
    let (stop, task) = bridge_with(&fake, dir.path(), |_| {}).await;
    fake.dispatch(
        "MESSAGE_CREATE",
        mention("1001", "timeout=1s echo partial; sleep 30"),
    );
    fake.wait_for("the timeout", |f| result_in(f, "1001", "⏱").is_some())
        .await;
    let m = result_in(&fake, "1001", "⏱").expect("result");
    assert_eq!(m["embeds"][0]["color"], 0xE7_4C3C, "red");
    let text = text_of(&m);
    assert!(
        text.contains("timed out") && text.contains("partial"),
        "{text}"
    );
    assert!(
        text.contains("chat-bridge history show"),
        "a pointer to the full output: {text}"
    );
    assert_valid(&m);
    stop_bridge(stop, task).await;
}

fn click(id: &str, clicker: &str, custom_id: &str, message_id: &str) -> Value {
    json!({
        "id": id, "application_id": BOT, "type": 3, "token": format!("token-{id}"), "version": 1,
        "guild_id": GUILD, "channel_id": "1001", "locale": "en-US", "guild_locale": "en-US",
        "entitlements": [], "attachment_size_limit": 10_485_760, "app_permissions": "0",
        "data": {"custom_id": custom_id, "component_type": 2},
        "member": {"user": user(clicker, &format!("user{clicker}"), false), "roles": [],
                   "joined_at": "2026-01-01T00:00:00.000000+00:00", "deaf": false, "mute": false,
                   "flags": 0, "pending": false, "permissions": "0"},
        "message": message(message_id, "1001", &user(BOT, "chat-bridge", true), ""),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_approval_buttons_an_outsider_gets_an_ephemeral_no_and_the_requester_decides() {
    let fake = FakeDiscord::start(41_250).await;
    let dir = tempfile::tempdir().expect("tmp");
    let (stop, task) = bridge_with(&fake, dir.path(), |cfg| {
        cfg.shell_agent.require_approval = true;
    })
    .await;
    fake.dispatch("MESSAGE_CREATE", mention("1001", "echo approved"));
    let buttons = |f: &FakeDiscord| -> Option<(String, String, String)> {
        f.messages_in("1001").into_iter().find_map(|m| {
            let b = &m["components"][0]["components"][0];
            Some((
                m["id"].as_str()?.to_owned(),
                b["custom_id"].as_str()?.to_owned(),
                b["label"].as_str()?.to_owned(),
            ))
        })
    };
    fake.wait_for("the approval buttons", |f| buttons(f).is_some())
        .await;
    let (approval, allow, label) = buttons(&fake).expect("buttons");
    assert_eq!(label, "Allow once");
    assert!(allow.len() <= 100 && allow.starts_with("perm:"), "{allow}");

    fake.dispatch(
        "INTERACTION_CREATE",
        click("7001", "777", &allow, &approval),
    );
    fake.wait_for("the ephemeral refusal", |f| {
        !f.requests_to("POST /webhooks/").is_empty()
    })
    .await;
    let ack = fake.requests_to("POST /interactions/7001/token-7001/callback");
    assert_eq!(ack.len(), 1, "the click is acknowledged");
    assert_eq!(ack[0].body["type"], 6, "a deferred update");
    let eph = &fake.requests_to("POST /webhooks/")[0];
    assert_eq!(eph.path, format!("/webhooks/{BOT}/token-7001"));
    assert_eq!(eph.body["flags"], 64, "ephemeral");
    assert!(
        eph.body["content"]
            .as_str()
            .is_some_and(|t| t.contains("not allowed")),
        "{}",
        eph.body
    );
    assert!(
        result_in(&fake, "1001", "✅ echo approved").is_none(),
        "an outsider's click runs nothing"
    );

    fake.dispatch(
        "INTERACTION_CREATE",
        click("7002", PERSON, &allow, &approval),
    );
    fake.wait_for("the command's result", |f| {
        result_in(f, "1001", "✅ echo approved").is_some()
    })
    .await;
    assert_eq!(
        fake.requests_to("POST /interactions/7002/token-7002/callback")
            .len(),
        1
    );
    let decided = fake.message(&approval).expect("approval message");
    assert!(
        text_of(&decided).contains(&format!("<@{PERSON}> chose: Allow once"))
            && text_of(&decided).contains(&format!("Allowed once by <@{PERSON}>")),
        "{decided}"
    );
    assert_eq!(
        decided["components"],
        json!([]),
        "the buttons are gone once decided"
    );
    stop_bridge(stop, task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_gateway_disconnect_and_resume_mid_turn_loses_nothing() {
    let fake = FakeDiscord::start(41_250).await;
    let dir = tempfile::tempdir().expect("tmp");
    let (stop, task) = bridge_with(&fake, dir.path(), |cfg| {
        cfg.liveness.progress_after = Duration::from_millis(300);
        cfg.liveness.progress_every = Duration::from_millis(300);
    })
    .await;
    fake.dispatch("MESSAGE_CREATE", mention("1001", "sleep 2; echo first"));
    fake.wait_for("the running tool message", |f| {
        !f.messages_in("1001").is_empty()
    })
    .await;
    // The connection drops; a reply sent meanwhile reaches the bridge only by RESUME.
    fake.disconnect_with_missed(&[(
        "MESSAGE_CREATE",
        person_message("1002", "1001", PERSON, "echo second", false),
    )]);
    fake.wait_for("both results", |f| {
        result_in(f, "1001", "✅ sleep 2; echo first").is_some()
            && result_in(f, "1001", "✅ echo second").is_some()
    })
    .await;
    let resume = fake.frames_op(6);
    assert_eq!(resume.len(), 1, "resumed, once");
    assert_eq!(resume[0]["d"]["session_id"], "session-1");
    assert_eq!(
        fake.frames_op(2).len(),
        1,
        "no second IDENTIFY: the session was resumed"
    );
    assert_eq!(fake.connections(), 2);
    let in_thread = fake.messages_in("1001");
    assert_eq!(
        in_thread.len(),
        2,
        "one message per tool, none twice: {in_thread:#?}"
    );
    // The tool ran past progress_after: a typing indicator showed we are at it.
    assert!(!fake.requests_to("POST /channels/1001/typing").is_empty());
    stop_bridge(stop, task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_a_100_kb_output_is_split_into_valid_messages() {
    let fake = FakeDiscord::start(41_250).await;
    let dir = tempfile::tempdir().expect("tmp");
    let (stop, task) = bridge_with(&fake, dir.path(), |_| {}).await;
    fake.dispatch("MESSAGE_CREATE", mention("1001", "seq 1 20000"));
    fake.wait_for("the result", |f| {
        result_in(f, "1001", "✅ seq 1 20000").is_some()
    })
    .await;
    for m in fake.messages_in("1001") {
        assert_valid(&m);
    }
    for r in fake
        .requests_to("PATCH /channels/1001/messages/")
        .iter()
        .chain(&fake.requests_to("POST /channels/1001/messages"))
    {
        assert_valid(&r.body);
    }
    let m = result_in(&fake, "1001", "✅ seq 1 20000").expect("result");
    let embeds = m["embeds"].as_array().expect("embeds");
    let fenced = embeds
        .iter()
        .filter(|e| {
            e["description"]
                .as_str()
                .is_some_and(|d| d.starts_with("```"))
        })
        .count();
    assert!(
        fenced >= 2,
        "the output is split over several fenced embeds: {fenced}"
    );
    let text = text_of(&m);
    assert!(text.contains("\n20000"), "the tail is kept");
    assert!(text.contains("not shown"), "the cut is told");
    stop_bridge(stop, task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_a_rest_429_delays_delivery_and_loses_nothing() {
    let fake = FakeDiscord::start(41_250).await;
    let dir = tempfile::tempdir().expect("tmp");
    let (stop, task) = bridge_with(&fake, dir.path(), |_| {}).await;
    fake.script("PATCH /channels/1001/messages/", Reply::RateLimited(1.0));
    fake.dispatch("MESSAGE_CREATE", mention("1001", "echo rate limited"));
    fake.wait_for("the result after the retry", |f| {
        result_in(f, "1001", "✅ echo rate limited").is_some()
    })
    .await;
    let patches = fake.requests_to("PATCH /channels/1001/messages/");
    assert!(patches.len() >= 2, "the refused edit was sent again");
    let waited = patches[1].at.duration_since(patches[0].at);
    assert!(
        waited >= Duration::from_millis(900),
        "the retry waited: {waited:?}"
    );
    assert_eq!(
        fake.requests_to("POST /channels/1001/messages").len(),
        1,
        "no duplicate message"
    );
    stop_bridge(stop, task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_a_refused_token_is_a_clear_error() {
    let fake = FakeDiscord::start(41_250).await;
    let dir = tempfile::tempdir().expect("tmp");
    init_tracing();
    let mut cfg = config(
        &format!("sqlite://{}", dir.path().join("d.db").display()),
        dir.path(),
    );
    cfg.discord_mut().token = Some("wrong-token".into());
    cfg.discord_mut().api_base_url = fake.base_url.clone();
    cfg.discord_mut().allowed_users = vec!["111".into()];
    let err = chat_bridge::startup::run(&cfg, CancellationToken::new())
        .await
        .expect_err("refused");
    let text = format!("{err:#}");
    assert!(text.contains("CHAT_BRIDGE_DISCORD__TOKEN"), "{text}");
    assert!(
        !text.contains("wrong-token"),
        "the token is never printed: {text}"
    );
}

/// Issue 15 item 2 (S-rules): `@everyone` in a prompt pings nobody — every message the bridge sends
/// says `allowed_mentions.parse = []`, and the thread name and the title show it as a word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_no_message_pings_anyone_and_titles_show_mass_mentions_as_words() {
    let fake = FakeDiscord::start(41_250).await;
    let dir = tempfile::tempdir().expect("tmp");
    let (stop, task) = bridge_with(&fake, dir.path(), |_| {}).await;
    fake.dispatch("MESSAGE_CREATE", mention("1001", "echo @everyone *look*"));
    fake.wait_for("the result", |f| {
        f.messages_in("1001")
            .iter()
            .any(|m| headline(m).starts_with('✅'))
    })
    .await;
    let sent: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| {
            (r.method == "POST" || r.method == "PATCH")
                && r.path.starts_with("/channels/")
                && r.path.contains("/messages")
                && !r.path.ends_with("/threads")
        })
        .collect();
    assert!(sent.len() >= 2, "{sent:?}");
    for r in &sent {
        assert_eq!(
            r.body["allowed_mentions"],
            json!({"parse": []}),
            "{} {}: {}",
            r.method,
            r.path,
            r.body
        );
    }
    let create = &fake.requests_to(&format!("POST /channels/{CHANNEL}/messages/1001/threads"))[0];
    assert_eq!(create.body["name"], "echo @\u{200B}everyone *look*");
    let result = result_in(&fake, "1001", "✅").expect("result");
    let title = headline(&result);
    assert!(
        title.starts_with("✅ echo @\u{200B}everyone \\*look\\*"),
        "markdown shown as typed, no mass mention: {title}"
    );
    stop_bridge(stop, task).await;
}
