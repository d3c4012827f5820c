//! Interop with the real qwen-code daemon (`shared/peers/qwen/`): its `initialize` says it takes
//! embedded context (`promptCapabilities.embeddedContext`), and a prompt carrying the blocks the
//! bridge makes for saved attachments (`files::file_block`: a `resource_link` to a file under the
//! session's directory, and a text file's contents as an embedded `resource`) is accepted and reaches
//! the model whole: qwen's own request log (switched on in the workspace's `.qwen/settings.json`)
//! shows the linked file's text, read by qwen, and the embedded text, each exactly once. And the
//! whole way a person goes: two text files attached to a Slack message (npm `emulate`) reach qwen's
//! model through the bridge, one embedded, the other (past the embedding budget) linked and read by
//! qwen. Skipped — loudly — only when npm cannot install the daemon (or the emulator); the daemon is
//! always stopped.

use std::path::Path;
use std::time::Duration;

use chat_bridge::channel::Attachment;
use chat_bridge::conversation::files::{self, Limits};
use chat_bridge_tests::bridge::SLACK_SIGNING_SECRET;
use chat_bridge_tests::init_tracing;
use chat_bridge_tests::qwen::{QwenPeer, Unavailable, slot};
use chat_bridge_tests::slack_emulate::{self, SlackEmulator};
use daemon_client::{ClientConfig, DaemonClient, PromptBlock, StopReason};
use serde_json::json;

fn attachment(name: &str, mime: &str) -> Attachment {
    Attachment {
        id: name.into(),
        name: name.into(),
        mime: Some(mime.into()),
        size: None,
        url: None,
    }
}

/// The text of every request qwen sent its model, from its OpenAI request log.
fn model_requests(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        // qwen's own background helpers (memory extraction) log their requests beside the turn's.
        if name.contains("subagent") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        out.push(v["request"]["messages"].to_string());
    }
    out
}

