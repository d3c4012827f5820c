//! `chat-bridge shell-agent` as on-call would run it: a real process, its printed URL and token,
//! a real command through it, and a clean exit on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use daemon_client::{ClientConfig, DaemonClient, DaemonEvent, StopReason};

#[tokio::test]
async fn shell_agent_subcommand_prints_url_and_token_serves_a_command_and_exits_on_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_chat-bridge"))
        .args([
            "shell-agent",
            "--listen",
            "127.0.0.1:0",
            "--heartbeat-interval",
            "100ms",
            "--default-timeout",
            "5s",
        ])
        .env_remove("CHAT_BRIDGE_SHELL_AGENT_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn chat-bridge");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let url_line = lines.next().expect("a line").expect("utf8");
    let url = url_line
        .strip_prefix("shell-agent listening on ")
        .expect("url line")
        .to_owned();
    let token = lines
        .next()
        .expect("token line")
        .expect("utf8")
        .strip_prefix("token: ")
        .expect("token")
        .to_owned();

    let (client, _, mut events) = DaemonClient::connect(ClientConfig::new(&url).with_token(&token))
        .await
        .expect("connect");
    let dir = std::env::temp_dir();
    let session = client.new_session(&dir).await.expect("session").session;
    assert_eq!(
        client
            .prompt(&session, "sleep 0.3; echo done")
            .await
            .expect("prompt"),
        StopReason::EndTurn
    );
    let mut finished = None;
    while let Ok(Some(e)) = tokio::time::timeout(Duration::from_secs(10), events.recv()).await {
        if let DaemonEvent::ToolFinished { result, .. } = &e {
            finished = Some(result.clone());
        }
        if matches!(e, DaemonEvent::TurnEnded { .. }) {
            break;
        }
    }
    assert_eq!(finished.expect("a result").output, "done\n");

    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let status = child.wait().expect("wait");
    assert!(status.success(), "exits 0 on SIGTERM: {status:?}");
}

#[test]
fn shell_agent_subcommand_refuses_a_public_address_without_a_token() {
    let out = Command::new(env!("CARGO_BIN_EXE_chat-bridge"))
        .args(["shell-agent", "--listen", "0.0.0.0:0"])
        .env_remove("CHAT_BRIDGE_SHELL_AGENT_TOKEN")
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("without --token"), "{stderr}");
}

#[test]
fn bad_durations_are_rejected_with_the_accepted_forms() {
    let out = Command::new(env!("CARGO_BIN_EXE_chat-bridge"))
        .args(["shell-agent", "--heartbeat-interval", "10x"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("500ms, 10s, 2m"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
