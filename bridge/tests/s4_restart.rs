//! S4 as on-call would meet it: a NUL typed at the console on PostgreSQL used to fail the event's
//! handling, stay in the inbox, and make every later start exit 1 (a crash loop under Kubernetes).
//! The real binary, the built-in shell agent, started twice on the same database.

use std::io::Write;
use std::process::{Command, Output, Stdio};

mod support;

fn run(db: &str, cwd: &std::path::Path, stdin: &[u8]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_chat-bridge"));
    c.current_dir(cwd);
    for (k, _) in std::env::vars() {
        if k.starts_with("CHAT_BRIDGE_") {
            c.env_remove(k);
        }
    }
    let mut child = c
        .env("CHAT_BRIDGE_DATABASE__URL", db)
        .env("CHAT_BRIDGE_SHELL_AGENT__HEARTBEAT_INTERVAL", "200ms")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chat-bridge");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .expect("write");
    child.wait_with_output().expect("wait")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_nul_in_an_inbound_message_does_not_crash_loop_start_up() {
    let db = support::FreshDb::create("cb_s4_restart").await;
    let dir = tempfile::tempdir().expect("tmp");

    let first = run(&db.url, dir.path(), b"echo IN\0NUL\n");
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(
        first.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(
        stdout.contains("IN␀NUL"),
        "run and delivered, NUL shown as ␀: {stdout}"
    );

    for start in 2..=3 {
        let again = run(&db.url, dir.path(), b"echo next start\n");
        let stdout = String::from_utf8_lossy(&again.stdout);
        let stderr = String::from_utf8_lossy(&again.stderr);
        assert!(
            again.status.success(),
            "start {start} exits 0:\n{stdout}\n{stderr}"
        );
        assert!(
            stdout.contains("│ next start"),
            "start {start} serves: {stdout}"
        );
        assert!(
            !stdout.contains("IN␀NUL"),
            "the first message is not taken again: {stdout}"
        );
    }
    db.drop_now().await;
}
