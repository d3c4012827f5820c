//! S1 (blank and short secrets), S2 (no secret in any output) and A1 (closed by default).

use super::*;

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
    assert_eq!(ok.slack().mode, SlackMode::Http);
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
    assert_eq!(listed.slack().allowed_users, ["U1"]);
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
        c.slack().signing_secret.as_ref().map(expose),
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
