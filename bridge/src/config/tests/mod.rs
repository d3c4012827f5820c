//! The configuration's rules: layering and S3 here; S1, S2 and A1 in `trust.rs`.

mod platforms;
mod projects;
mod trust;

use super::load::{env_name, key_defaults, unknown_variable};
use super::secret::{is_secret, secret_keys};
use super::validate::is_listen_address;
use super::*;

fn expose(s: &SecretString) -> &str {
    s.expose_secret()
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn defaults_are_the_embedded_default() {
    let c = Config::load(None, env(&[]), &Flags::default()).expect("defaults");
    assert_eq!(c.database.url, "sqlite://./chat-bridge.db");
    assert_eq!(c.database.max_connections, 10);
    assert_eq!(c.daemon.url, None);
    assert_eq!(c.liveness.idle, Duration::from_secs(120));
    assert_eq!(c.liveness.on_stall, OnStall::Notify);
}

#[test]
fn file_then_env_then_flags() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("cb.toml");
    std::fs::write(&path, "[database]\nurl = \"sqlite://file.db\"\n[liveness]\nidle = \"90s\"\non_stall = \"cancel\"\n").expect("write");
    let c = Config::load(
        Some(&path),
        env(&[
            ("CHAT_BRIDGE_LIVENESS__IDLE", "45s"),
            ("CHAT_BRIDGE_SHELL_AGENT__REQUIRE_APPROVAL", "true"),
            ("CHAT_BRIDGE_APPROVALS__APPROVERS", "[\"U1\", \"U2\"]"),
            ("CHAT_BRIDGE_DAEMON__TOKEN", "s3cret"),
            ("UNRELATED", "x"),
        ]),
        &Flags {
            database_url: Some("postgres://db/cb".into()),
            ..Flags::default()
        },
    )
    .expect("load");
    assert_eq!(c.database.url, "postgres://db/cb", "flags win");
    assert_eq!(
        c.liveness.idle,
        Duration::from_secs(45),
        "env beats the file"
    );
    assert_eq!(
        c.liveness.on_stall,
        OnStall::Cancel,
        "the file beats defaults"
    );
    assert!(c.shell_agent.require_approval);
    assert_eq!(c.approvals.approvers, ["U1", "U2"]);
    assert_eq!(c.daemon.token.as_ref().map(expose), Some("s3cret"));
}

#[test]
fn a_token_in_the_file_is_refused_and_a_token_file_is_read() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("cb.toml");
    std::fs::write(&path, "[daemon]\ntoken = \"oops\"\n").expect("write");
    let err = Config::load(Some(&path), env(&[]), &Flags::default()).expect_err("refused");
    assert!(
        matches!(&err, ConfigError::SecretInFile(k) if k == "daemon.token"),
        "{err}"
    );
    std::fs::write(&path, "[discord]\ntoken = \"oops\"\n").expect("write");
    let err = Config::load(Some(&path), env(&[]), &Flags::default()).expect_err("refused");
    assert!(
        err.to_string().contains("CHAT_BRIDGE_DISCORD__TOKEN") && !err.to_string().contains("oops"),
        "names the variable, never the value: {err}"
    );
    let token = dir.path().join("token");
    std::fs::write(&token, "from-file\n").expect("write");
    std::fs::write(
        &path,
        format!("[daemon]\ntoken_file = {:?}\n", token.display().to_string()),
    )
    .expect("write");
    let c = Config::load(Some(&path), env(&[]), &Flags::default()).expect("load");
    assert_eq!(c.daemon.token.as_ref().map(expose), Some("from-file"));
    assert!(
        c.daemon.token_from_file,
        "read from the file: read again before a reconnect"
    );
    // The environment wins over the file, and then the file is not read again either.
    let c = Config::load(
        Some(&path),
        env(&[("CHAT_BRIDGE_DAEMON__TOKEN", "from-env")]),
        &Flags::default(),
    )
    .expect("load");
    assert_eq!(c.daemon.token.as_ref().map(expose), Some("from-env"));
    assert!(!c.daemon.token_from_file);
}

