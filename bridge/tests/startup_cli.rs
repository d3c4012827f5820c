//! The one start path as the real binary runs it (issue 24 item 4): a fatal start-up error ends the
//! process at once with a non-zero status, whatever else is running — here the console's stdin is
//! still open, so nothing would end the process but the error itself.

use std::process::Stdio;
use std::time::{Duration, Instant};

#[allow(dead_code)] // the helpers other suites use too
mod binary;

#[test]
fn a_fatal_start_up_error_ends_the_process_at_once_with_a_non_zero_status() {
    let dir = tempfile::tempdir().expect("tmp");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let listen = format!("127.0.0.1:{}", taken.local_addr().expect("addr").port());
    let mut child = binary::command(dir.path(), &[("CHAT_BRIDGE_HTTP__LISTEN", &listen)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chat-bridge");
    // Held open until the end of the test: the console's input never ends by itself.
    let stdin = child.stdin.take().expect("stdin");
    let pid = child.id();
    let started = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let Ok(out) = rx.recv_timeout(Duration::from_secs(20)) else {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid")),
            nix::sys::signal::Signal::SIGKILL,
        );
        panic!("chat-bridge kept running after its HTTP listener could not bind");
    };
    let out = out.expect("wait");
    drop(stdin);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a non-zero status: {stderr}");
    assert!(
        stderr.contains(&format!("http.listen {listen}")),
        "names the setting at fault: {stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "at once: {:?}",
        started.elapsed()
    );
    drop(taken);
}

/// `history` run where no bridge ever ran (the default SQLite file is missing): a clear error
/// naming the file, and no empty `chat-bridge.db` left behind.
#[test]
fn history_where_no_database_exists_says_so_and_creates_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = binary::command(dir.path(), &[])
        .args(["history", "list"])
        .stdin(Stdio::null())
        .output()
        .expect("run chat-bridge history");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a non-zero status: {stderr}");
    assert!(
        stderr.contains("chat-bridge.db") && stderr.contains("does not exist"),
        "names the missing file: {stderr}"
    );
    assert!(
        !dir.path().join("chat-bridge.db").exists(),
        "reading history created an empty database"
    );
}
