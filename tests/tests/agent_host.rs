//! `chat-bridge agent-host` with a scripted stdio agent (`tests/scripts/echo_agent.py`): its
//! listener's trust rules (S1: bearer token, no weak token, loopback unless a token is given), one
//! child shared by several clients whose request ids collide, each getting only its own session's
//! events, and a child that exits mid-turn: the call is answered with the exit, the client
//! reconnects and the restarted child serves the next prompt.

use std::time::Duration;

use chat_bridge_tests::init_tracing;
use daemon_client::{AgentCommand, ClientConfig, DaemonClient, DaemonEvent, Error, EventStream};
use shell_agent::host::Mode;
use shell_agent::{AgentHost, HostError};

const TOKEN: &str = "a-long-enough-test-token";

fn echo_agent(pidfile: Option<&std::path::Path>) -> AgentCommand {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/echo_agent.py");
    let mut c =
        AgentCommand::new(vec!["python3".into(), script.display().to_string()]).expect("argv");
    if let Some(p) = pidfile {
        c.env
            .push(("ECHO_AGENT_PIDFILE".into(), p.display().to_string()));
    }
    c
}

async fn host() -> AgentHost {
    AgentHost::start(
        "127.0.0.1:0".parse().expect("addr"),
        Some(TOKEN.into()),
        echo_agent(None),
    )
    .await
    .expect("starts")
}

fn client_config(host: &AgentHost) -> ClientConfig {
    let mut cfg = ClientConfig::new(host.url()).with_token(TOKEN);
    cfg.backoff_base = Duration::from_millis(20);
    cfg.backoff_cap = Duration::from_millis(200);
    cfg
}

async fn text_of(events: &mut EventStream) -> String {
    loop {
        let e = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("an event")
            .expect("open");
        if let DaemonEvent::AgentText { text, .. } = e {
            return text;
        }
    }
}

#[tokio::test]
async fn s1_agent_host_refuses_a_weak_token_and_a_public_address_without_one() {
    for weak in ["", "   ", "short-token"] {
        let e = AgentHost::start(
            "127.0.0.1:0".parse().expect("addr"),
            Some(weak.into()),
            echo_agent(None),
        )
        .await
        .expect_err("a weak token");
        assert!(matches!(e, HostError::WeakToken), "{e}");
        assert!(
            !e.to_string().contains("short-token"),
            "the token is not echoed"
        );
    }
    let e = AgentHost::start("0.0.0.0:0".parse().expect("addr"), None, echo_agent(None))
        .await
        .expect_err("public without a token");
    assert!(matches!(e, HostError::TokenRequired(_)), "{e}");
    let missing = AgentCommand::new(vec!["/nonexistent/agent".into()]).expect("argv");
    let e = AgentHost::start(
        "127.0.0.1:0".parse().expect("addr"),
        Some(TOKEN.into()),
        missing,
    )
    .await
    .expect_err("a command that cannot start");
    assert!(e.to_string().contains("cannot start the agent"), "{e}");
}

#[tokio::test]
async fn s1_agent_host_refuses_a_wrong_token() {
    init_tracing();
    let host = host().await;
    let cfg = ClientConfig::new(host.url()).with_token("the-wrong-token-entirely");
    let e = DaemonClient::connect(cfg).await.expect_err("refused");
    assert!(matches!(e, Error::Unauthorized { status: 401, .. }), "{e}");
    host.shutdown().await;
}

#[tokio::test]
async fn one_child_serves_two_clients_whose_ids_collide_each_with_only_its_own_events() {
    init_tracing();
    let host = host().await;
    let (a, info, mut a_events) = DaemonClient::connect(client_config(&host))
        .await
        .expect("a");
    assert!(info.load_session);
    let (b, _, mut b_events) = DaemonClient::connect(client_config(&host))
        .await
        .expect("b");
    let sa = a.new_session("/tmp").await.expect("a's session").session;
    let sb = b.new_session("/tmp").await.expect("b's session").session;
    assert_ne!(sa, sb, "one child, two sessions");
    let (ra, rb) = tokio::join!(a.prompt(&sa, "from a"), b.prompt(&sb, "from b"));
    ra.expect("a's prompt");
    rb.expect("b's prompt");
    assert_eq!(text_of(&mut a_events).await, "from a");
    assert_eq!(text_of(&mut b_events).await, "from b");
    a.close();
    b.close();
    host.shutdown().await;
}