#[test]
fn unknown_keys_and_bad_durations_are_clear_errors() {
    let err = Config::load(
        None,
        env(&[("CHAT_BRIDGE_LIVENESS__IDEL", "5s")]),
        &Flags::default(),
    )
    .expect_err("typo");
    assert!(
        err.to_string().contains("CHAT_BRIDGE_LIVENESS__IDEL")
            && err.to_string().contains("CHAT_BRIDGE_LIVENESS__IDLE"),
        "{err}"
    );
    let err = Config::load(
        None,
        env(&[("CHAT_BRIDGE_LIVENESS__IDLE", "5x")]),
        &Flags::default(),
    )
    .expect_err("bad");
    assert!(err.to_string().contains("500ms, 10s"), "{err}");
}

/// A Slack deployment that validates: tokens, an allowlist.
const SLACK: [(&str, &str); 3] = [
    ("CHAT_BRIDGE_SLACK__BOT_TOKEN", "xoxb-1"),
    ("CHAT_BRIDGE_SLACK__APP_TOKEN", "xapp-1"),
    ("CHAT_BRIDGE_SLACK__ALLOWED_USERS", "[\"U1\"]"),
];
const SIGNING_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";

fn load(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::load(None, env(pairs), &Flags::default())
}

fn with(base: &[(&str, &str)], extra: &[(&str, &str)]) -> Vec<(String, String)> {
    env(base).into_iter().chain(env(extra)).collect()
}

fn load_with(base: &[(&str, &str)], extra: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::load(None, with(base, extra), &Flags::default())
}

#[test]
fn s3_typo_in_env_var_names_the_nearest_key() {
    for (typo, nearest) in [
        (
            "CHAT_BRIDGE_SLACK_ALLOWED_USERS",
            "CHAT_BRIDGE_SLACK__ALLOWED_USERS",
        ),
        (
            "CHAT_BRIDGE_DISCORD__ALLOWED_USER",
            "CHAT_BRIDGE_DISCORD__ALLOWED_USERS",
        ),
        ("CHAT_BRIDGE_ACCESS_OPEN", "CHAT_BRIDGE_ACCESS__OPEN"),
        ("CHAT_BRIDGE_DATABASE_URL", "CHAT_BRIDGE_DATABASE__URL"),
        (
            "CHAT_BRIDGE_SHELL_AGENT__TOKEN",
            "CHAT_BRIDGE_SHELL_AGENT_TOKEN",
        ),
        ("CHAT_BRIDGE_LOGS", "CHAT_BRIDGE_LOG"),
        (
            "CHAT_BRIDGE_SLACK__SIGNING_SECRT",
            "CHAT_BRIDGE_SLACK__SIGNING_SECRET",
        ),
    ] {
        let err = load_with(&SLACK, &[(typo, "never-shown-value")]).expect_err(typo);
        match &err {
            ConfigError::UnknownVariable { name, nearest: n } => {
                assert_eq!((name.as_str(), n.as_str()), (typo, nearest));
            }
            other => panic!("{typo}: {other}"),
        }
        let text = err.to_string();
        assert!(
            text.contains(&format!("did you mean {nearest}?"))
                && !text.contains("never-shown-value"),
            "{text}"
        );
    }
    // Variables the product reads outside the configuration are not typos.
    let others: Vec<(&str, &str)> = OTHER_VARIABLES.iter().map(|v| (*v, "x")).collect();
    load(&others).expect("CHAT_BRIDGE_LOG, CHAT_BRIDGE_CONFIG, … are accepted");
    check_variable_names(OTHER_VARIABLES).expect("accepted");
    assert!(check_variable_names(["CHAT_BRIDGE_SHELL_AGENT_TOKN"]).is_err());
    // Other prefixes are none of our business.
    load(&[("CHAT_BRIDGEX", "1"), ("MY_CHAT_BRIDGE_X", "1")]).expect("not ours");
}

