//! `chat-bridge` on a terminal, as a new user meets it: the real binary in a pseudo-terminal
//! (`portable-pty`), stdin, stdout and stderr all the terminal. The screen shows the conversation and
//! no log lines (they go to `./chat-bridge.log`, said once at start); the banner fits the built-in
//! agent; `/help` answers; an approval lists its numbers and a typed number answers it; each tool
//! prints one start line; Ctrl-D ends the session.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portable_pty::{CommandBuilder, PtySize, native_pty_system};

struct Screen(Arc<Mutex<String>>);

impl Screen {
    fn text(&self) -> String {
        self.0.lock().expect("lock").clone()
    }

    /// Waits until the screen shows `what` (60 s at most) after byte `from`; returns where it ends.
    fn wait_for(&self, what: &str, from: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = self.text();
            if let Some(at) = text.get(from..).and_then(|t| t.find(what)) {
                return from + at + what.len();
            }
            assert!(
                Instant::now() < deadline,
                "the screen never showed {what:?}:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn a_terminal_session_shows_the_conversation_not_logs_and_numbered_approvals_work() {
    let dir = tempfile::tempdir().expect("tmp");
    let pty = native_pty_system()
        .openpty(PtySize {
            rows: 50,
            cols: 200,
            pixel_width: 0,
            pixel_height: 0,
        })
        .expect("a pseudo-terminal");
    let mut cmd = CommandBuilder::new(env!("CARGO_BIN_EXE_chat-bridge"));
    cmd.cwd(dir.path());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("CHAT_BRIDGE_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("TERM", "dumb");
    cmd.env("CHAT_BRIDGE_SHELL_AGENT__HEARTBEAT_INTERVAL", "200ms");
    cmd.env("CHAT_BRIDGE_SHELL_AGENT__REQUIRE_APPROVAL", "true");
    let mut child = pty.slave.spawn_command(cmd).expect("start chat-bridge");
    drop(pty.slave);
    let mut reader = pty.master.try_clone_reader().expect("reader");
    let mut writer = pty.master.take_writer().expect("writer");
    let screen = Screen(Arc::new(Mutex::new(String::new())));
    let sink = screen.0.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .expect("lock")
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let mut type_line = |line: &str| send(&mut writer, &format!("{line}\r"));

    let at = screen.wait_for("Ctrl-D to quit", 0);
    let banner = screen.text();
    assert!(
        banner.contains("type a shell command") && banner.contains("logs: ./chat-bridge.log"),
        "the banner fits the built-in agent and says where the logs went:\n{banner}"
    );

    type_line("/help");
    let at = screen.wait_for("/cancel — stop the running turn", at);

    type_line("echo typed at a terminal");
    let at = screen.wait_for("Answer with a number (1, 2 or 3) and Enter:", at);
    screen.wait_for("1) Allow", at);
    type_line("1");
    let at = screen.wait_for("✅ echo typed at a terminal", at);
    screen.wait_for("│ typed at a terminal", at);

    // Ctrl-D at the start of a line: end of input.
    type_line("\u{4}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "Ctrl-D ends the session:\n{}",
            screen.text()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = screen.text();
    assert!(status.success(), "exit 0:\n{text}");
    for log_line in [
        " INFO ",
        " WARN ",
        "turn started",
        "leader lease",
        "tool finished",
    ] {
        assert!(
            !text.contains(log_line),
            "a log line ({log_line:?}) on the screen:\n{text}"
        );
    }
    assert_eq!(
        text.matches("⏳ echo typed at a terminal").count(),
        1,
        "one start line per tool:\n{text}"
    );
    let log = std::fs::read_to_string(dir.path().join("chat-bridge.log")).expect("the log file");
    assert!(log.contains("INFO"), "the logs went to the file:\n{log}");
}

fn send(writer: &mut Box<dyn Write + Send>, text: &str) {
    writer
        .write_all(text.as_bytes())
        .and_then(|()| writer.flush())
        .expect("type");
}
