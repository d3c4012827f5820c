//! The trust rules of configuration and logging (S1–S3, A1), on the real binary: what start-up
//! refuses and how it says so, what `check-config` says about the same settings, and what a trace
//! log holds.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Output, Stdio};

mod binary;

/// `chat-bridge` in `dir` with none of the caller's `CHAT_BRIDGE_*` variables.
fn bridge(dir: &std::path::Path, args: &[&str], vars: &[(&str, &str)]) -> Command {
    let mut c = binary::command(dir, vars);
    c.args(args);
    c
}

/// Runs it to the end with stdin closed.
fn run(dir: &std::path::Path, args: &[&str], vars: &[(&str, &str)]) -> Output {
    bridge(dir, args, vars)
        .stdin(Stdio::null())
        .output()
        .expect("run chat-bridge")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// A child process ended (SIGTERM, then reaped) however the test ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.0.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let _ = self.0.wait();
    }
}

#[test]
fn s1_empty_signing_secret_is_a_startup_error_naming_its_key() {
    let dir = tempfile::tempdir().expect("tmp");
    let slack_port = closed_port();
    let listen = format!("127.0.0.1:{slack_port}");
    let api = format!("http://127.0.0.1:{}", closed_port());
    for secret in ["", "   "] {
        let out = run(
            dir.path(),
            &[],
            &[
                ("CHAT_BRIDGE_SLACK__BOT_TOKEN", "xoxb-test"),
                ("CHAT_BRIDGE_SLACK__MODE", "http"),
                ("CHAT_BRIDGE_SLACK__LISTEN", &listen),
                ("CHAT_BRIDGE_SLACK__API_BASE_URL", &api),
                ("CHAT_BRIDGE_SLACK__ALLOWED_USERS", "[\"U1\"]"),
                ("CHAT_BRIDGE_SLACK__SIGNING_SECRET", secret),
            ],
        );
        let err = stderr(&out);
        assert!(
            !out.status.success(),
            "started with an empty signing secret"
        );
        assert!(
            err.contains("CHAT_BRIDGE_SLACK__SIGNING_SECRET is set but empty"),
            "names the variable: {err}"
        );
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", slack_port)).is_err(),
            "nothing listens for Slack's requests"
        );
    }
    let out = run(
        dir.path(),
        &["check-config"],
        &[
            ("CHAT_BRIDGE_SLACK__BOT_TOKEN", "xoxb-test"),
            ("CHAT_BRIDGE_SLACK__MODE", "http"),
            ("CHAT_BRIDGE_SLACK__ALLOWED_USERS", "[\"U1\"]"),
            ("CHAT_BRIDGE_SLACK__SIGNING_SECRET", "short-sekrit"),
        ],
    );
    let err = stderr(&out);
    assert!(
        !out.status.success()
            && err.contains("CHAT_BRIDGE_SLACK__SIGNING_SECRET is shorter than 16 bytes")
            && !err.contains("short-sekrit"),
        "{err}"
    );
}

