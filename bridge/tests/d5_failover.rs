//! D5 and shutdown as on-call meets them, with the real binary: two replicas on one PostgreSQL
//! database — exactly one active, the other standing by (both say so on `/readyz`); SIGKILL the
//! active one and the standby takes over within 10 s and serves; SIGTERM the survivor and it
//! reports `stopping`, drains and exits 0.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

fn replica(db: &str, port: u16, dir: &std::path::Path, name: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_chat-bridge"))
        .current_dir(dir)
        .env("CHAT_BRIDGE_DATABASE__URL", db)
        .env("CHAT_BRIDGE_HTTP__LISTEN", format!("127.0.0.1:{port}"))
        .env("CHAT_BRIDGE_HTTP__API_TOKEN", "api-token")
        .env("CHAT_BRIDGE_SERVICE__LEADER_RETRY", "300ms")
        .env("CHAT_BRIDGE_SERVICE__LEADER_CHECK", "300ms")
        .env("CHAT_BRIDGE_SHELL_AGENT__HEARTBEAT_INTERVAL", "200ms")
        .env_remove("CHAT_BRIDGE_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join(format!("{name}.log"))).expect("log"))
        .spawn()
        .expect("start chat-bridge")
}

async fn readyz(port: u16) -> Option<(u16, Value)> {
    let r = reqwest::get(format!("http://127.0.0.1:{port}/readyz"))
        .await
        .ok()?;
    let status = r.status().as_u16();
    Some((status, r.json().await.ok()?))
}

/// Polls `/readyz` until the role is `role`; returns how long it took.
async fn wait_role(port: u16, role: &str, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        if let Some((status, body)) = readyz(port).await
            && body["role"] == role
        {
            let ready_expected = role == "active" || role == "standby";
            if !ready_expected || status == 200 {
                return started.elapsed();
            }
        }
        assert!(
            started.elapsed() < within,
            "port {port} never reported role {role}: {:?}",
            readyz(port).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d5_one_active_replica_the_standby_takes_over_within_10s_and_sigterm_drains_and_exits_0() {
    daemon_client::install_crypto_provider();
    let db = support::FreshDb::create("cb_d5").await;
    let dir = tempfile::tempdir().expect("tmp");
    let (port_a, port_b) = (free_port(), free_port());

    let mut a = replica(&db.url, port_a, dir.path(), "a");
    wait_role(port_a, "active", Duration::from_secs(30)).await;
    let mut b = replica(&db.url, port_b, dir.path(), "b");
    wait_role(port_b, "standby", Duration::from_secs(30)).await;
    let (status, body) = readyz(port_b).await.expect("readyz");
    assert_eq!(status, 200, "a standby that can take over is ready: {body}");
    assert_eq!(
        body["daemon"],
        Value::Null,
        "a standby holds no daemon connection"
    );
    // Still exactly one active after several retry intervals.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(readyz(port_a).await.expect("a").1["role"], "active");
    assert_eq!(readyz(port_b).await.expect("b").1["role"], "standby");
    // The standby serves the history API meanwhile.
    let list = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port_b}/api/v1/conversations"))
        .bearer_auth("api-token")
        .send()
        .await
        .expect("api");
    assert_eq!(list.status(), 200);

    a.kill().expect("SIGKILL the active replica");
    let _ = a.wait();
    let took = wait_role(port_b, "active", Duration::from_secs(10)).await;
    assert!(took < Duration::from_secs(10), "took over in {took:?}");
    let (status, body) = readyz(port_b).await.expect("readyz");
    assert_eq!(
        (status, body["daemon"].clone()),
        (200, Value::Bool(true)),
        "{body}"
    );

    // The new active replica serves.
    let mut stdin = b.stdin.take().expect("stdin");
    writeln!(stdin, "echo from the survivor").expect("write");
    let mut out = BufReader::new(b.stdout.take().expect("stdout"));
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).expect("read") > 0,
            "exited: {seen}"
        );
        seen.push_str(&line);
        if line.starts_with("✅ echo from the survivor") {
            break;
        }
        assert!(Instant::now() < deadline, "no result: {seen}");
    }

    // SIGTERM: readiness goes, the process drains and exits 0 (stdin still open: the signal ends it).
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(b.id()).expect("pid")),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let started = Instant::now();
    let status = loop {
        if let Some(s) = b.try_wait().expect("wait") {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "did not exit after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "exit status after SIGTERM: {status:?}");
    drop(stdin);
    db.drop_now().await;
}
