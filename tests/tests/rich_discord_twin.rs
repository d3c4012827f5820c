//! Rich messages against `discord-digital-twin` (npm, written by others; see
//! `chat_bridge_tests::discord_twin`) with a scripted ACP daemon that records every prompt: an image
//! attached to a message the twin delivers reaches the agent as an ACP `image` block with the
//! attachment's bytes (a text file beside it as embedded text), a 60 kB answer arrives whole over
//! several messages within Discord's limits, and a streamed answer is one draft edited into the final
//! answer.
//!
//! What the twin cannot do, and so is proven only on our own fake Discord (`rich_discord.rs`): it
//! serves no attachment bytes (the test driver serves them at the twin's own origin, beside it), and
//! its create-message route reads JSON only, so a multipart upload (`answer.md`) is refused by it.
//! Each test says SKIPPED and passes when the twin cannot be installed from npm.

use std::time::Duration;

use base64::Engine as _;
use chat_bridge_tests::bridge::config;
use chat_bridge_tests::discord_twin::{Twin, http_get};
use chat_bridge_tests::rich::{LONG, Prompts, STREAM, daemon, long_answer, png};
use chat_bridge_tests::scripted::ScriptedDaemon;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// Long enough for a cold Node and a shared, busy machine; never reached when things work.
const WITHIN: Duration = Duration::from_secs(60);

struct Rig {
    twin: Twin,
    prompts: Prompts,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    _daemon: ScriptedDaemon,
    _dir: tempfile::TempDir,
}

async fn rig(tweak: impl FnOnce(&mut chat_bridge::config::Config)) -> Option<Rig> {
    let twin = Twin::start().await?;
    chat_bridge_tests::init_tracing();
    let prompts = Prompts::default();
    let daemon = daemon(true, prompts.clone()).await;
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(
        &format!("sqlite://{}", dir.path().join("twin.db").display()),
        dir.path(),
    );
    cfg.daemon.url = Some(daemon.url.clone());
    cfg.daemon.token = Some(daemon.token.clone().into());
    cfg.discord_mut().token = Some(twin.token.as_str().into());
    cfg.discord_mut().api_base_url = twin.base_url.clone();
    cfg.discord_mut().allowed_users = twin.people[..1].to_vec();
    // The scripted daemon answers by the prompt's text: no `[name]` label in front of it.
    cfg.turns.speaker_prefix = false;
    let http = format!("127.0.0.1:{}", chat_bridge_tests::free_port());
    cfg.http.listen = Some(http.clone());
    tweak(&mut cfg);
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let stop = stop.clone();
        async move { chat_bridge::startup::run(&cfg, stop).await }
    });
    // Ready (gateway session up, this replica active) before anyone speaks: the twin delivers a
    // message to the gateway clients connected when it is posted.
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let answer = http_get(&http, "/readyz", Duration::from_secs(1)).await;
        if answer.is_some_and(|(s, body)| s == 200 && body.contains(r#""role":"active""#)) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/readyz never said ready"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Some(Rig {
        twin,
        prompts,
        stop,
        task,
        _daemon: daemon,
        _dir: dir,
    })
}

impl Rig {
    /// ana mentions the bot with `text` and `attachments`; the thread's id (the message's).
    async fn say(&mut self, text: &str, attachments: &[Value]) -> String {
        let (channel, ana, bot) = (
            self.twin.channel.clone(),
            self.twin.people[0].clone(),
            self.twin.bot.clone(),
        );
        let m = self
            .twin
            .post_with(&channel, &ana, &format!("<@{bot}> {text}"), attachments)
            .await;
        m["id"].as_str().expect("id").to_owned()
    }

