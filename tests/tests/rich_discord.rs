//! Rich messages on the fake Discord (REST with multipart uploads and a CDN, the gateway speaking
//! the real opcodes) with a scripted ACP daemon that records every prompt: attachments are never
//! dropped (an image reaches the agent as an ACP `image` block with the attachment's bytes, a refused
//! file is explained and the text runs), a 60 kB answer arrives whole (an uploaded `answer.md`, or
//! several valid messages in order), and Markdown is kept as Discord renders it.

use std::time::Duration;

use base64::Engine as _;
use chat_bridge_tests::bridge::config;
use chat_bridge_tests::fake_discord::{BOT, CHANNEL, FakeDiscord, TOKEN, person_message};
use chat_bridge_tests::rich::{LONG, MARKDOWN, MARKDOWN_ANSWER, Prompts, daemon, long_answer, png};
use chat_bridge_tests::scripted::ScriptedDaemon;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const PERSON: &str = "501";

struct Rig {
    fake: FakeDiscord,
    prompts: Prompts,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    _daemon: ScriptedDaemon,
    _dir: tempfile::TempDir,
}

async fn rig(tweak: impl FnOnce(&mut chat_bridge::config::Config)) -> Rig {
    chat_bridge_tests::init_tracing();
    let fake = FakeDiscord::start(300).await;
    let prompts = Prompts::default();
    let daemon = daemon(true, prompts.clone()).await;
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(
        &format!("sqlite://{}", dir.path().join("discord.db").display()),
        dir.path(),
    );
    cfg.daemon.url = Some(daemon.url.clone());
    cfg.daemon.token = Some(daemon.token.clone().into());
    cfg.discord_mut().token = Some(TOKEN.into());
    cfg.discord_mut().api_base_url = fake.base_url.clone();
    cfg.access.open = true;
    // The scripted daemon answers by the prompt's text: no `[name]` label in front of it.
    cfg.turns.speaker_prefix = false;
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
    Rig {
        fake,
        prompts,
        stop,
        task,
        _daemon: daemon,
        _dir: dir,
    }
}

impl Rig {
    /// A mention with `prompt` and `attachments` (Discord attachment objects); the thread it opens
    /// has the message's id.
    fn say(&self, id: &str, prompt: &str, attachments: &[Value]) {
        let mut m = person_message(id, CHANNEL, PERSON, &format!("<@{BOT}> {prompt}"), true);
        m["attachments"] = json!(attachments);
        self.fake.dispatch("MESSAGE_CREATE", m);
    }

    async fn wait_prompts(&self, n: usize) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let p = self.prompts.lock().expect("lock").clone();
            if p.len() >= n {
                return p;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} prompts",
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

fn text_of(m: &Value) -> String {
    let mut s = m["content"].as_str().unwrap_or("").to_owned();
    for e in m["embeds"].as_array().into_iter().flatten() {
        s.push_str(e["description"].as_str().unwrap_or(""));
    }
    s
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

fn squeeze(s: &str) -> String {
    s.replace("```", "")
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_an_image_reaches_the_agent_and_a_refused_file_is_explained_while_the_text_runs() {
    let rig = rig(|_| {}).await;
    let bytes = png(2500);
    let image = rig.fake.host_file("shot.png", "image/png", &bytes);
    let exe = rig
        .fake
        .host_file("setup.exe", "application/x-msdownload", b"MZ\x90\x00");
    rig.say("1001", "why does it crash?", &[image, exe]);
    let prompts = rig.wait_prompts(1).await;
    let blocks = prompts[0].as_array().expect("blocks");
    assert_eq!(
        blocks[0],
        json!({"type": "text", "text": "why does it crash?"})
    );
    assert_eq!(blocks[1]["type"], "image");
    assert_eq!(blocks[1]["mimeType"], "image/png");
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(blocks[1]["data"].as_str().expect("data"))
        .expect("base64");
    assert_eq!(decoded, bytes, "the agent got the attachment's bytes");
    rig.fake
        .wait_for("the notice", |f| {
            f.messages_in("1001").iter().any(|m| {
                text_of(m).contains("setup.exe: type application/x-msdownload not accepted")
            })
        })
        .await;
    rig.fake
        .wait_for("the answer", |f| {
            f.messages_in("1001")
                .iter()
                .any(|m| text_of(m).contains("I saw it."))
        })
        .await;
    rig.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_a_60kb_answer_arrives_whole_as_an_attached_file() {
    let rig = rig(|_| {}).await;
    rig.say("1002", LONG, &[]);
    rig.fake
        .wait_for("the uploaded answer", |f| {
            f.messages_in("1002")
                .iter()
                .any(|m| m["attachments"].as_array().is_some_and(|a| !a.is_empty()))
        })
        .await;
    let m = rig
        .fake
        .messages_in("1002")
        .into_iter()
        .find(|m| m["attachments"].as_array().is_some_and(|a| !a.is_empty()))
        .expect("the answer message");
    assert_eq!(m["attachments"][0]["filename"], "answer.md");
    let content = rig
        .fake
        .file(m["attachments"][0]["url"].as_str().expect("url"))
        .expect("the file");
    assert_eq!(String::from_utf8(content).expect("utf-8"), long_answer());
    // Streamed (the default): the draft became the preview, the file is beside it.
    let preview = rig
        .fake
        .messages_in("1002")
        .into_iter()
        .find(is_answer)
        .expect("the preview");
    assert!(
        text_of(&preview).contains("Paragraph 1:")
            && text_of(&preview).contains("the whole answer (58.6 kB) is in the file answer.md"),
        "{}",
        text_of(&preview)
    );
    assert!(text_of(&preview).chars().count() < 2000, "only a preview");
    rig.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_a_long_answer_under_the_upload_size_arrives_in_valid_messages_in_order() {
    let rig = rig(|cfg| cfg.render.upload_over = 1 << 20).await;
    rig.say("1003", LONG, &[]);
    let paragraphs = long_answer().matches("Paragraph ").count();
    rig.fake
        .wait_for("the last part", |f| {
            f.messages_in("1003")
                .iter()
                .any(|m| answer_body(m).contains(&format!("Paragraph {paragraphs}:")))
        })
        .await;
    let answers: Vec<Value> = rig
        .fake
        .messages_in("1003")
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
async fn discord_markdown_answers_are_kept_as_discord_renders_them() {
    let rig = rig(|_| {}).await;
    rig.say("1004", MARKDOWN, &[]);
    rig.fake
        .wait_for("the answer", |f| {
            f.messages_in("1004").iter().any(is_answer)
        })
        .await;
    let m = rig
        .fake
        .messages_in("1004")
        .into_iter()
        .find(is_answer)
        .expect("answer");
    assert_eq!(
        answer_body(&m),
        MARKDOWN_ANSWER,
        "Discord's Markdown, as written"
    );
    rig.finish().await;
}
