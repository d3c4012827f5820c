//! `chat-bridge` as a user runs it: no configuration (the embedded default: built-in shell agent,
//! console, SQLite), a scripted stdin, exit 0 after the last turn — then `history` reads it back.

use std::io::Write;
use std::process::{Command, Stdio};

mod binary;

fn bridge(dir: &std::path::Path, args: &[&str]) -> Command {
    let mut c = binary::command(dir, &[]);
    c.args(args);
    c
}

#[test]
fn the_embedded_default_runs_a_scripted_console_session_and_history_reads_it_back() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut child = bridge(dir.path(), &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(
            b"/help\necho hello from the console\ntimeout=1s echo partial; sleep 30\n/history\n",
        )
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit 0 once stdin closed and the last turn finished:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("✅ echo hello from the console"),
        "{stdout}"
    );
    assert!(stdout.contains("    │ hello from the console"), "{stdout}");
    assert!(
        stdout.contains("ERROR ⏱ echo partial; sleep 30 — timed out"),
        "{stdout}"
    );
    assert!(stdout.contains("    │ partial"), "{stdout}");
    assert!(
        dir.path().join("chat-bridge.db").exists(),
        "SQLite in the working directory"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("turn started") && stderr.contains("turn ended"),
        "the default log level (info) shows the bridge's own lines: {stderr}"
    );
    assert!(
        !stderr.contains("hello from the console"),
        "logs never carry prompt text or output (R4): {stderr}"
    );

    let list = bridge(dir.path(), &["history", "list", "--json"])
        .output()
        .expect("list");
    assert!(
        list.status.success(),
        "{}",
        String::from_utf8_lossy(&list.stderr)
    );
    let page: serde_json::Value = serde_json::from_slice(&list.stdout).expect("json");
    let conv = page["items"][0]["id"]
        .as_str()
        .expect("a conversation")
        .to_owned();
    assert_eq!(page["items"][0]["platform"], "console");
    assert_eq!(
        page["items"][0]["title"], "echo hello from the console",
        "a thread opened with /help is titled by its first prompt"
    );
    let count = |args: &[&str]| -> usize {
        let out = bridge(dir.path(), args).output().expect("list");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let page: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        page["items"].as_array().map_or(0, Vec::len)
    };
    assert_eq!(count(&["history", "list", "--json", "--since", "1h"]), 1);
    // The table names each conversation's project (issue 17).
    let table = bridge(dir.path(), &["history", "list"])
        .output()
        .expect("history list");
    let table = String::from_utf8_lossy(&table.stdout);
    let mut lines = table.lines();
    assert!(
        lines
            .next()
            .is_some_and(|h| h.contains("PLATFORM  PROJECT")),
        "{table}"
    );
    assert!(
        lines
            .next()
            .is_some_and(|row| row.split_whitespace().nth(2) == Some("default")),
        "{table}"
    );
    assert_eq!(
        count(&["history", "list", "--json", "--until", "2000-01-01"]),
        0
    );
    let bad = bridge(dir.path(), &["history", "list", "--since", "yesterday"])
        .output()
        .expect("bad since");
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("24h"),
        "says which forms it takes"
    );

    let show = bridge(dir.path(), &["history", "show", &conv])
        .output()
        .expect("show");
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(
        text.contains("prompt") && text.contains("tool_finished"),
        "{text}"
    );
    let detail: serde_json::Value = serde_json::from_slice(
        &bridge(dir.path(), &["history", "show", &conv, "--json"])
            .output()
            .expect("show")
            .stdout,
    )
    .expect("json");
    let timed_out = detail["tool_calls"]
        .as_array()
        .expect("calls")
        .iter()
        .find(|c| c["status"] == "timed_out")
        .expect("timed out call");
    let call_id = timed_out["id"].as_str().expect("id");
    let one = bridge(dir.path(), &["history", "show", call_id])
        .output()
        .expect("show call");
    let one = String::from_utf8_lossy(&one.stdout);
    assert!(
        one.contains("timed_out") && one.contains("--- output ---\npartial"),
        "{one}"
    );
    assert!(
        one.contains("exit code: ") && !one.contains("Some("),
        "numbers for people, not Rust's Option: {one}"
    );

    let found = bridge(dir.path(), &["history", "search", "HELLO FROM"])
        .output()
        .expect("search");
    assert!(
        String::from_utf8_lossy(&found.stdout).contains(&conv),
        "{}",
        String::from_utf8_lossy(&found.stdout)
    );
}