#[tokio::test]
async fn a_child_that_exits_mid_turn_fails_the_call_and_the_restarted_child_serves_the_next() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tmp");
    let pidfile = dir.path().join("pids");
    let host = AgentHost::start(
        "127.0.0.1:0".parse().expect("addr"),
        Some(TOKEN.into()),
        echo_agent(Some(&pidfile)),
    )
    .await
    .expect("starts");
    let (client, _, mut events) = DaemonClient::connect(client_config(&host))
        .await
        .expect("connect");
    let s = client.new_session("/tmp").await.expect("session").session;
    let e = client
        .prompt(&s, "exit")
        .await
        .expect_err("the child exited");
    // Item 8 of the issue-18 review: an agent-exited error, not a plain RPC error, so the bridge
    // closes the turn's tool messages as interrupted as it does for its own child.
    assert!(
        matches!(&e, Error::AgentExited { reason } if reason.contains("exit status: 7")),
        "the call names the exit: {e:?}"
    );
    // The host closed the connection: the client reconnects to the restarted child.
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("reconnects")
            .expect("open");
        if matches!(ev, DaemonEvent::Reconnected { .. }) {
            break;
        }
    }
    assert!(
        !client.is_bound(&s),
        "the session must be loaded again (L6)"
    );
    // The new child does not know s1; the bridge opens a new session, as it would.
    let s2 = client
        .new_session("/tmp")
        .await
        .expect("a new session")
        .session;
    client
        .prompt(&s2, "again")
        .await
        .expect("the next prompt runs");
    assert_eq!(text_of(&mut events).await, "again");
    client.close();
    host.shutdown().await;
    let pids: Vec<i32> = std::fs::read_to_string(&pidfile)
        .expect("pids")
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect();
    assert_eq!(pids.len(), 2, "started twice: {pids:?}");
    for pid in pids {
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z'))
            });
        assert!(!alive, "agent {pid} outlived agent-host");
    }
}

async fn turn_complete_of(events: &mut EventStream, session: &daemon_client::SessionId) {
    loop {
        let e = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("the turn's end reaches the client that loaded the session")
            .expect("open");
        // A turn that ended before the load comes with the load's replay (marked as such; the
        // resumed turn takes it as its own end, D6), one that ends after it live.
        let e = match e {
            DaemonEvent::Replayed { event, .. } => *event,
            e => e,
        };
        if let DaemonEvent::Other {
            session: Some(s),
            kind: Some(k),
            ..
        } = &e
            && s == session
            && k == "turn_complete"
        {
            return;
        }
    }
}

