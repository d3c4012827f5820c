//! Interop with the real qwen-code daemon (`shared/peers/qwen/`): a silent command, approved by the
//! test, heartbeats observed, completed. Skipped — loudly — only when npm cannot install the daemon;
//! the daemon is always stopped.
//!
//! Why 23 s and not 13 s: qwen 0.24.4 checks for silence on a 10 s tick and sends a heartbeat when the
//! command has been silent for at least 10 s. At the 10 s tick a silent command's silence is exactly at
//! that boundary, so whether a 13 s command gets its one heartbeat is a coin flip (seen both ways here).
//! The 20 s tick of a 23 s command is always past it — the capture `shell-heartbeat-completed.jsonl`
//! is the same command.

use std::sync::Arc;
use std::time::Duration;

use chat_bridge_tests::init_tracing;
use chat_bridge_tests::qwen::{QwenPeer, Unavailable};
use chat_bridge_tests::summary::ToolRun;
use daemon_client::{ClientConfig, DaemonClient, DaemonEvent, PermissionOutcome};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interop_qwen_silent_command_heartbeats_then_completes() {
    init_tracing();
    let peer = match QwenPeer::start() {
        Ok(peer) => peer,
        Err(Unavailable::NotInstallable(why)) => {
            eprintln!(
                "\n!!!!!!!! SKIPPED interop_qwen: the qwen-code daemon could not be installed from npm !!!!!!!!\n{why}\n"
            );
            return;
        }
    };
    let mut cfg = ClientConfig::new(&peer.url).with_token(&peer.token);
    cfg.permission_policy = Some(Arc::new(|req: &daemon_client::PermissionRequest| {
        req.options
            .iter()
            .find(|o| o.option_id == "proceed_once")
            .map(|o| PermissionOutcome::Selected(o.option_id.clone()))
    }));
    let (client, info, mut events) = DaemonClient::connect(cfg).await.expect("connect to qwen");
    assert!(info.load_session);
    let session = client
        .new_session(peer.workspace())
        .await
        .expect("session/new")
        .session;
    let prompter = client.clone();
    let s = session.clone();
    let prompt = tokio::spawn(async move {
        prompter
            .prompt(&s, "RUN 30000 python3 -c 'import time; time.sleep(23)'")
            .await
    });
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let e = tokio::time::timeout_at(deadline, events.recv())
            .await
            .expect("turn ended within 90 s")
            .expect("open");
        let done = matches!(e, DaemonEvent::TurnEnded { .. });
        seen.push(e);
        if done {
            break;
        }
    }
    prompt.await.expect("join").expect("prompt");
    let run = ToolRun::of(&seen);
    run.assert_silent_completed(1, "");
    assert!(
        run.permissions >= 1,
        "the daemon asked and the test allowed: {:?}",
        run.names
    );
    client.close();
}