#[test]
fn s3_every_key_comes_from_the_types_and_every_key_has_its_variable() {
    let keys = Config::keys();
    for (section, key) in [
        ("database", "url"),
        ("daemon", "token"),
        ("daemon", "token_file"),
        ("daemon", "cwd"),
        ("slack", "signing_secret"),
        ("slack", "mode"),
        ("http", "listen"),
        ("access", "open"),
        ("access", "threads"),
        ("redact", "store"),
        ("liveness", "on_stall"),
        ("service", "platform"),
    ] {
        assert!(
            keys.contains(&(section.to_owned(), key.to_owned())),
            "{section}.{key} (optional keys too)"
        );
    }
    // Each key's variable is accepted (values of the right type, secrets non-blank).
    for (section, key) in &keys {
        let var = env_name(section, key);
        assert!(
            unknown_variable(&var, &key_defaults()).is_none(),
            "{var} is a key"
        );
    }
}

#[test]
fn secret_keys_are_exactly_the_secret_typed_fields() {
    // A field is a secret when a non-string value is refused with the secret's own words.
    for (section, key) in Config::keys() {
        let mut table = toml::Table::new();
        let mut sec = toml::Table::new();
        sec.insert(key.clone(), toml::Value::Float(0.5));
        table.insert(section.clone(), toml::Value::Table(sec));
        let typed_secret = toml::Value::Table(table)
            .try_into::<Config>()
            .err()
            .is_some_and(|e| e.to_string().contains("a secret must be a string"));
        let listed = is_secret(&section, &key);
        assert_eq!(typed_secret, listed, "{section}.{key}");
    }
    let c = Config::default();
    assert_eq!(
        c.secrets()
            .into_iter()
            .map(|(var, _)| var)
            .collect::<Vec<_>>(),
        secret_keys()
            .iter()
            .map(|k| secret_env_var(k))
            .collect::<Vec<_>>(),
    );
}

