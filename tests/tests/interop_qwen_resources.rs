//! Interop with the real qwen-code daemon (`shared/peers/qwen/`): its `initialize` says it takes
//! embedded context (`promptCapabilities.embeddedContext`), and a prompt carrying the blocks the
//! bridge makes for saved attachments (`files::file_block`: a `resource_link` to a file under the
//! session's directory, and a text file's contents as an embedded `resource`) is accepted and reaches
//! the model whole: qwen's own request log (switched on in the workspace's `.qwen/settings.json`)
//! shows the linked file's text, read by qwen, and the embedded text, each exactly once. Skipped —
//! loudly — only when npm cannot install the daemon; the daemon is always stopped.

use std::path::Path;
use std::time::Duration;

use chat_bridge::channel::Attachment;
use chat_bridge::conversation::files::{self, Limits};
use chat_bridge_tests::init_tracing;
use chat_bridge_tests::qwen::{QwenPeer, Unavailable, slot};
use daemon_client::{ClientConfig, DaemonClient, PromptBlock, StopReason};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interop_qwen_reads_a_linked_attachment_and_takes_an_embedded_one() {
    init_tracing();
    let _slot = slot().await;
    let log_dir = tempfile::tempdir().expect("tmp");
    let logs = log_dir.path().to_path_buf();
    let peer = match QwenPeer::start_with(|ws| {
        std::fs::create_dir_all(ws.join(".qwen")).expect(".qwen");
        let settings = serde_json::json!({"model": {"enableOpenAILogging": true,
            "openAILoggingDir": logs.display().to_string()}});
        std::fs::write(ws.join(".qwen/settings.json"), settings.to_string()).expect("settings");
    }) {
        Ok(peer) => peer,
        Err(Unavailable::NotInstallable(why)) => {
            eprintln!(
                "\n!!!!!!!! SKIPPED interop_qwen_resources: the qwen-code daemon could not be installed from npm !!!!!!!!\n{why}\n"
            );
            return;
        }
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
