//! Issue 24 item 1, as on-call would meet it, against `discord-digital-twin` (npm, written by
//! others): the twin stops (its gateway sends a close frame without a status code, then its HTTP
//! server goes away); the real `chat-bridge` process stays idle (its CPU time measured from
//! `/proc`), `/healthz` answers within a second, `/readyz` says not ready, and a SIGTERM ends the
//! process with status 0 within `service.drain_timeout` + 5 s. Says SKIPPED and passes when the
//! twin cannot be installed from npm.

use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

#[allow(dead_code)]
mod binary;
#[allow(dead_code)]
#[path = "../../tests/src/discord_twin.rs"]
mod discord_twin;

use discord_twin::{Twin, http_get, http_status};

/// The process's CPU time (user + system) so far.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/<pid>/stat");
    // Fields after the command name (which may hold spaces, inside parentheses).
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the state.
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    // SAFETY-free: sysconf is not needed, Linux reports USER_HZ = 100 to user space.
    Duration::from_millis(ticks * 10)
}

/// Kills the process if the test ends before it does (a failed assertion must not leave a bridge
/// behind).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn ready(http: &str, want: bool, within: Duration) {
    let started = Instant::now();
    loop {
        let answer = http_get(http, "/readyz", Duration::from_secs(1)).await;
        let status = answer.as_ref().map(|(s, _)| *s);
        let active = answer
            .as_ref()
            .is_some_and(|(_, body)| body.contains(r#""role":"active""#));
        if (status == Some(200) && active) == want {
            return;
        }
        assert!(
            started.elapsed() < within,
            "/readyz not {want} within {within:?} (last {status:?})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twin_stops_then_sigterm_the_process_exits_within_the_drain_bound_and_stays_idle() {
    let Some(mut twin) = Twin::start().await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let http = format!("127.0.0.1:{}", {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    });
    let db = format!("sqlite://{}", dir.path().join("twin.db").display());
    let users = format!("[\"{}\"]", twin.people[0]);
    let drain = Duration::from_secs(3);
    let child = binary::command(
        dir.path(),
        &[
            ("CHAT_BRIDGE_SERVICE__PLATFORM", "discord"),
            ("CHAT_BRIDGE_SERVICE__DRAIN_TIMEOUT", "3s"),
            ("CHAT_BRIDGE_DISCORD__TOKEN", &twin.token),
            ("CHAT_BRIDGE_DISCORD__API_BASE_URL", &twin.base_url),
            ("CHAT_BRIDGE_DISCORD__ALLOWED_USERS", &users),
            ("CHAT_BRIDGE_DATABASE__URL", &db),
            ("CHAT_BRIDGE_HTTP__LISTEN", &http),
            ("CHAT_BRIDGE_LOG", "info"),
        ],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::inherit())
    .spawn()
    .expect("start chat-bridge");
    let mut child = KillOnDrop(child);
    let pid = child.0.id();
    ready(&http, true, Duration::from_secs(60)).await;

    twin.stop().await;
    ready(&http, false, Duration::from_secs(5)).await;
    // Idle while the gateway is gone: reconnect attempts with backoff, no busy loop.
    let before = cpu_time(pid);
    let window = Duration::from_secs(4);
    let started = Instant::now();
    while started.elapsed() < window {
        let asked = Instant::now();
        assert_eq!(
            http_status(&http, "/healthz", Duration::from_secs(1)).await,
            Some(200),
            "/healthz answers within a second"
        );
        assert!(asked.elapsed() < Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let spent = cpu_time(pid) - before;
    eprintln!("CPU time over {window:?} with the gateway gone: {spent:?}");
    assert!(
        spent < window / 10,
        "the process spins: {spent:?} of CPU in {window:?}"
    );

    kill(
        Pid::from_raw(i32::try_from(pid).expect("pid")),
        Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let sent = Instant::now();
    let bound = drain + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("wait") {
            break status;
        }
        assert!(
            sent.elapsed() <= bound,
            "still running {bound:?} after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("exited {:?} after SIGTERM: {status}", sent.elapsed());
    assert!(status.success(), "a clean exit: {status}");
}