#[test]
fn s3_check_config_refuses_what_startup_refuses() {
    // One path: `load` validates, and start-up and `check-config` both call it. Each bad
    // setting is refused with a message naming it.
    let bad: [(&[(&str, &str)], &str); 23] = [
        (&[("CHAT_BRIDGE_SLACK__MODE", "htp")], "slack.mode"),
        (
            &[("CHAT_BRIDGE_SERVICE__PLATFORM", "irc")],
            "service.platform",
        ),
        (&[("CHAT_BRIDGE_HTTP__LISTEN", "0.0.0.0")], "http.listen"),
        (&[("CHAT_BRIDGE_SLACK__LISTEN", "3000")], "slack.listen"),
        (
            &[("CHAT_BRIDGE_REDACT__PATTERNS", "[\"ok\", \"(unclosed\"]")],
            "redact.patterns[1]",
        ),
        (
            &[("CHAT_BRIDGE_DATABASE__URL", "mysql://u@db/chat")],
            "database.url",
        ),
        (
            &[("CHAT_BRIDGE_DAEMON__URL", "http://daemon:4000/acp")],
            "daemon.url",
        ),
        (&[("CHAT_BRIDGE_DAEMON__URL", "ws://")], "daemon.url"),
        (
            &[("CHAT_BRIDGE_HTTP__API_TOKEN", "")],
            "CHAT_BRIDGE_HTTP__API_TOKEN",
        ),
        (&[("CHAT_BRIDGE_SLACK__ALLOWED_USERS", "[]")], "(A1)"),
        (
            &[("CHAT_BRIDGE_SERVICE__OUTBOX_WORKERS", "0")],
            "service.outbox_workers",
        ),
        (
            &[("CHAT_BRIDGE_HTTP__UI", "true")],
            "http.ui = true needs http.listen",
        ),
        (
            &[
                ("CHAT_BRIDGE_HTTP__UI", "true"),
                ("CHAT_BRIDGE_HTTP__LISTEN", "127.0.0.1:8080"),
            ],
            "http.ui = true needs a way to sign in",
        ),
        (
            &[("CHAT_BRIDGE_HTTP__UI_AUTH_HEADER", "not a header")],
            "http.ui_auth_header",
        ),
        (
            &[("CHAT_BRIDGE_HTTP__UI_URL", "bridge.example.com")],
            "http.ui_url",
        ),
        (
            &[
                ("CHAT_BRIDGE_HTTP__UI", "true"),
                ("CHAT_BRIDGE_HTTP__LISTEN", "127.0.0.1:8080"),
                ("CHAT_BRIDGE_HTTP__API_TOKEN", "t0ken-t0ken-t0ken"),
                ("CHAT_BRIDGE_HTTP__UI_SESSION_MINUTES", "0"),
            ],
            "http.ui_session_minutes",
        ),
        (
            &[
                ("CHAT_BRIDGE_HTTP__UI", "true"),
                ("CHAT_BRIDGE_HTTP__LISTEN", "127.0.0.1:8080"),
                ("CHAT_BRIDGE_HTTP__API_TOKEN", "t0ken-t0ken-t0ken"),
                ("CHAT_BRIDGE_HTTP__UI_LOGIN_ATTEMPTS", "0"),
            ],
            "http.ui_login_attempts",
        ),
        (
            &[
                ("CHAT_BRIDGE_HTTP__UI", "true"),
                ("CHAT_BRIDGE_HTTP__LISTEN", "127.0.0.1:8080"),
                ("CHAT_BRIDGE_HTTP__API_TOKEN", "t0ken-t0ken-t0ken"),
                ("CHAT_BRIDGE_HTTP__UI_LOGIN_WINDOW", "0s"),
            ],
            "http.ui_login_window",
        ),
        (
            &[("CHAT_BRIDGE_HTTP__UI_CLIENT_IP_HEADER", "not a header")],
            "http.ui_client_ip_header",
        ),
        (
            &[("CHAT_BRIDGE_RENDER__STREAM_EVERY", "50ms")],
            "render.stream_every must be at least 100ms",
        ),
        (
            &[("CHAT_BRIDGE_RENDER__UPLOAD_OVER", "0")],
            "render.upload_over must be at least 2000 bytes",
        ),
        (
            &[("CHAT_BRIDGE_ATTACHMENTS__MAX_IMAGE_BYTES", "99999999999")],
            "attachments.max_image_bytes must be at most 52428800 (50 MB), not 99999999999",
        ),
        (
            &[("CHAT_BRIDGE_ATTACHMENTS__MAX_FILE_BYTES", "99999999999")],
            "attachments.max_file_bytes must be at most",
        ),
    ];
    for (extra, names) in bad {
        let err = load_with(&SLACK, extra).expect_err(names);
        assert!(err.to_string().contains(names), "{names}: {err}");
    }
    // Every problem is reported at once, not one per attempt.
    let err = load_with(
        &SLACK,
        &[
            ("CHAT_BRIDGE_HTTP__LISTEN", "0.0.0.0"),
            ("CHAT_BRIDGE_DAEMON__URL", "http://d/acp"),
        ],
    )
    .expect_err("two problems");
    assert!(
        err.to_string().contains("http.listen") && err.to_string().contains("daemon.url"),
        "{err}"
    );
    for good in ["127.0.0.1:0", "[::]:8080", "localhost:8080", "0.0.0.0:3000"] {
        assert!(is_listen_address(good), "{good}");
    }
    for bad in ["0.0.0.0", "8080", ":8080", "host:port", "a b:80", ""] {
        assert!(!is_listen_address(bad), "{bad}");
    }
}