/// D3/L6 through agent-host (issue 18 review, item 1): a bridge restarted while its turn runs
/// loads the session on a new connection; the `session/prompt` answer, whose connection is gone,
/// must still end the turn there — both when the turn ends after the load and before it.
#[tokio::test]
async fn d3_a_turn_whose_client_left_ends_for_the_client_that_loaded_its_session() {
    init_tracing();
    let host = host().await;
    for (prompt, load_after) in [
        ("sleep 1", Duration::ZERO),
        ("sleep 0.2", Duration::from_secs(1)),
    ] {
        let (a, _, _a_events) = DaemonClient::connect(client_config(&host))
            .await
            .expect("a");
        let s = a.new_session("/tmp").await.expect("session").session;
        let running = {
            let (a, s) = (a.clone(), s.clone());
            tokio::spawn(async move { a.prompt(&s, prompt).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        // The bridge stops: its connection closes with the prompt in flight.
        a.close();
        running.abort();
        tokio::time::sleep(load_after).await;
        let (b, _, mut b_events) = DaemonClient::connect(client_config(&host))
            .await
            .expect("b");
        b.load_session(&s, "/tmp").await.expect("the session loads");
        turn_complete_of(&mut b_events, &s).await;
        b.close();
    }
    host.shutdown().await;
}

fn alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
}

fn pids_in(file: &std::path::Path) -> Vec<i32> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect()
}

#[tokio::test]
async fn per_session_gives_each_session_its_own_child_reaps_idle_ones_and_reloads_on_the_next_message()
 {
    init_tracing();
    let dir = tempfile::tempdir().expect("tmp");
    let pidfile = dir.path().join("pids");
    let host = AgentHost::start_with(
        "127.0.0.1:0".parse().expect("addr"),
        Some(TOKEN.into()),
        echo_agent(Some(&pidfile)),
        Mode::PerSession {
            idle: Duration::from_millis(400),
        },
    )
    .await
    .expect("starts");
    let (client, info, mut events) = DaemonClient::connect(client_config(&host))
        .await
        .expect("connect");
    assert!(info.load_session, "the agent's capabilities pass through");
    let sa = client.new_session("/tmp").await.expect("a").session;
    let sb = client.new_session("/tmp").await.expect("b").session;
    let pid_of = |s: &daemon_client::SessionId| -> String {
        s.as_str().split('-').next().unwrap_or_default().to_owned()
    };
    assert_ne!(
        pid_of(&sa),
        pid_of(&sb),
        "two sessions, two agent processes: {sa} {sb}"
    );
    client.prompt(&sa, "one").await.expect("a's prompt");
    assert_eq!(text_of(&mut events).await, "one");
    // Idle children are ended, none left running.
    let mut reaped = false;
    for _ in 0..100 {
        if pids_in(&pidfile).into_iter().all(|p| !alive(p)) {
            reaped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(reaped, "idle children were reaped: {:?}", pids_in(&pidfile));
    let before = pids_in(&pidfile).len();
    // The next message starts a child again, which loads the session behind the client's back.
    client.prompt(&sa, "two").await.expect("a's next prompt");
    assert_eq!(text_of(&mut events).await, "two");
    assert_eq!(
        pids_in(&pidfile).len(),
        before + 1,
        "one new child for the session"
    );
    client.close();
    host.shutdown().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let left: Vec<i32> = pids_in(&pidfile)
        .into_iter()
        .filter(|p| alive(*p))
        .collect();
    assert!(left.is_empty(), "children outlived agent-host: {left:?}");
}

async fn closed_within(mut tcp: tokio::net::TcpStream, limit: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(limit, tcp.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// Issue 18 review, item 4: a socket that never completes the handshake is closed after the
/// handshake limit, and connections beyond the limit are closed at once (no fd exhaustion).
#[tokio::test]
async fn s_agent_host_closes_idle_handshakes_and_connections_over_the_limit() {
    init_tracing();
    let limits = shell_agent::host::Limits {
        handshake: Duration::from_millis(300),
        max_connections: 2,
        ..Default::default()
    };
    let host = AgentHost::start_limited(
        "127.0.0.1:0".parse().expect("addr"),
        Some(TOKEN.into()),
        echo_agent(None),
        Mode::Shared,
        limits,
    )
    .await
    .expect("starts");
    let a = tokio::net::TcpStream::connect(host.addr())
        .await
        .expect("a");
    let b = tokio::net::TcpStream::connect(host.addr())
        .await
        .expect("b");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let c = tokio::net::TcpStream::connect(host.addr())
        .await
        .expect("c");
    assert!(
        closed_within(c, Duration::from_millis(200)).await,
        "a third connection is closed at once"
    );
    assert!(
        closed_within(a, Duration::from_secs(3)).await,
        "an idle socket is closed after the handshake limit"
    );
    assert!(closed_within(b, Duration::from_secs(3)).await);
    // The slots are free again: a real client gets in.
    let (client, _, _events) = DaemonClient::connect(client_config(&host))
        .await
        .expect("a client after the idle ones left");
    client.close();
    host.shutdown().await;
}

/// Issue 18 review, items 5 and 12: requests beyond a connection's in-flight limit are answered
/// with an error and not passed to the shared agent; JSON that is no request gets an error reply.
#[tokio::test]
async fn s_agent_host_caps_requests_in_flight_per_connection_and_answers_non_requests() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    init_tracing();
    let limits = shell_agent::host::Limits {
        max_in_flight: 2,
        ..Default::default()
    };
    let host = AgentHost::start_limited(
        "127.0.0.1:0".parse().expect("addr"),
        Some(TOKEN.into()),
        echo_agent(None),
        Mode::Shared,
        limits,
    )
    .await
    .expect("starts");
    let mut req = host.url().into_client_request().expect("request");
    req.headers_mut().insert(
        "authorization",
        format!("Bearer {TOKEN}").parse().expect("header"),
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.expect("ws");
    for id in 1..=4 {
        let prompt = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
            "params": {"sessionId": "s0-1", "prompt": [{"type": "text", "text": "sleep 0.5"}]}});
        ws.send(Message::text(prompt.to_string()))
            .await
            .expect("send");
    }
    ws.send(Message::text("42")).await.expect("send");
    let mut refused = Vec::new();
    let mut answered = Vec::new();
    let mut invalid = 0;
    while answered.len() < 2 {
        let frame = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("a frame")
            .expect("open")
            .expect("ok");
        let Message::Text(text) = frame else { continue };
        let v: serde_json::Value = serde_json::from_str(&text).expect("json");
        match (
            v.get("id").and_then(serde_json::Value::as_i64),
            v.get("error"),
        ) {
            (Some(id), Some(e)) => {
                assert_eq!(e["code"], -32000, "{v}");
                refused.push(id);
            }
            (Some(id), None) if v.get("result").is_some() => answered.push(id),
            (None, Some(e)) if v.get("method").is_none() => {
                assert_eq!(e["code"], -32600, "{v}");
                invalid += 1;
            }
            _ => {}
        }
    }
    refused.sort_unstable();
    answered.sort_unstable();
    assert_eq!(refused, vec![3, 4], "beyond the limit, refused at once");
    assert_eq!(answered, vec![1, 2], "within it, passed to the agent");
    assert_eq!(invalid, 1, "a bare 42 gets an invalid-request reply");
    let _ = ws.close(None).await;
    host.shutdown().await;
}
