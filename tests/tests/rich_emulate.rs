//! Rich messages against a Slack Web API written by others (npm `emulate@0.12.2`, HTTP Events API
//! mode) and a scripted ACP daemon that records every prompt it is sent: a message with files is
//! never dropped (its text runs, each file is used or the person hears why), images reach the agent
//! as ACP `image` blocks whose bytes are the upload's, and long and Markdown answers arrive whole
//! and rendered.
//!
//! When npm cannot install the emulator, each test says SKIPPED loudly and passes.

use std::time::Duration;

use base64::Engine as _;
use chat_bridge_tests::bridge::SLACK_SIGNING_SECRET;
use chat_bridge_tests::rich::{
    LONG, MARKDOWN, Prompts, STREAM, daemon_restarting_without_images, daemon_with, long_answer,
    png,
};
use chat_bridge_tests::scripted::ScriptedDaemon;
use chat_bridge_tests::slack_emulate::{self, SlackEmulator};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

struct Rig {
    slack: SlackEmulator,
    channel: String,
    bot: String,
    alice: String,
    events: String,
    http: reqwest::Client,
    prompts: Prompts,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    _daemon: ScriptedDaemon,
    _dir: tempfile::TempDir,
}

async fn rig(images: bool, tweak: impl FnOnce(&mut chat_bridge::config::Config)) -> Option<Rig> {
    rig_with(images, true, tweak).await
}

/// [`rig`] with an agent that says `promptCapabilities.embeddedContext: embedded`.
async fn rig_with(
    images: bool,
    embedded: bool,
    tweak: impl FnOnce(&mut chat_bridge::config::Config),
) -> Option<Rig> {
    let prompts = Prompts::default();
    let daemon = daemon_with(images, embedded, prompts.clone()).await;
    rig_on(daemon, prompts, tweak).await
}

/// The rig on `daemon`, which records its prompts in `prompts`.
async fn rig_on(
    daemon: ScriptedDaemon,
    prompts: Prompts,
    tweak: impl FnOnce(&mut chat_bridge::config::Config),
) -> Option<Rig> {
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
    let alice = slack.user("alice").await;
    slack
        .call(
            "conversations.invite",
            &json!({"channel": channel, "users": alice}),
        )
        .await
        .expect("invite alice");
    let dir = tempfile::tempdir().expect("tmp");
    let port = chat_bridge_tests::free_port();
    let mut cfg = chat_bridge_tests::bridge::config(
        &format!("sqlite://{}", dir.path().join("slack.db").display()),
        dir.path(),
    );
    cfg.daemon.url = Some(daemon.url.clone());
    cfg.daemon.token = Some(daemon.token.clone().into());
    cfg.slack_mut().bot_token = Some(slack_emulate::TOKEN.into());
    cfg.slack_mut().api_base_url = slack.api_base.clone();
    cfg.slack_mut().mode = chat_bridge::config::SlackMode::Http;
    cfg.slack_mut().listen = format!("127.0.0.1:{port}");
    cfg.slack_mut().signing_secret = Some(SLACK_SIGNING_SECRET.into());
    cfg.slack_mut().allowed_users = vec![alice.clone()];
    // The scripted daemon answers by the prompt's text: no `[name]` label in front of it.
    cfg.turns.speaker_prefix = false;
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
        events: format!("http://127.0.0.1:{port}/slack/events"),
        http: reqwest::Client::new(),
        prompts,
        stop,
        task,
        _daemon: daemon,
        _dir: dir,
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let challenge = json!({"type": "url_verification", "challenge": "c"}).to_string();
        if rig
            .http
            .post(&rig.events)
            .body(challenge)
            .send()
            .await
            .is_ok()
        {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the bridge came up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Some(rig)
}

impl Rig {
    /// alice mentions the bot with `text` and `files` (Slack file objects): the message is stored in
    /// the emulator, then its signed `app_mention` event (files included, as Slack sends them) goes
    /// to the bridge. Returns the thread's `ts`.
    async fn say_with_files(&self, text: &str, files: &[Value]) -> String {
        let wire_text = format!("<@{}> {text}", self.bot);
        let ts = self.slack.post(&self.channel, None, &wire_text).await;
        let event = json!({"type": "app_mention", "user": self.alice, "channel": self.channel,
            "channel_type": "channel", "ts": ts, "event_ts": ts, "text": wire_text, "files": files});
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

    async fn wait_prompts(&self, n: usize) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
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
        self.task.await.expect("join").expect("clean shutdown");
    }
}

fn text_of(m: &Value) -> String {
    m.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulate_an_image_and_text_reach_the_agent_as_acp_blocks_with_the_uploaded_bytes() {
    let Some(rig) = rig(true, |_| {}).await else {
        return;
    };
    let bytes = png(3000);
    let file = rig.slack.upload("screenshot.png", &bytes).await;
    let log = rig
        .slack
        .upload("build.txt", b"error: linker failed\n")
        .await;
    let thread = rig
        .say_with_files("what is wrong in this screenshot?", &[file, log])
        .await;
    let prompts = rig.wait_prompts(1).await;
    let blocks = prompts[0].as_array().expect("blocks");
    let text = blocks[0]["text"].as_str().expect("text block");
    assert!(
        text.starts_with("what is wrong in this screenshot?"),
        "{text}"
    );
    assert!(
        text.contains(".chat-bridge/attachments/") && text.ends_with("-build.txt"),
        "the saved file's path is in the prompt: {text}"
    );
    let saved = text
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("- "))
        .expect("path");
    assert_eq!(
        std::fs::read(saved).expect("saved file"),
        b"error: linker failed\n"
    );
    let image = blocks
        .iter()
        .find(|b| b["type"] == "image")
        .expect("an image block");
    assert_eq!(image["mimeType"], "image/png");
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(image["data"].as_str().expect("data"))
        .expect("base64");
    assert_eq!(decoded, bytes, "the agent got the uploaded bytes");
    rig.slack
        .wait_for(&rig.channel, &thread, "the answer", |m| {
            text_of(m).contains("I saw it.")
        })
        .await;
    assert!(
        !rig.slack
            .replies(&rig.channel, &thread)
            .await
            .iter()
            .any(|m| text_of(m).contains("Not passed to the agent")),
        "every file was used: no notice"
    );
    rig.finish().await;
}

/// The saved paths the prompt text lists, in order.
fn saved_paths(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("- "))
        .map(str::to_owned)
        .collect()
}