#[test]
fn s3_check_config_refuses_database_urls_start_up_could_not_read_and_clashing_ports() {
    for url in [
        "postgres://u:p/ss@h:1/db",
        "postgres://u:pw@[::1/db",
        "postgres://u:pw@h:99999/db",
    ] {
        let err = load_with(&SLACK, &[("CHAT_BRIDGE_DATABASE__URL", url)]).expect_err(url);
        let text = err.to_string();
        assert!(text.contains("cannot be parsed"), "{url}: {text}");
        assert!(
            !text.contains("p/ss") && !text.contains(":pw@"),
            "masked: {text}"
        );
    }
    for url in [
        "postgres://u:p%2Fss@h:1/db",
        "sqlite://./x.db",
        "sqlite::memory:",
    ] {
        assert!(
            load_with(&SLACK, &[("CHAT_BRIDGE_DATABASE__URL", url)]).is_ok(),
            "{url}"
        );
    }
    let err = load_with(
        &SLACK,
        &[
            ("CHAT_BRIDGE_SLACK__MODE", "http"),
            ("CHAT_BRIDGE_SLACK__SIGNING_SECRET", SIGNING_SECRET),
            ("CHAT_BRIDGE_SLACK__LISTEN", "0.0.0.0:8080"),
            ("CHAT_BRIDGE_HTTP__LISTEN", "127.0.0.1:8080"),
        ],
    )
    .expect_err("same port");
    assert!(err.to_string().contains("same port"), "{err}");
}

#[test]
fn daemon_command_runs_a_stdio_agent_with_its_env_and_is_exclusive_with_url() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("cb.toml");
    std::fs::write(
        &path,
        "[daemon]\ncommand = [\"qwen\", \"--acp\"]\ncwd = \"/srv/repo\"\n[daemon.env]\nQWEN_MODEL = \"m\"\n",
    )
    .expect("write");
    let c = Config::load(Some(&path), env(&[]), &Flags::default()).expect("load");
    assert_eq!(
        c.daemon.command.as_deref(),
        Some(&["qwen".to_owned(), "--acp".to_owned()][..])
    );
    assert_eq!(
        c.daemon.env.get("QWEN_MODEL").map(String::as_str),
        Some("m")
    );
    let from_env = Config::load(
        None,
        env(&[("CHAT_BRIDGE_DAEMON__COMMAND", "[\"goose\", \"acp\"]")]),
        &Flags::default(),
    )
    .expect("an environment override");
    assert_eq!(from_env.daemon.command.map(|c| c.len()), Some(2));

    let both = Config::load(
        Some(&path),
        env(&[("CHAT_BRIDGE_DAEMON__URL", "ws://127.0.0.1:1/acp")]),
        &Flags::default(),
    )
    .expect_err("url and command together");
    assert!(
        both.to_string()
            .contains("daemon.url and daemon.command are exclusive"),
        "{both}"
    );
    let empty = Config::load(
        None,
        env(&[("CHAT_BRIDGE_DAEMON__COMMAND", "[]")]),
        &Flags::default(),
    )
    .expect_err("an empty command");
    assert!(
        empty.to_string().contains("daemon.command is empty"),
        "{empty}"
    );
    let token = Config::load(
        Some(&path),
        env(&[("CHAT_BRIDGE_DAEMON__TOKEN", "s3cret")]),
        &Flags::default(),
    )
    .expect_err("a token with a command");
    assert!(token.to_string().contains("needs none"), "{token}");
    assert!(!token.to_string().contains("s3cret"));
    let stray = Config::load(
        None,
        env(&[("CHAT_BRIDGE_DAEMON__ENV", "{\"A\" = \"1\"}")]),
        &Flags::default(),
    );
    if let Err(e) = stray {
        assert!(e.to_string().contains("daemon.env"), "{e}");
    }
}

