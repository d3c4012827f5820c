//! The configuration's rules: layering, S1, S2, S3, A1.

use super::load::{env_name, key_defaults, unknown_variable};
use super::secret::{SECRET_KEYS, is_secret};
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
        matches!(err, ConfigError::SecretInFile("daemon.token")),
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
fn s1_empty_signing_secret_is_a_startup_error_naming_its_key() {
    let http = [("CHAT_BRIDGE_SLACK__MODE", "http")];
    let ok = load_with(
        &SLACK,
        &[
            http[0],
            ("CHAT_BRIDGE_SLACK__SIGNING_SECRET", SIGNING_SECRET),
        ],
    )
    .expect("a real signing secret");
    assert_eq!(ok.slack.mode, SlackMode::Http);
    for blank in ["", " ", "\t\n"] {
        let err = load_with(
            &SLACK,
            &[http[0], ("CHAT_BRIDGE_SLACK__SIGNING_SECRET", blank)],
        )
        .expect_err("an empty HMAC key verifies anyone's signature");
        assert!(
            err.to_string()
                .contains("CHAT_BRIDGE_SLACK__SIGNING_SECRET is set but empty"),
            "{err}"
        );
    }
    let err = load_with(
        &SLACK,
        &[
            http[0],
            ("CHAT_BRIDGE_SLACK__SIGNING_SECRET", "fifteen-bytes!!"),
        ],
    )
    .expect_err("too short");
    let text = err.to_string();
    assert!(
        text.contains("CHAT_BRIDGE_SLACK__SIGNING_SECRET is shorter than 16 bytes")
            && !text.contains("fifteen-bytes"),
        "{text}"
    );
    let err = load_with(&SLACK, &http).expect_err("http mode without a secret");
    assert!(
        err.to_string()
            .contains("CHAT_BRIDGE_SLACK__SIGNING_SECRET is not set"),
        "{err}"
    );
}

#[test]
fn s1_every_blank_secret_is_a_startup_error_naming_its_variable() {
    for (var, base) in [
        ("CHAT_BRIDGE_SLACK__BOT_TOKEN", &SLACK[..]),
        ("CHAT_BRIDGE_SLACK__APP_TOKEN", &SLACK[..]),
        ("CHAT_BRIDGE_DISCORD__TOKEN", &[][..]),
        ("CHAT_BRIDGE_HTTP__API_TOKEN", &[][..]),
        ("CHAT_BRIDGE_DAEMON__TOKEN", &[][..]),
    ] {
        for blank in ["", "   "] {
            let err = load_with(base, &[(var, blank)]).expect_err(var);
            assert!(
                err.to_string().contains(&format!("{var} is set but empty")),
                "{var}: {err}"
            );
        }
    }
    let err = Config::load(
        None,
        env(&[]),
        &Flags {
            daemon_token: Some(" ".into()),
            ..Flags::default()
        },
    )
    .expect_err("--daemon-token");
    assert!(
        err.to_string().contains("--daemon-token is set but empty"),
        "{err}"
    );
    let dir = tempfile::tempdir().expect("tmp");
    let token = dir.path().join("token");
    std::fs::write(&token, "\n").expect("write");
    let file = token.display().to_string();
    let err = load(&[("CHAT_BRIDGE_DAEMON__TOKEN_FILE", &file)]).expect_err("empty file");
    assert!(
        err.to_string().contains("daemon.token_file") && err.to_string().contains("is empty"),
        "{err}"
    );
}

#[test]
fn a1_slack_without_allowlist_refuses_to_start_unless_access_open() {
    let tokens = &SLACK[..2];
    let err = load(tokens).expect_err("closed by default");
    let text = err.to_string();
    assert!(
        text.contains("slack.allowed_users")
            && text.contains("CHAT_BRIDGE_SLACK__ALLOWED_USERS")
            && text.contains("access.open = true")
            && text.contains("CHAT_BRIDGE_ACCESS__OPEN"),
        "says exactly what to set: {text}"
    );
    // A channel allowlist says where, not who: still refused.
    let err = load_with(
        tokens,
        &[("CHAT_BRIDGE_SLACK__ALLOWED_CHANNELS", "[\"C1\"]")],
    )
    .expect_err("channels are not people");
    assert!(err.to_string().contains("(A1)"), "{err}");
    let open = load_with(tokens, &[("CHAT_BRIDGE_ACCESS__OPEN", "true")]).expect("open on purpose");
    assert!(open.access.open);
    let listed = load(&SLACK).expect("an allowlist");
    assert_eq!(listed.slack.allowed_users, ["U1"]);
    // The console is local and always allowed.
    load(&[]).expect("console");
}

#[test]
fn a1_discord_without_user_or_role_allowlist_refuses_to_start_unless_access_open() {
    let token = [("CHAT_BRIDGE_DISCORD__TOKEN", "discord-token")];
    let err = load(&token).expect_err("closed by default");
    let text = err.to_string();
    assert!(
        text.contains("discord.allowed_users")
            && text.contains("discord.allowed_roles")
            && text.contains("CHAT_BRIDGE_ACCESS__OPEN=true"),
        "{text}"
    );
    for (var, value) in [
        ("CHAT_BRIDGE_DISCORD__ALLOWED_USERS", "[\"111\"]"),
        ("CHAT_BRIDGE_DISCORD__ALLOWED_ROLES", "[\"222\"]"),
        ("CHAT_BRIDGE_ACCESS__OPEN", "true"),
    ] {
        load_with(&token, &[(var, value)]).unwrap_or_else(|e| panic!("{var}: {e}"));
    }
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
        c.secrets().map(|(var, _)| var.to_owned()),
        SECRET_KEYS.map(secret_env_var),
    );
}