/// A qwen daemon whose model requests are logged into `logs` (its workspace's settings).
fn qwen_logging_to(logs: &Path) -> Option<QwenPeer> {
    let logs = logs.to_path_buf();
    match QwenPeer::start_with(|ws| {
        std::fs::create_dir_all(ws.join(".qwen")).expect(".qwen");
        let settings = json!({"model": {"enableOpenAILogging": true,
            "openAILoggingDir": logs.display().to_string()}});
        std::fs::write(ws.join(".qwen/settings.json"), settings.to_string()).expect("settings");
    }) {
        Ok(peer) => Some(peer),
        Err(Unavailable::NotInstallable(why)) => {
            eprintln!(
                "\n!!!!!!!! SKIPPED interop_qwen_resources: the qwen-code daemon could not be installed from npm !!!!!!!!\n{why}\n"
            );
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interop_qwen_reads_a_linked_attachment_and_takes_an_embedded_one() {
    init_tracing();
    let _slot = slot().await;
    let log_dir = tempfile::tempdir().expect("tmp");
    let Some(peer) = qwen_logging_to(log_dir.path()) else {
        return;
    };
    let cfg = ClientConfig::new(&peer.url).with_token(&peer.token);
    let (client, info, _events) = DaemonClient::connect(cfg).await.expect("connect to qwen");
    assert!(
        info.embedded_context,
        "qwen says it takes embedded context: {info:?}"
    );
    let ws = peer.workspace();
    let session = client.new_session(&ws).await.expect("session/new").session;
    // Saved where the bridge saves attachments, told about as the bridge tells the agent.
    let linked_text = "error: linker failed\nLINKED-MARKER-7f3a\n";
    let embedded_text = "notes: EMBEDDED-MARKER-91c2\n";
    let linked_path = files::saved_path(&ws, "turn-1", 0, "build.log");
    let embedded_path = files::saved_path(&ws, "turn-1", 1, "notes.txt");
    std::fs::create_dir_all(linked_path.parent().expect("dir")).expect("attachments dir");
    std::fs::write(&linked_path, linked_text).expect("write");
    std::fs::write(&embedded_path, embedded_text).expect("write");
    let no_embedding = Limits::default();
    let embedding = Limits {
        agent_embedded: info.embedded_context,
        ..Limits::default()
    };
    let mut left = embedding.max_embedded_bytes;
    let link = files::file_block(
        &linked_path,
        &attachment("build.log", "text/plain"),
        linked_text.as_bytes(),
        &no_embedding,
        &mut left,
    );
    let embedded = files::file_block(
        &embedded_path,
        &attachment("notes.txt", "text/plain"),
        embedded_text.as_bytes(),
        &embedding,
        &mut left,
    );
    assert!(matches!(link, PromptBlock::ResourceLink { .. }), "{link:?}");
    assert!(
        matches!(embedded, PromptBlock::Resource { .. }),
        "{embedded:?}"
    );
    let blocks = [
        PromptBlock::Text(files::prompt_text(
            "what went wrong?",
            &[linked_path.clone(), embedded_path.clone()],
        )),
        link,
        embedded,
    ];
    let stop = tokio::time::timeout(
        Duration::from_secs(60),
        client.prompt_content(&session, &blocks),
    )
    .await
    .expect("answered within 60 s")
    .expect("the prompt with resource blocks is accepted");
    assert_eq!(stop, StopReason::EndTurn);
    let requests = model_requests(log_dir.path());
    let turn = requests
        .iter()
        .find(|r| r.contains("what went wrong?"))
        .unwrap_or_else(|| panic!("qwen's request for the turn is logged: {requests:?}"));
    assert_eq!(
        turn.matches("LINKED-MARKER-7f3a").count(),
        1,
        "qwen read the linked file into the model request, once"
    );
    assert_eq!(
        turn.matches("EMBEDDED-MARKER-91c2").count(),
        1,
        "the embedded text reached the model, once"
    );
    client.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interop_qwen_files_attached_on_slack_reach_the_model_through_the_bridge() {
    init_tracing();
    let _slot = slot().await;
    let slack = match SlackEmulator::start().await {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "!!! SKIPPED: the Slack emulator (npm emulate) could not be installed: {e:?} !!!"
            );
            return;
        }
    };
    let log_dir = tempfile::tempdir().expect("tmp");
    let Some(peer) = qwen_logging_to(log_dir.path()) else {
        return;
    };
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
    cfg.daemon.url = Some(peer.url.clone());
    cfg.daemon.token = Some(peer.token.clone().into());
    cfg.daemon.cwd = Some(peer.workspace());
    cfg.slack_mut().bot_token = Some(slack_emulate::TOKEN.into());
    cfg.slack_mut().api_base_url = slack.api_base.clone();
    cfg.slack_mut().mode = chat_bridge::config::SlackMode::Http;
    cfg.slack_mut().listen = format!("127.0.0.1:{port}");
    cfg.slack_mut().signing_secret = Some(SLACK_SIGNING_SECRET.into());
    cfg.slack_mut().allowed_users = vec![alice.clone()];
    // A real agent and model: the test configuration's half-second idle limit would stall it.
    cfg.liveness.idle = Duration::from_secs(60);
    let embedded_text = "notes: EMBEDDED-MARKER-5d10\n";
    let linked_text = "error: linker failed\nLINKED-MARKER-c4e8\n";
    // The first file fits the embedding budget, the second no longer does: it goes as a link.
    cfg.attachments.max_embedded_bytes = embedded_text.len() as u64;
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn({
        let stop = stop.clone();
        async move { chat_bridge::startup::run(&cfg, stop).await }
    });
    let http = reqwest::Client::new();
    let events = format!("http://127.0.0.1:{port}/slack/events");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while http
        .post(&events)
        .body(json!({"type": "url_verification", "challenge": "c"}).to_string())
        .send()
        .await
        .is_err()
    {
        assert!(tokio::time::Instant::now() < deadline, "the bridge came up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let notes = slack.upload("notes.txt", embedded_text.as_bytes()).await;
    // A name with a space: the saved file's URI must still lead qwen to it.
    let log = slack
        .upload("build output.log", linked_text.as_bytes())
        .await;
    let wire_text = format!("<@{bot}> what went wrong in the build?");
    let ts = slack.post(&channel, None, &wire_text).await;
    let event = json!({"type": "app_mention", "user": alice, "channel": channel,
        "channel_type": "channel", "ts": ts, "event_ts": ts, "text": wire_text, "files": [notes, log]});
    let body = json!({"type": "event_callback", "team_id": "T000000001", "api_app_id": "A1",
        "event_id": format!("Ev{}", ts.replace('.', "")), "event_time": 1, "event": event})
    .to_string();
    let r = slack_emulate::post_signed(
        &http,
        &events,
        SLACK_SIGNING_SECRET,
        "application/json",
        body,
    )
    .await;
    assert_eq!(r.status(), 200, "the bridge took the event");
    // The scripted model answers `echo: …`; the answer reaching the thread ends the turn.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let replies = slack.replies(&channel, &ts).await;
        if replies.iter().any(|m| m.to_string().contains("echo: ")) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "qwen's answer in the thread: {replies:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        !slack
            .replies(&channel, &ts)
            .await
            .iter()
            .any(|m| m.to_string().contains("Not passed to the agent")),
        "both files were used"
    );
    let turn = loop {
        let requests = model_requests(log_dir.path());
        if let Some(turn) = requests
            .into_iter()
            .find(|r| r.contains("what went wrong in the build?"))
        {
            break turn;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "qwen's request for the turn is logged: {:?} {:#?}",
            std::fs::read_dir(log_dir.path()).map(|d| d.count()),
            slack.replies(&channel, &ts).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        turn.matches("EMBEDDED-MARKER-5d10").count(),
        1,
        "the embedded file reached the model, once"
    );
    assert_eq!(
        turn.matches("LINKED-MARKER-c4e8").count(),
        1,
        "qwen read the linked file into the model request, once"
    );
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("stops in time")
        .expect("join")
        .expect("clean shutdown");
}
