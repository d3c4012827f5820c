//! Shared by the tests that run the real `chat-bridge` binary as a user would.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// `chat-bridge` in `dir` with none of the caller's `CHAT_BRIDGE_*` variables, 200 ms heartbeats, and
/// `vars` set.
pub fn command(dir: &Path, vars: &[(&str, &str)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_chat-bridge"));
    c.current_dir(dir);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("CHAT_BRIDGE_") {
            c.env_remove(k);
        }
    }
    c.env("CHAT_BRIDGE_SHELL_AGENT__HEARTBEAT_INTERVAL", "200ms");
    for (k, v) in vars {
        c.env(k, v);
    }
    c
}

/// Starts `cmd`, writes `stdin` to it and closes it, and waits for the process to end.
pub fn piped(cmd: &mut Command, stdin: &[u8]) -> Output {
    let mut child = cmd
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
