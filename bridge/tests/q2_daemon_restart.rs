//! Q2 with real processes: the daemon (`chat-bridge shell-agent`) is killed with SIGKILL while a
//! command runs and started again on the same address — it has lost every session. The bridge
//! (the real binary, console) reconnects, learns the session is gone, tells the thread plainly that
//! the turn was interrupted, and the next message in the thread runs in a new session.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const TOKEN: &str = "q2-restart-token";

fn agent(port: u16) -> Child {
    Command::new(env!("CARGO_BIN_EXE_chat-bridge"))
        .args([
            "shell-agent",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--token",
            TOKEN,
        ])
        .args(["--heartbeat-interval", "200ms"])
        .env_remove("CHAT_BRIDGE_CONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the shell agent")
}

fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "the shell agent never listened on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Lines of the bridge's stdout, as they come.
fn lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let out = BufReader::new(child.stdout.take().expect("stdout"));
    std::thread::spawn(move || {
        for line in out.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

fn wait_line(rx: &mpsc::Receiver<String>, seen: &mut Vec<String>, pred: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let hit = pred(&line);
                seen.push(line);
                if hit {
                    return;
                }
            }
            Err(_) => panic!("not seen within 30 s; output so far:\n{}", seen.join("\n")),
        }
    }
}

#[test]
fn q2_a_killed_and_restarted_daemon_that_lost_the_session_gives_an_interrupted_notice_and_the_thread_carries_on()
 {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let dir = tempfile::tempdir().expect("tmp");
    let mut daemon = agent(port);
    wait_listening(port);
    let mut bridge = Command::new(env!("CARGO_BIN_EXE_chat-bridge"))
        .current_dir(dir.path())
        .env_remove("CHAT_BRIDGE_CONFIG")
        .env(
            "CHAT_BRIDGE_DAEMON__URL",
            format!("ws://127.0.0.1:{port}/acp"),
        )
        .env("CHAT_BRIDGE_DAEMON__TOKEN", TOKEN)
        .env("CHAT_BRIDGE_LIVENESS__IDLE", "20s")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join("bridge.log")).expect("log"))
        .spawn()
        .expect("start chat-bridge");
    let mut stdin = bridge.stdin.take().expect("stdin");
    let rx = lines(&mut bridge);
    let mut seen = Vec::new();
    writeln!(stdin, "sleep 30; echo never").expect("write");
    wait_line(&rx, &mut seen, |l| l.starts_with("⏳ sleep 30; echo never"));

    daemon.kill().expect("SIGKILL the daemon");
    let _ = daemon.wait();
    let mut daemon = agent(port);
    wait_listening(port);
    wait_line(&rx, &mut seen, |l| l.contains("lost this thread's session"));
    assert!(
        seen.iter().any(|l| l.contains("the turn was interrupted")),
        "{}",
        seen.join("\n")
    );

    assert!(
        seen.iter()
            .any(|l| l.contains("⏹ sleep 30; echo never — interrupted")),
        "the lost command's message says so: {}",
        seen.join("\n")
    );
    writeln!(stdin, "echo after the restart").expect("write");
    wait_line(&rx, &mut seen, |l| {
        l.starts_with("✅ echo after the restart")
    });
    assert!(
        !seen.iter().any(|l| l.starts_with("✅ sleep 30")),
        "the new command's result is not taken for the lost one: {}",
        seen.join("\n")
    );
    drop(stdin);
    let status = bridge.wait().expect("wait");
    assert!(
        status.success(),
        "the bridge exits 0 once stdin closes: {status:?}"
    );
    assert!(
        !seen
            .iter()
            .any(|l| l.contains("never") && !l.starts_with("⏳") && !l.contains("sleep 30")),
        "the killed command printed nothing: {}",
        seen.join("\n")
    );
    daemon.kill().expect("stop the daemon");
    let _ = daemon.wait();
}