/// A PDF's first bytes: saved for the agent, never embedded as text.
const PDF: &[u8] = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulate_an_agent_with_embedded_context_gets_a_text_file_embedded_and_a_pdf_as_a_resource_link()
 {
    let Some(rig) = rig_with(false, true, |_| {}).await else {
        return;
    };
    let log = rig
        .slack
        .upload("build.log", b"error: linker failed\nld returned 1\n")
        .await;
    let pdf = rig.slack.upload("report.pdf", PDF).await;
    let thread = rig.say_with_files("why did it fail?", &[log, pdf]).await;
    let prompts = rig.wait_prompts(1).await;
    let blocks = prompts[0].as_array().expect("blocks");
    assert_eq!(blocks.len(), 3, "text, the log, the PDF: {blocks:#?}");
    let paths = saved_paths(blocks[0]["text"].as_str().expect("text"));
    assert_eq!(paths.len(), 2, "both paths in the text too");
    assert_eq!(
        blocks[1],
        json!({"type": "resource", "resource": {"uri": format!("file://{}", paths[0]),
            "mimeType": blocks[1]["resource"]["mimeType"], "text": "error: linker failed\nld returned 1\n"}}),
        "the log's text, embedded"
    );
    assert!(
        blocks[1]["resource"]["mimeType"]
            .as_str()
            .is_some_and(|m| m.starts_with("text/")),
        "{}",
        blocks[1]
    );
    assert_eq!(blocks[2]["type"], "resource_link", "{}", blocks[2]);
    assert_eq!(blocks[2]["uri"], format!("file://{}", paths[1]));
    assert_eq!(blocks[2]["name"], "report.pdf");
    assert_eq!(blocks[2]["size"], PDF.len());
    assert_eq!(
        std::fs::read(&paths[1]).expect("saved"),
        PDF,
        "the link names the saved bytes"
    );
    assert!(
        paths.iter().all(|p| p.starts_with('/')),
        "absolute: {paths:?}"
    );
    rig.slack
        .wait_for(&rig.channel, &thread, "the answer", |m| {
            text_of(m).contains("I saw it.")
        })
        .await;
    rig.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulate_an_agent_without_embedded_context_gets_each_saved_file_as_a_resource_link() {
    let Some(rig) = rig_with(false, false, |_| {}).await else {
        return;
    };
    let body = b"error: linker failed\n";
    let log = rig.slack.upload("build.log", body).await;
    rig.say_with_files("why did it fail?", &[log]).await;
    let prompts = rig.wait_prompts(1).await;
    let blocks = prompts[0].as_array().expect("blocks");
    let paths = saved_paths(blocks[0]["text"].as_str().expect("text"));
    assert_eq!(blocks.len(), 2, "{blocks:#?}");
    assert_eq!(
        blocks[1],
        json!({"type": "resource_link", "uri": format!("file://{}", paths[0]), "name": "build.log",
            "mimeType": blocks[1]["mimeType"], "size": body.len()}),
        "a link, never embedded text"
    );
    assert!(
        blocks[1]["mimeType"]
            .as_str()
            .is_some_and(|m| m.starts_with("text/")),
        "{}",
        blocks[1]
    );
    assert_eq!(std::fs::read(&paths[0]).expect("saved"), body);
    rig.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulate_oversize_too_many_and_refused_files_are_each_explained_and_the_text_still_runs() {
    let Some(rig) = rig(true, |cfg| {
        cfg.attachments.max_images = 2;
        cfg.attachments.max_image_bytes = 10_000;
    })
    .await
    else {
        return;
    };
    let files = [
        rig.slack.upload("one.png", &png(500)).await,
        rig.slack.upload("huge.png", &png(20_000)).await,
        rig.slack.upload("two.png", &png(500)).await,
        rig.slack.upload("three.png", &png(500)).await,
        rig.slack.upload("tools.zip", b"PK\x03\x04zip").await,
        // Declared text by its name, an executable by its bytes: refused by what it is.
        rig.slack
            .upload(
                "notes.txt",
                b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x02\0>\0",
            )
            .await,
        // Declared text, NULs inside: saved, but linked as binary, never embedded as text.
        rig.slack.upload("dump.log", b"abc\0\0\0def\n").await,
    ];
    let thread = rig.say_with_files("look at these", &files).await;
    let notice = rig
        .slack
        .wait_for(&rig.channel, &thread, "the notice", |m| {
            text_of(m).contains("Not passed to the agent")
        })
        .await;
    let shown = text_of(&notice);
    assert!(
        shown.contains("huge.png: too large (19.5 kB; an image may be at most 9.8 kB)"),
        "{shown}"
    );
    assert!(
        shown.contains("three.png: too many images (at most 2 per message)"),
        "{shown}"
    );
    assert!(
        shown.contains("tools.zip: type application/zip not accepted"),
        "{shown}"
    );
    assert!(
        shown.contains("notes.txt: its content is an executable program"),
        "{shown}"
    );
    assert!(
        shown.contains("The rest of your message was sent."),
        "{shown}"
    );
    assert!(
        !shown.contains("one.png") && !shown.contains("two.png") && !shown.contains("dump.log"),
        "{shown}"
    );
    let prompts = rig.wait_prompts(1).await;
    let blocks = prompts[0].as_array().expect("blocks");
    assert!(
        blocks[0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("look at these")),
        "the text ran: {}",
        blocks[0]
    );
    let dump = blocks
        .iter()
        .find(|b| b["uri"].as_str().is_some_and(|u| u.ends_with("dump.log")))
        .expect("dump.log reached the agent");
    assert_eq!(dump["type"], "resource_link", "{dump}");
    assert_eq!(dump["mimeType"], "application/octet-stream", "{dump}");
    assert!(
        !blocks.iter().any(|b| b.to_string().contains("\\u0000")),
        "no NUL embedded as text"
    );
    assert_eq!(
        blocks.iter().filter(|b| b["type"] == "image").count(),
        2,
        "the two images within the budget went"
    );
    rig.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulate_a_daemon_back_without_images_is_sent_none_the_limits_follow_the_latest_initialize()
{
    let prompts = Prompts::default();
    let inits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let daemon = daemon_restarting_without_images(prompts.clone(), inits.clone()).await;
    let Some(rig) = rig_on(daemon, prompts, |_| {}).await else {
        return;
    };
    // Start-up's `initialize` said images and embedded context; the daemon went away and came
    // back saying neither.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while inits.load(std::sync::atomic::Ordering::SeqCst) < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the bridge reconnected and initialized again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let files = [
        rig.slack.upload("screenshot.png", &png(800)).await,
        rig.slack.upload("notes.txt", b"short notes\n").await,
    ];
    let thread = rig.say_with_files("look at this", &files).await;
    let notice = rig
        .slack
        .wait_for(&rig.channel, &thread, "the notice", |m| {
            text_of(m).contains("Not passed to the agent")
        })
        .await;
    let shown = text_of(&notice);
    assert!(
        shown.contains("screenshot.png: the agent does not take images"),
        "{shown}"
    );
    let prompts = rig.wait_prompts(1).await;
    let blocks = prompts[0].as_array().expect("blocks");
    assert!(
        !blocks.iter().any(|b| b["type"] == "image"),
        "no image block to a daemon that said image: false: {blocks:?}"
    );
    assert!(
        !blocks.iter().any(|b| b["type"] == "resource"),
        "no embedded resource to a daemon that said embeddedContext: false: {blocks:?}"
    );
    assert!(
        blocks.iter().any(|b| b["type"] == "resource_link"),
        "the text file goes as a link: {blocks:?}"
    );
    rig.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulate_an_agent_without_images_gets_the_text_and_the_person_hears_why_not_the_image() {
    let Some(rig) = rig(false, |_| {}).await else {
        return;
    };
    let file = rig.slack.upload("screenshot.png", &png(800)).await;
    let thread = rig.say_with_files("and this?", &[file]).await;
    let prompts = rig.wait_prompts(1).await;
    assert_eq!(prompts[0], json!([{"type": "text", "text": "and this?"}]));
    rig.slack
        .wait_for(&rig.channel, &thread, "the notice", |m| {
            text_of(m).contains("screenshot.png: the agent does not take images")
        })
        .await;
    // Only a file, nothing typed, nothing usable: the person hears it and no prompt is sent.
    let file = rig.slack.upload("again.png", &png(800)).await;
    let lone = rig.say_with_files("", &[file]).await;
    rig.slack
        .wait_for(&rig.channel, &lone, "the notice", |m| {
            text_of(m).contains("again.png: the agent does not take images")
                && text_of(m).contains("nothing else in your message")
        })
        .await;
    assert_eq!(
        rig.prompts.lock().expect("lock").len(),
        1,
        "no empty prompt"
    );
    rig.finish().await;
}

/// The section texts of the bridge's answer messages in the thread, in order (titles left out).
fn answer_sections(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| text_of(m).contains("💬 answer"))
        .flat_map(|m| {
            m["blocks"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .skip(1)
                .filter_map(|b| b["text"]["text"].as_str().map(str::to_owned))
        })
        .collect()
}

fn squeeze(s: &str) -> String {
    s.replace("```", "")
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulate_a_60kb_answer_arrives_whole_as_an_uploaded_file_with_a_preview() {
    // Not streamed: the preview and the file are one message.
    let Some(rig) = rig(true, |cfg| cfg.render.stream = false).await else {
        return;
    };
    let thread = rig.say_with_files(LONG, &[]).await;
    let shared = rig
        .slack
        .wait_for(&rig.channel, &thread, "the uploaded answer", |m| {
            m["files"].as_array().is_some_and(|f| !f.is_empty())
        })
        .await;
    let file = &shared["files"][0];
    assert_eq!(file["name"], "answer.md");
    let url = file["url_private_download"]
        .as_str()
        .or_else(|| file["url_private"].as_str())
        .expect("url");
    let content = rig.slack.download(url).await;
    assert_eq!(
        String::from_utf8(content).expect("utf-8"),
        long_answer(),
        "the file is the whole answer"
    );
    let preview = text_of(&shared);
    assert!(
        preview.contains("Paragraph 1:")
            && preview.contains("the whole answer (58.6 kB) is in the file answer.md"),
        "a short preview says where the rest is: {preview:.600}"
    );
    assert!(
        preview.len() < 6_000,
        "only a preview: {} bytes",
        preview.len()
    );
    rig.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulate_a_60kb_answer_under_the_upload_size_arrives_whole_over_several_messages() {
    let Some(rig) = rig(true, |cfg| cfg.render.upload_over = 1 << 20).await else {
        return;
    };
    let thread = rig.say_with_files(LONG, &[]).await;
    rig.slack
        .wait_for(&rig.channel, &thread, "the last part", |m| {
            text_of(m).contains("💬 answer (")
                && text_of(m).contains("answer goes on.\"")
                && text_of(m).contains(&format!(
                    "Paragraph {}:",
                    long_answer().matches("Paragraph ").count()
                ))
        })
        .await;
    let messages = rig.slack.replies(&rig.channel, &thread).await;
    let parts = messages
        .iter()
        .filter(|m| text_of(m).contains("💬 answer ("))
        .count();
    assert!(parts >= 5, "split over several messages: {parts}");
    for m in &messages {
        for b in m["blocks"].as_array().into_iter().flatten() {
            let t = b["text"]["text"].as_str().unwrap_or("");
            assert!(t.chars().count() <= 3000, "a section within Slack's limit");
            assert_eq!(t.matches("```").count() % 2, 0, "fences balanced: {t:.200}");
        }
    }
    assert_eq!(
        squeeze(&answer_sections(&messages).concat()),
        squeeze(&long_answer()),
        "the parts, in order, are the answer"
    );
    rig.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulate_markdown_table_link_and_bold_render_as_mrkdwn() {
    let Some(rig) = rig(true, |_| {}).await else {
        return;
    };
    let thread = rig.say_with_files(MARKDOWN, &[]).await;
    let answer = rig
        .slack
        .wait_for(&rig.channel, &thread, "the answer", |m| {
            text_of(m).contains("💬 answer")
        })
        .await;
    let body = answer_sections(std::slice::from_ref(&answer)).concat();
    assert!(
        body.starts_with("*Result*\n\n"),
        "a heading is a bold line: {body}"
    );
    assert!(body.contains("This is *bold*, this is _italic_"), "{body}");
    assert!(
        body.contains("<https://example.com/a?b=1|the docs>"),
        "{body}"
    );
    assert!(
        body.contains("```\nname | value\n-----+------\na    | 1\n```"),
        "the table is a code block: {body}"
    );
    assert!(
        body.contains("```\nlet x = **not bold**;\n```"),
        "nothing converted inside code: {body}"
    );
    assert!(
        !body.contains("**bold**") && !body.contains("|---"),
        "{body}"
    );
    rig.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r5_emulate_the_answer_streams_into_a_draft_that_becomes_the_answer() {
    let Some(rig) = rig(true, |cfg| {
        cfg.render.stream_every = Duration::from_millis(100);
    })
    .await
    else {
        return;
    };
    let thread = rig.say_with_files(STREAM, &[]).await;
    // While the agent still writes, the thread shows what it wrote so far.
    let draft = rig
        .slack
        .wait_for(&rig.channel, &thread, "the draft", |m| {
            text_of(m).contains("answer (writing…)") && text_of(m).contains("The first half.")
        })
        .await;
    assert!(!text_of(&draft).contains("second half"), "{draft}");
    let answer = rig
        .slack
        .wait_for(&rig.channel, &thread, "the finished answer", |m| {
            text_of(m).contains("💬 answer")
                && text_of(m).contains("The first half. The second half.")
        })
        .await;
    assert_eq!(
        answer["ts"], draft["ts"],
        "the draft was edited into the answer, not posted twice"
    );
    let answers = rig
        .slack
        .replies(&rig.channel, &thread)
        .await
        .iter()
        .filter(|m| text_of(m).contains("half."))
        .count();
    assert_eq!(answers, 1, "one message carries the answer");
    rig.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r5_emulate_with_streaming_off_the_answer_is_posted_once_whole() {
    let Some(rig) = rig(true, |cfg| {
        cfg.render.stream = false;
    })
    .await
    else {
        return;
    };
    let thread = rig.say_with_files(STREAM, &[]).await;
    let answer = rig
        .slack
        .wait_for(&rig.channel, &thread, "the answer", |m| {
            text_of(m).contains("The first half. The second half.")
        })
        .await;
    assert!(answer.get("edited").is_none(), "never edited: {answer}");
    assert!(
        !rig.slack
            .replies(&rig.channel, &thread)
            .await
            .iter()
            .any(|m| text_of(m).contains("writing…")),
        "no draft"
    );
    rig.finish().await;
}