#[test]
fn s_oidc1_single_sign_on_refuses_to_start_open_incomplete_or_with_its_secret_in_the_file() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("c.toml");
    let load_file = |body: &str, extra: &[(&str, &str)]| {
        std::fs::write(&path, body).expect("write");
        Config::load(Some(&path), with(&SLACK, extra), &Flags::default())
    };
    let head = "[http]\nui = true\nlisten = \"127.0.0.1:8080\"\nui_url = \"https://bridge.example.com\"\n[http.ui_oidc]\nissuer = \"https://idp.example.com\"\nclient_id = \"bridge\"\n";
    let secret = [("CHAT_BRIDGE_HTTP__UI_OIDC_CLIENT_SECRET", "s3cr3t-value")];
    // No allow rule: closed unless opened on purpose.
    let err = load_file(head, &secret).expect_err("no allow rule");
    assert!(err.to_string().contains("lets nobody in"), "{err}");
    let err = load_file(&format!("{head}allowed_domains = [\" \"]\n"), &secret)
        .expect_err("blank allow rule");
    assert!(err.to_string().contains("lets nobody in"), "{err}");
    // With a rule it starts, and the sign-in needs no API token.
    let open = format!("{head}allowed_domains = [\"example.com\"]\n");
    let cfg = load_file(&open, &secret).expect("valid");
    assert_eq!(
        cfg.http.ui_oidc.as_ref().map(|o| o.client_id.as_str()),
        Some("bridge")
    );
    assert!(!format!("{cfg:?}").contains("s3cr3t-value"), "S2: redacted");
    // The secret: required, not blank (S1), never in the file.
    let err = load_file(&open, &[]).expect_err("no secret");
    assert!(
        err.to_string()
            .contains("CHAT_BRIDGE_HTTP__UI_OIDC_CLIENT_SECRET"),
        "{err}"
    );
    let err = load_file(&open, &[("CHAT_BRIDGE_HTTP__UI_OIDC_CLIENT_SECRET", "  ")])
        .expect_err("blank secret");
    assert!(
        err.to_string()
            .contains("CHAT_BRIDGE_HTTP__UI_OIDC_CLIENT_SECRET"),
        "{err}"
    );
    let err = load_file(
        &open.replace(
            "[http.ui_oidc]",
            "ui_oidc_client_secret = \"in-file\"\n[http.ui_oidc]",
        ),
        &secret,
    )
    .expect_err("secret in file");
    assert!(!err.to_string().contains("in-file"), "{err}");
    // Incomplete: issuer, client id, where to come back.
    for (from, to, names) in [
        (
            "https://idp.example.com",
            "idp.example.com",
            "http.ui_oidc.issuer",
        ),
        (
            "client_id = \"bridge\"",
            "client_id = \"\"",
            "http.ui_oidc.client_id",
        ),
        (
            "ui_url = \"https://bridge.example.com\"\n",
            "",
            "http.ui_oidc.redirect_url or http.ui_url",
        ),
    ] {
        let err = load_file(&open.replace(from, to), &secret).expect_err(names);
        assert!(err.to_string().contains(names), "{names}: {err}");
    }
}