#[test]
fn an_explicit_platform_without_its_token_is_a_clear_error_and_check_config_never_prints_secrets() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = bridge(dir.path(), &[])
        .env("CHAT_BRIDGE_SERVICE__PLATFORM", "discord")
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert!(!out.status.success(), "no console fallback in a deployment");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("CHAT_BRIDGE_DISCORD__TOKEN is not set"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = bridge(dir.path(), &["check-config"])
        .env("CHAT_BRIDGE_SERVICE__PLATFORM", "slack")
        .env("CHAT_BRIDGE_SLACK__BOT_TOKEN", "xoxb-very-secret")
        .env("CHAT_BRIDGE_SLACK__APP_TOKEN", "xapp-very-secret")
        .env("CHAT_BRIDGE_SLACK__ALLOWED_USERS", "[\"U1\"]")
        .env(
            "CHAT_BRIDGE_DATABASE__URL",
            "postgres://bridge:hunter2@db/chat",
        )
        .output()
        .expect("check-config");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("platform slack"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("xoxb-very-secret")
            && !stdout.contains("xapp-very-secret")
            && !stdout.contains("hunter2"),
        "{stdout}"
    );
    let out = bridge(dir.path(), &["check-config"])
        .env("CHAT_BRIDGE_LIVENESS__ONSTALL", "cancel")
        .output()
        .expect("check-config");
    assert!(!out.status.success(), "a misspelt key is refused");
}

#[test]
fn issue17_check_config_names_every_platform_served_and_a_listed_one_without_its_token() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = bridge(dir.path(), &["check-config"])
        .env("CHAT_BRIDGE_SERVICE__PLATFORMS", "[\"slack\", \"discord\"]")
        .env("CHAT_BRIDGE_SLACK__BOT_TOKEN", "xoxb-very-secret")
        .env("CHAT_BRIDGE_SLACK__APP_TOKEN", "xapp-very-secret")
        .env("CHAT_BRIDGE_SLACK__ALLOWED_USERS", "[\"U1\"]")
        .env("CHAT_BRIDGE_DISCORD__TOKEN", "discord-very-secret")
        .env("CHAT_BRIDGE_DISCORD__ALLOWED_USERS", "[\"501\"]")
        .output()
        .expect("check-config");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("platforms slack, discord"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains("very-secret"), "{stdout}");
    let out = bridge(dir.path(), &["check-config"])
        .env("CHAT_BRIDGE_SERVICE__PLATFORMS", "[\"slack\", \"discord\"]")
        .env("CHAT_BRIDGE_SLACK__BOT_TOKEN", "xoxb-very-secret")
        .env("CHAT_BRIDGE_SLACK__APP_TOKEN", "xapp-very-secret")
        .env("CHAT_BRIDGE_SLACK__ALLOWED_USERS", "[\"U1\"]")
        .output()
        .expect("check-config");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains(
                "service.platforms lists discord but CHAT_BRIDGE_DISCORD__TOKEN is not set"
            ),
        "{stderr}"
    );
}

/// A plain HTTP/1.1 GET over a std socket: status and body.
fn http_get(port: u16, path: &str, token: Option<&str>) -> (u16, String) {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n"
    )
    .expect("send");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read");
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[test]
fn the_embedded_default_with_only_http_listen_and_api_token_serves_health_readiness_metrics_and_the_api()
 {
    let dir = tempfile::tempdir().expect("tmp");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let mut child = bridge(dir.path(), &[])
        .env("CHAT_BRIDGE_HTTP__LISTEN", format!("127.0.0.1:{port}"))
        .env("CHAT_BRIDGE_HTTP__API_TOKEN", "only-these-two")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start");
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(stdin, "echo served").expect("write");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let ready = std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            && http_get(port, "/api/v1/conversations", Some("only-these-two"))
                .1
                .contains("echo served");
        if ready {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the session never showed up in the API"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(http_get(port, "/healthz", None), (200, "ok".to_owned()));
    let (status, body) = http_get(port, "/readyz", None);
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("\"role\":\"active\"") && body.contains("\"platform\":\"console\""),
        "{body}"
    );
    // The conversation is listed as soon as the prompt is recorded; the tool
    // result is counted when the command finishes, a moment later.
    loop {
        let (status, body) = http_get(port, "/metrics", None);
        assert_eq!(status, 200, "{body}");
        if body.contains("chatbridge_tool_results_total{outcome=\"completed\"} 1") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the tool result was never counted:\n{body}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(http_get(port, "/api/v1/conversations", None).0, 401);
    let (status, body) = http_get(port, "/api/v1/openapi.json", None);
    assert!(status == 200 && body.contains("\"openapi\""), "{status}");
    drop(stdin);
    assert!(child.wait().expect("wait").success());
}

#[test]
fn s4_invalid_utf8_typed_at_the_console_loses_no_line_and_escapes_are_shown_not_obeyed() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = binary::piped(
        &mut bridge(dir.path(), &[]),
        b"echo ok1\necho \xffbad\nprintf 'x\\033]0;TITLE\\007y'\necho ok2\n",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "a byte that is not UTF-8 is no reason to stop:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in ["    │ ok1", "    │ \u{fffd}bad", "    │ ok2"] {
        assert!(stdout.contains(line), "{line:?} in:\n{stdout}");
    }
    assert!(
        stdout.contains("x␛]0;TITLE␇y"),
        "the escape is shown:\n{stdout}"
    );
    assert!(
        !out.stdout.contains(&0x1b) && !out.stdout.contains(&0x07),
        "no raw ESC or BEL reaches the terminal"
    );
}

