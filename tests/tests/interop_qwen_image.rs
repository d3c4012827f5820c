//! Interop with the real qwen-code daemon (`shared/peers/qwen/`): its `initialize` says it takes
//! images (`promptCapabilities.image`), and a prompt carrying an ACP `image` block beside its text is
//! accepted and answered (the bridge sends images in exactly this shape). Skipped — loudly — only
//! when npm cannot install the daemon; the daemon is always stopped.

use std::time::Duration;

use chat_bridge_tests::init_tracing;
use chat_bridge_tests::qwen::{QwenPeer, Unavailable};
use daemon_client::{ClientConfig, DaemonClient, DaemonEvent, PromptBlock, StopReason};

/// A 1×1 PNG.
const PIXEL: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interop_qwen_takes_an_image_prompt_and_answers_it() {
    init_tracing();
    let peer = match QwenPeer::start() {
        Ok(peer) => peer,
        Err(Unavailable::NotInstallable(why)) => {
            eprintln!(
                "\n!!!!!!!! SKIPPED interop_qwen_image: the qwen-code daemon could not be installed from npm !!!!!!!!\n{why}\n"
            );
            return;
        }
    };
    let cfg = ClientConfig::new(&peer.url).with_token(&peer.token);
    let (client, info, mut events) = DaemonClient::connect(cfg).await.expect("connect to qwen");
    assert!(info.images, "qwen says it takes images: {info:?}");
    let session = client
        .new_session(peer.workspace())
        .await
        .expect("session/new")
        .session;
    let blocks = [
        PromptBlock::Text("what is in this picture".into()),
        PromptBlock::Image {
            mime_type: "image/png".into(),
            data: PIXEL.into(),
        },
    ];
    let stop = tokio::time::timeout(
        Duration::from_secs(60),
        client.prompt_content(&session, &blocks),
    )
    .await
    .expect("answered within 60 s")
    .expect("the image prompt is accepted");
    assert_eq!(stop, StopReason::EndTurn);
    let mut text = String::new();
    while let Ok(Some(e)) = tokio::time::timeout(Duration::from_millis(500), events.recv()).await {
        if let DaemonEvent::AgentText { text: t, .. } = e {
            text.push_str(&t);
        }
    }
    // The scripted model echoes the start of the user turn (qwen puts its own reminders first).
    assert!(
        text.starts_with("echo: "),
        "the model answered the turn that carried the image: {text:?}"
    );
    client.close();
}