#[test]
fn s3_check_config_refuses_what_startup_refuses() {
    let dir = tempfile::tempdir().expect("tmp");
    let slack: &[(&str, &str)] = &[
        ("CHAT_BRIDGE_SLACK__BOT_TOKEN", "xoxb-test"),
        ("CHAT_BRIDGE_SLACK__APP_TOKEN", "xapp-test"),
        ("CHAT_BRIDGE_SLACK__ALLOWED_USERS", "[\"U1\"]"),
        // Never reached: every case is refused before anything connects.
        ("CHAT_BRIDGE_SLACK__API_BASE_URL", "http://127.0.0.1:9"),
    ];
    let cases: [(&[(&str, &str)], &str); 9] = [
        (&[("CHAT_BRIDGE_SLACK__MODE", "htp")], "slack.mode"),
        (&[("CHAT_BRIDGE_HTTP__LISTEN", "0.0.0.0")], "http.listen"),
        (
            &[("CHAT_BRIDGE_REDACT__PATTERNS", "[\"(unclosed\"]")],
            "redact.patterns[0]",
        ),
        (
            &[("CHAT_BRIDGE_DATABASE__URL", "mysql://u:hunter2@db/x")],
            "database.url",
        ),
        (
            &[("CHAT_BRIDGE_DAEMON__URL", "http://daemon:4000/acp")],
            "daemon.url",
        ),
        (
            &[("CHAT_BRIDGE_DAEMON__TOKEN", "")],
            "CHAT_BRIDGE_DAEMON__TOKEN is set but empty",
        ),
        (
            &[("CHAT_BRIDGE_SLACK__ALLOWED_USERS", "[]")],
            "CHAT_BRIDGE_ACCESS__OPEN=true",
        ),
        (
            &[("CHAT_BRIDGE_SLACK_ALLOWED_USERS", "[\"U2\"]")],
            "did you mean CHAT_BRIDGE_SLACK__ALLOWED_USERS?",
        ),
        (
            &[("CHAT_BRIDGE_SERVICE__PLATFORM", "irc")],
            "service.platform",
        ),
    ];
    for (extra, says) in cases {
        let vars: Vec<(&str, &str)> = slack.iter().chain(extra).copied().collect();
        let check = run(dir.path(), &["check-config"], &vars);
        let start = run(dir.path(), &[], &vars);
        assert!(
            !check.status.success() && !start.status.success(),
            "{says}: check-config {:?}, start-up {:?}",
            check.status,
            start.status
        );
        assert!(stderr(&check).contains(says), "{says}: {}", stderr(&check));
        assert_eq!(
            stderr(&check),
            stderr(&start),
            "check-config and start-up say the same"
        );
        assert!(!stderr(&check).contains("hunter2"), "{}", stderr(&check));
    }
    // And what start-up would accept, check-config accepts.
    let out = run(dir.path(), &["check-config"], slack);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn s2_config_error_never_echoes_a_secret() {
    let dir = tempfile::tempdir().expect("tmp");
    // A numeric-looking secret is a string, not a type error that prints it back.
    let out = run(
        dir.path(),
        &["check-config"],
        &[("CHAT_BRIDGE_DAEMON__TOKEN", "424242")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("424242"));
    // Next to invalid settings, errors name keys, never secret values or URL passwords.
    let out = run(
        dir.path(),
        &["check-config"],
        &[
            ("CHAT_BRIDGE_DAEMON__TOKEN", "424242"),
            ("CHAT_BRIDGE_HTTP__API_TOKEN", "api-424242"),
            (
                "CHAT_BRIDGE_DAEMON__URL",
                "http://agent:pass/424242@daemon/acp",
            ),
            ("CHAT_BRIDGE_DATABASE__URL", "mysql://u:p@ss/424242@db/x?x"),
        ],
    );
    let err = stderr(&out);
    assert!(!out.status.success() && !err.is_empty(), "{err}");
    assert!(!err.contains("424242"), "{err}");
    let out = run(
        dir.path(),
        &["check-config"],
        &[
            ("CHAT_BRIDGE_DAEMON__TOKEN", "424242"),
            (
                "CHAT_BRIDGE_DAEMON__URL",
                "ws://agent:pass/424242@daemon/acp",
            ),
            ("CHAT_BRIDGE_DATABASE__URL", "postgres://u:p@ss/424242@db/x"),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !stdout.contains("424242")
            && stdout.contains("ws://agent:***@daemon/acp")
            && stdout.contains("postgres://u:***@db/x"),
        "{stdout}"
    );
}

#[test]
fn s2_trace_logs_never_carry_the_daemon_token() {
    const TOKEN: &str = "daemon-token-must-not-leak-4242";
    // Directives that ask for everything, the handshake above all: the cap holds anyway.
    const LOG: &str = "trace,tungstenite=trace,tungstenite::handshake::client=trace,tokio_tungstenite=trace,hyper=trace";
    let dir = tempfile::tempdir().expect("tmp");
    let agent = bridge(
        dir.path(),
        &["shell-agent", "--listen", "127.0.0.1:0", "--token", TOKEN],
        &[("CHAT_BRIDGE_LOG", LOG)],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("start the shell agent");
    let mut agent = KillOnDrop(agent);
    // Read its log as it is written: a full pipe would stall the agent mid-command.
    let mut agent_stderr = agent.0.stderr.take().expect("stderr");
    let agent_log = std::thread::spawn(move || {
        let mut log = String::new();
        let _ = agent_stderr.read_to_string(&mut log);
        log
    });
    let mut lines = BufReader::new(agent.0.stdout.take().expect("stdout")).lines();
    let url = lines
        .next()
        .expect("a line")
        .expect("utf8")
        .strip_prefix("shell-agent listening on ")
        .expect("the URL line")
        .to_owned();
    let out = binary::piped(
        &mut bridge(
            dir.path(),
            &["--daemon-url", &url],
            &[
                ("CHAT_BRIDGE_DAEMON__TOKEN", TOKEN),
                ("CHAT_BRIDGE_LOG", LOG),
            ],
        ),
        b"echo traced-run\n",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let err = stderr(&out);
    assert!(out.status.success(), "{stdout}\n{err}");
    assert!(stdout.contains("traced-run"), "the command ran: {stdout}");
    assert!(
        err.contains("\"level\":\"DEBUG\""),
        "verbose logging is on (else this test proves nothing): {}",
        &err[..err.len().min(2000)]
    );
    assert!(
        !err.contains(TOKEN),
        "the bridge's trace log carries the daemon token"
    );
    assert!(
        !err.contains("authorization") && !err.contains("Authorization"),
        "no Authorization header is logged"
    );
    drop(agent);
    let agent_err = agent_log.join().expect("agent log");
    assert!(
        agent_err.contains("\"level\":\"DEBUG\"") || agent_err.contains("\"level\":\"INFO\""),
        "the agent logged: {agent_err}"
    );
    assert!(
        !agent_err.contains(TOKEN),
        "the shell agent's trace log carries its token"
    );
}

/// S2: commands run by the built-in shell agent never see the bridge's own environment — its
/// settings and secrets (`CHAT_BRIDGE_*`) — so a chat user's `env` cannot print a token.
#[test]
fn s2_commands_never_inherit_the_bridges_own_settings_and_secrets() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = binary::piped(
        // `binary::command` sets CHAT_BRIDGE_SHELL_AGENT__HEARTBEAT_INTERVAL; CHAT_BRIDGE_LOG too here.
        &mut bridge(dir.path(), &[], &[("CHAT_BRIDGE_LOG", "info")]),
        b"echo \"seen:$(env | grep -c '^CHAT_BRIDGE_') path:${PATH:+set}\"\n",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", stderr(&out));
    assert!(
        stdout.contains("seen:0 path:set"),
        "no CHAT_BRIDGE_ variable reaches the command, the rest of the environment does: {stdout}"
    );
}

/// S2: a database URL with a password given as a flag is readable by every local user in the process
/// list: the bridge says so (the URL masked) and points at the variable; without a password it is
/// quiet. The password is never printed.
#[test]
fn s2_a_database_url_flag_with_a_password_is_warned_about_and_never_printed() {
    let dir = tempfile::tempdir().expect("tmp");
    let with = format!(
        "postgres://bridge:db-pass-5151@127.0.0.1:{}/bridge",
        closed_port()
    );
    let out = run(
        dir.path(),
        &["--database-url", &with, "check-config"],
        &[("CHAT_BRIDGE_LOG", "warn")],
    );
    let err = stderr(&out);
    let said = format!("{}{err}", String::from_utf8_lossy(&out.stdout));
    assert!(
        err.contains("--database-url holds a password")
            && err.contains("CHAT_BRIDGE_DATABASE__URL"),
        "{said}"
    );
    assert!(
        err.contains("bridge:***@"),
        "the URL is named, masked: {said}"
    );
    assert!(!said.contains("db-pass-5151"), "{said}");

    let without = format!("sqlite://{}", dir.path().join("b.db").display());
    let out = run(
        dir.path(),
        &["--database-url", &without, "check-config"],
        &[("CHAT_BRIDGE_LOG", "warn")],
    );
    assert!(
        !stderr(&out).contains("holds a password"),
        "{}",
        stderr(&out)
    );
}