    async fn wait_prompts(&self, n: usize) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + WITHIN;
        loop {
            let p = self.prompts.lock().expect("lock").clone();
            if p.len() >= n {
                return p;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the agent got {} prompts, not {n}",
                p.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn finish(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("stops in time")
            .expect("join")
            .expect("clean shutdown");
    }
}

/// The answer's text in a message: the content after the title line, then the embeds.
fn answer_body(m: &Value) -> String {
    let content = m["content"].as_str().unwrap_or("");
    let mut s = content
        .split_once('\n')
        .map_or("", |(_, rest)| rest)
        .to_owned();
    for e in m["embeds"].as_array().into_iter().flatten() {
        s.push_str(e["description"].as_str().unwrap_or(""));
    }
    s
}

fn is_answer(m: &Value) -> bool {
    m["content"]
        .as_str()
        .is_some_and(|c| c.starts_with("**💬 answer"))
}

fn text_of(m: &Value) -> String {
    let mut s = m["content"].as_str().unwrap_or("").to_owned();
    for e in m["embeds"].as_array().into_iter().flatten() {
        s.push_str(e["description"].as_str().unwrap_or(""));
    }
    s
}

fn squeeze(s: &str) -> String {
    s.replace("```", "")
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twin_an_image_attachment_reaches_the_agent_as_an_image_block_with_its_bytes() {
    let Some(mut rig) = rig(|_| {}).await else {
        return;
    };
    let bytes = png(2500);
    let image = rig
        .twin
        .attachment("9001", "shot.png", "image/png", &bytes)
        .await;
    let notes = rig
        .twin
        .attachment(
            "9002",
            "notes.txt",
            "text/plain; charset=utf-8",
            b"crashes after login\n",
        )
        .await;
    let thread = rig.say("why does it crash?", &[image, notes]).await;
    let prompts = rig.wait_prompts(1).await;
    let blocks = prompts[0].as_array().expect("blocks");
    assert!(
        blocks[0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("why does it crash?")),
        "{blocks:#?}"
    );
    let image = blocks
        .iter()
        .find(|b| b["type"] == "image")
        .expect("an image block");
    assert_eq!(image["mimeType"], "image/png");
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(image["data"].as_str().expect("data"))
        .expect("base64");
    assert_eq!(decoded, bytes, "the agent got the attachment's bytes");
    let text = blocks
        .iter()
        .find(|b| b["type"] == "resource")
        .expect("the text file, embedded");
    assert_eq!(text["resource"]["text"], "crashes after login\n");
    let fetches = rig.twin.fetches().await;
    assert_eq!(fetches.len(), 2, "each file fetched once: {fetches:?}");
    assert!(
        fetches.iter().all(|f| f["authorization"] == false),
        "attachment URLs are signed; no token goes with them: {fetches:?}"
    );
    rig.twin
        .wait_for("the answer", WITHIN, async |t| {
            t.messages(&thread)
                .await
                .into_iter()
                .find(|m| text_of(m).contains("I saw it."))
        })
        .await;
    rig.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twin_a_60kb_answer_arrives_whole_in_messages_within_discords_limits_in_order() {
    // The twin takes no multipart uploads: the answer is split, not uploaded as answer.md.
    let Some(mut rig) = rig(|cfg| cfg.render.upload_over = 1 << 20).await else {
        return;
    };
    let thread = rig.say(LONG, &[]).await;
    let paragraphs = long_answer().matches("Paragraph ").count();
    let last = format!("Paragraph {paragraphs}:");
    rig.twin
        .wait_for("the last part", WITHIN, async |t| {
            t.messages(&thread)
                .await
                .into_iter()
                .find(|m| is_answer(m) && answer_body(m).contains(&last))
        })
        .await;
    let answers: Vec<Value> = rig
        .twin
        .messages(&thread)
        .await
        .into_iter()
        .filter(is_answer)
        .collect();
    assert!(answers.len() >= 10, "several messages: {}", answers.len());
    for m in &answers {
        assert!(m["content"].as_str().unwrap_or("").chars().count() <= 2000);
        let embeds = m["embeds"].as_array().cloned().unwrap_or_default();
        let total: usize = embeds
            .iter()
            .map(|e| e["description"].as_str().unwrap_or("").chars().count())
            .sum();
        assert!(
            embeds.len() <= 10 && total <= 6000,
            "within Discord's limits"
        );
        assert_eq!(
            answer_body(m).matches("```").count() % 2,
            0,
            "fences balanced"
        );
    }
    let joined: String = answers.iter().map(answer_body).collect();
    assert_eq!(
        squeeze(&joined),
        squeeze(&long_answer()),
        "in order, nothing lost"
    );
    rig.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r5_twin_the_answer_streams_into_a_draft_that_is_edited_into_the_answer() {
    let Some(mut rig) = rig(|cfg| cfg.render.stream_every = Duration::from_millis(100)).await
    else {
        return;
    };
    let thread = rig.say(STREAM, &[]).await;
    // While the agent still writes, the thread shows what it wrote so far.
    let draft = rig
        .twin
        .wait_for("the draft", WITHIN, async |t| {
            t.messages(&thread)
                .await
                .into_iter()
                .find(|m| text_of(m).contains("The first half."))
        })
        .await;
    assert!(!text_of(&draft).contains("second half"), "{draft}");
    let answer =
        rig.twin
            .wait_for("the finished answer", WITHIN, async |t| {
                t.messages(&thread).await.into_iter().find(|m| {
                    is_answer(m) && text_of(m).contains("The first half. The second half.")
                })
            })
            .await;
    assert_eq!(
        answer["id"], draft["id"],
        "the draft was edited into the answer, not posted twice"
    );
    assert!(
        answer["edited_timestamp"].is_string(),
        "the twin saw an edit: {answer}"
    );
    let carrying = rig
        .twin
        .messages(&thread)
        .await
        .iter()
        .filter(|m| text_of(m).contains("half."))
        .count();
    assert_eq!(carrying, 1, "one message carries the answer");
    rig.finish().await;
}