/// Issue 17: `history list --project` shows one project's conversations; the console's own run
/// (the one-project configuration) is in the `default` project.
#[test]
fn history_list_filters_by_project() {
    use chat_bridge::store::conversations::{self, Key};
    let dir = tempfile::tempdir().expect("tmp");
    let url = format!("sqlite://{}", dir.path().join("chat-bridge.db").display());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let ids: Vec<String> = rt.block_on(async {
        let store = chat_bridge::store::Store::open(&url).await.expect("store");
        let mut c = store.conn().await.expect("conn");
        let mut ids = Vec::new();
        for (i, project) in ["api", "web", "api"].iter().enumerate() {
            let thread = i.to_string();
            let k = Key {
                platform: "slack",
                workspace: "T",
                channel: "C1",
                thread: &thread,
            };
            let (conv, _) =
                conversations::find_or_create_in(&mut c, &k, project, "U1", "t", 1000 + i as i64)
                    .await
                    .expect("conv");
            ids.push(conv.id);
        }
        drop(c);
        store.close().await;
        ids
    });
    let listed = |project: &str| -> Vec<(String, String)> {
        let out = bridge(
            dir.path(),
            &["history", "list", "--json", "--project", project],
        )
        .output()
        .expect("list");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let page: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        page["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| {
                (
                    i["id"].as_str().expect("id").to_owned(),
                    i["project"].as_str().expect("project").to_owned(),
                )
            })
            .collect()
    };
    assert_eq!(
        listed("api"),
        [
            (ids[2].clone(), "api".to_owned()),
            (ids[0].clone(), "api".to_owned())
        ]
    );
    assert_eq!(listed("web"), [(ids[1].clone(), "web".to_owned())]);
    assert!(listed("default").is_empty());
}

/// Issue 17: a project's daemon gets `[daemon]`'s checks — check-config refuses a `command` whose
/// program is not there and a `cwd` that is no directory, naming the project's key.
#[test]
fn issue17_check_config_checks_every_projects_daemon_like_daemon() {
    let dir = tempfile::tempdir().expect("tmp");
    let cwd = dir.path().display().to_string();
    let write = |daemon: &str| {
        let path = dir.path().join("projects.toml");
        std::fs::write(
            &path,
            format!(
                "[service]\nplatforms = [\"console\"]\n[[projects]]\nname = \"alpha\"\nchannels = [\"console\"]\n[projects.daemon]\n{daemon}\n"
            ),
        )
        .expect("write");
        path.display().to_string()
    };
    let ok = write(&format!("cwd = {cwd:?}"));
    let out = bridge(dir.path(), &["check-config", "--config", &ok])
        .output()
        .expect("check-config");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (daemon, says) in [
        (
            format!("command = [\"/nonexistent/agent\"]\ncwd = {cwd:?}"),
            "projects[0].daemon.command",
        ),
        (
            "cwd = \"/nonexistent/dir\"".to_owned(),
            "projects[0].daemon.cwd /nonexistent/dir is not a directory",
        ),
    ] {
        let path = write(&daemon);
        let out = bridge(dir.path(), &["check-config", "--config", &path])
            .output()
            .expect("check-config");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{daemon}: {err}"
        );
        // Start-up refuses the same.
        let out = bridge(dir.path(), &["--config", &path])
            .stdin(Stdio::null())
            .output()
            .expect("run");
        assert!(
            !out.status.success(),
            "{daemon}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// An outside tester's finding: with approvals on and the console's input piped, the input ending
/// while an approval waits kept the bridge up until the approval expired (10 minutes) — nobody was
/// left to answer. Each approval waiting when the input ends, or asked after it (a prompt that was
/// queued), is closed as not answered, its command not run, and the bridge exits.
#[test]
fn approvals_waiting_when_the_console_input_ends_are_closed_unanswered_and_the_bridge_exits() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().expect("tmp");
    let mut child = binary::command(
        dir.path(),
        &[
            ("CHAT_BRIDGE_SHELL_AGENT__REQUIRE_APPROVAL", "true"),
            ("CHAT_BRIDGE_APPROVALS__TIMEOUT", "5m"),
        ],
    )
    .stdin(std::process::Stdio::piped())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::null())
    .spawn()
    .expect("start chat-bridge");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"echo ran-one\necho ran-two\n")
        .expect("write");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let mut out = String::new();
            let _ = child
                .stdout
                .take()
                .expect("stdout")
                .read_to_string(&mut out);
            panic!(
                "still waiting for an approval nobody can give 60 s after the input ended:\n{out}"
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut out = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut out)
        .expect("read");
    assert!(status.success(), "{out}");
    assert_eq!(
        out.matches("Not answered").count(),
        2,
        "both approvals closed unanswered:\n{out}"
    );
    assert!(
        !out.contains("│ ran-one") && !out.contains("│ ran-two"),
        "neither command ran:\n{out}"
    );
}