#[test]
fn s_ui_start_up_refuses_client_sent_auth_headers_open_allow_lists_and_a_ui_url_with_a_path() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("c.toml");
    let load_file = |body: &str, extra: &[(&str, &str)]| {
        std::fs::write(&path, body).expect("write");
        Config::load(Some(&path), with(&SLACK, extra), &Flags::default())
    };
    let ui = "[http]\nui = true\nlisten = \"127.0.0.1:8080\"\n";
    // A header every client sends is no proof of who signed in.
    for h in [
        "Host",
        "user-agent",
        "Cookie",
        "Accept",
        "Accept-Language",
        "Connection",
        "Content-Type",
        "Origin",
        "Referer",
        "Authorization",
        "X-Forwarded-For",
        "Sec-Fetch-Mode",
    ] {
        let err = load_file(&format!("{ui}ui_auth_header = \"{h}\"\n"), &[])
            .expect_err(h)
            .to_string();
        assert!(
            err.contains("http.ui_auth_header must be a header only the trusted auth proxy sets"),
            "{h}: {err}"
        );
    }
    let cfg = load_file(
        &format!("{ui}ui_auth_header = \"X-Auth-Request-Email\"\n"),
        &[],
    )
    .expect("a proxy's own header");
    assert_eq!(
        cfg.http.ui_auth_header.as_deref(),
        Some("X-Auth-Request-Email")
    );

    // Allow lists: no wildcards, nothing blank, each entry what it says.
    let oidc = format!(
        "{ui}ui_url = \"https://bridge.example.com\"\n[http.ui_oidc]\nissuer = \"https://idp.example.com\"\nclient_id = \"bridge\"\n"
    );
    let secret = [("CHAT_BRIDGE_HTTP__UI_OIDC_CLIENT_SECRET", "s3cr3t-value")];
    for (rule, names) in [
        (
            "allowed_domains = [\"@example.com\"]",
            "http.ui_oidc.allowed_domains",
        ),
        (
            "allowed_domains = [\"example.com\", \"\"]",
            "http.ui_oidc.allowed_domains",
        ),
        (
            "allowed_domains = [\"*.example.com\"]",
            "http.ui_oidc.allowed_domains",
        ),
        ("allowed_emails = [\"*\"]", "http.ui_oidc.allowed_emails"),
        (
            "allowed_emails = [\"*@example.com\"]",
            "http.ui_oidc.allowed_emails",
        ),
        (
            "allowed_emails = [\"alice@example.com\", \" \"]",
            "http.ui_oidc.allowed_emails",
        ),
        ("allowed_groups = [\"*\"]", "http.ui_oidc.allowed_groups"),
    ] {
        let err = load_file(&format!("{oidc}{rule}\n"), &secret)
            .expect_err(rule)
            .to_string();
        assert!(err.contains(names), "{rule}: {err}");
    }
    load_file(
        &format!(
            "{oidc}allowed_domains = [\"Example.com\"]\nallowed_emails = [\"bob@elsewhere.org\"]\n"
        ),
        &secret,
    )
    .expect("plain entries");

    // ui_url: an origin only (a path doubled `/ui/ui/` in chat's links).
    for u in [
        "https://bridge.example.com/ui/",
        "https://bridge.example.com/ui",
        "https://bridge.example.com/x",
        "https://bridge.example.com?x=1",
    ] {
        let err = load_file(&format!("[http]\nui_url = \"{u}\"\n"), &[])
            .expect_err(u)
            .to_string();
        assert!(
            err.contains("http.ui_url must be an origin only"),
            "{u}: {err}"
        );
    }
    for u in [
        "https://bridge.example.com",
        "https://bridge.example.com/",
        "http://127.0.0.1:8080",
    ] {
        load_file(&format!("[http]\nui_url = \"{u}\"\n"), &[]).expect(u);
    }
}

#[test]
fn careless_workspace_and_schedule_settings_are_refused_naming_the_key() {
    for (extra, name) in [
        (&[("CHAT_BRIDGE_WORKSPACE__DIR", "")][..], "workspace.dir"),
        (&[("CHAT_BRIDGE_WORKSPACE__DIR", "/")][..], "workspace.dir"),
        (&[("CHAT_BRIDGE_WORKSPACE__DIR", ".")][..], "workspace.dir"),
        (
            &[("CHAT_BRIDGE_SCHEDULES__CHECK_EVERY", "0s")][..],
            "schedules.check_every",
        ),
        (
            &[("CHAT_BRIDGE_SCHEDULES__MIN_INTERVAL", "0s")][..],
            "schedules.min_interval",
        ),
    ] {
        let err = load_with(&SLACK, extra).expect_err(name);
        assert!(err.to_string().contains(name), "{name}: {err}");
    }
    for good in ["/srv/worktrees", "wt", ".chat-bridge/worktrees"] {
        let cfg = load_with(&SLACK, &[("CHAT_BRIDGE_WORKSPACE__DIR", good)]).expect(good);
        assert_eq!(
            cfg.workspace.dir.as_deref(),
            Some(std::path::Path::new(good))
        );
    }
}

#[test]
fn the_database_pool_size_is_read_and_bounded() {
    let c = Config::load(
        None,
        env(&[("CHAT_BRIDGE_DATABASE__MAX_CONNECTIONS", "40")]),
        &Flags::default(),
    )
    .expect("load");
    assert_eq!(c.database.max_connections, 40);
    let refused = match c.validate() {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    };
    assert!(!refused.contains("max_connections"), "{refused}");
    for bad in ["0", "501"] {
        let err = Config::load(
            None,
            env(&[("CHAT_BRIDGE_DATABASE__MAX_CONNECTIONS", bad)]),
            &Flags::default(),
        )
        .expect_err("refused at load")
        .to_string();
        assert!(
            err.contains("database.max_connections must be between 1 and 500"),
            "{err}"
        );
    }
}