#[test]
fn s2_config_error_never_echoes_a_secret() {
    // Secret variables are strings, whatever they look like.
    let c = load(&[("CHAT_BRIDGE_DAEMON__TOKEN", "424242")]).expect("a numeric token");
    assert_eq!(c.daemon.token.as_ref().map(expose), Some("424242"));
    let c = load(&[("CHAT_BRIDGE_HTTP__API_TOKEN", "true")]).expect("a boolean-looking token");
    assert_eq!(c.http.api_token.as_ref().map(expose), Some("true"));
    // A secret of another type (from code or a table) is refused without its value.
    let mut table = toml::Table::new();
    table.insert(
        "daemon".into(),
        toml::Value::Table(toml::Table::from_iter([(
            "token".to_owned(),
            toml::Value::Integer(424_242),
        )])),
    );
    let err = toml::Value::Table(table)
        .try_into::<Config>()
        .expect_err("not a string");
    assert!(!err.to_string().contains("424242"), "{err}");
    // Debug never prints one; neither do the errors of invalid settings next to them.
    let c = load_with(
        &SLACK,
        &[
            ("CHAT_BRIDGE_DAEMON__TOKEN", "tok-424242"),
            ("CHAT_BRIDGE_HTTP__API_TOKEN", "api-424242"),
        ],
    )
    .expect("load");
    let debug = format!("{c:?}");
    for secret in ["xoxb-1", "xapp-1", "tok-424242", "api-424242"] {
        assert!(!debug.contains(secret), "{debug}");
    }
    for (var, value, leak) in [
        (
            "CHAT_BRIDGE_DATABASE__URL",
            "mysql://root:hunter2@db/chat",
            "hunter2",
        ),
        (
            "CHAT_BRIDGE_DATABASE__URL",
            "mysql://root:hun/ter2@db/chat",
            "hun/ter2",
        ),
        (
            "CHAT_BRIDGE_DAEMON__URL",
            "http://agent:hunter2@daemon:4000/acp",
            "hunter2",
        ),
        (
            "CHAT_BRIDGE_SLACK__SIGNING_SECRET",
            "short-424242",
            "424242",
        ),
    ] {
        let err = load_with(
            &SLACK,
            &[(var, value), ("CHAT_BRIDGE_DAEMON__TOKEN", "tok-424242")],
        )
        .expect_err(var);
        let text = err.to_string();
        assert!(
            !text.contains(leak) && !text.contains("tok-424242"),
            "{var}: {text}"
        );
    }
    let flags = Flags {
        daemon_token: Some("flag-424242".into()),
        database_url: Some("postgres://u:pw-424242@db/x".into()),
        ..Flags::default()
    };
    assert!(!format!("{flags:?}").contains("424242"), "{flags:?}");
}

#[test]
fn s2_a_syntax_error_in_the_file_never_quotes_the_line() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("cb.toml");
    std::fs::write(&path, "[slack]\nbot_token = xoxb-unquoted-424242\n").expect("write");
    let err = Config::load(Some(&path), env(&[]), &Flags::default()).expect_err("syntax");
    let text = err.to_string();
    assert!(
        text.contains("line 2") && !text.contains("424242"),
        "{text}"
    );
}

#[test]
fn s3_check_config_refuses_what_startup_refuses() {
    // One path: `load` validates, and start-up and `check-config` both call it. Each bad
    // setting is refused with a message naming it.
    let bad: [(&[(&str, &str)], &str); 11] = [
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
fn s2_a_database_url_with_a_mistyped_scheme_is_never_echoed() {
    let err = load_with(
        &SLACK,
        &[(
            "CHAT_BRIDGE_DATABASE__URL",
            "postgres:/bridge:hunter2pw@host/db",
        )],
    )
    .expect_err("bad scheme");
    assert!(err.to_string().contains("database.url"), "{err}");
    assert!(!err.to_string().contains("hunter2pw"), "{err}");
}

#[test]
fn a1_blank_allowlist_entries_are_refused() {
    for (var, value) in [
        ("CHAT_BRIDGE_SLACK__ALLOWED_USERS", "[\"\"]"),
        ("CHAT_BRIDGE_SLACK__ALLOWED_USERS", "[\"U1\", \" \"]"),
        ("CHAT_BRIDGE_APPROVALS__APPROVERS", "[\"\"]"),
    ] {
        let err = load_with(&SLACK, &[(var, value)]).expect_err(value);
        assert!(err.to_string().contains("is blank"), "{value}: {err}");
    }
}

#[test]
fn s1_secrets_lose_surrounding_whitespace_and_a_blank_shell_agent_token_is_refused() {
    let padded = format!("  {SIGNING_SECRET}\n");
    let c = load_with(
        &SLACK,
        &[
            ("CHAT_BRIDGE_SLACK__MODE", "http"),
            ("CHAT_BRIDGE_SLACK__SIGNING_SECRET", &padded),
        ],
    )
    .expect("a trailing newline is not part of the secret");
    assert_eq!(
        c.slack.signing_secret.as_ref().map(expose),
        Some(SIGNING_SECRET)
    );
    let short = format!("{}x", " ".repeat(15));
    let err = load_with(
        &SLACK,
        &[
            ("CHAT_BRIDGE_SLACK__MODE", "http"),
            ("CHAT_BRIDGE_SLACK__SIGNING_SECRET", &short),
        ],
    )
    .expect_err("padding does not count toward the length");
    assert!(err.to_string().contains("shorter than"), "{err}");
    let err = load(&[("CHAT_BRIDGE_SHELL_AGENT_TOKEN", " ")]).expect_err("blank");
    assert!(
        err.to_string().contains("CHAT_BRIDGE_SHELL_AGENT_TOKEN"),
        "{err}"
    );
}
