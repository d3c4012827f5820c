//! Issue 17: `[[projects]]` and `default_project` — parsed, resolved, routed, and refused with
//! words that name the key at fault (S1, S2 for the projects' tokens).

use super::*;

fn parse(text: &str) -> Config {
    let table: toml::Table = toml::from_str(text).expect("toml");
    Config::try_from(table).expect("parses")
}

fn problems(cfg: &Config) -> Vec<String> {
    let mut out = Vec::new();
    cfg.check_projects(&mut out);
    out
}

const TWO: &str = r#"
default_project = "api"
[[projects]]
name = "api"
channels = ["slack:C1", "console"]
[projects.daemon]
cwd = "/srv/api"
[projects.approvals]
approvers = ["U9"]

[[projects]]
name = "web"
channels = ["slack:C2", "discord:98765"]
[projects.daemon]
url = "ws://web-daemon:8080/acp"
mode = "yolo"
[projects.liveness]
idle = "30s"
"#;

#[test]
fn projects_resolve_with_the_top_level_sections_filled_in() {
    let cfg = parse(&format!("{TWO}\n[approvals]\napprovers = [\"U1\"]\n"));
    assert!(problems(&cfg).is_empty(), "{:?}", problems(&cfg));
    let ps = cfg.resolved_projects();
    assert_eq!(ps.len(), 2);
    assert_eq!(ps[0].name, "api");
    assert_eq!(
        ps[0].daemon.cwd.as_deref(),
        Some(std::path::Path::new("/srv/api"))
    );
    assert_eq!(ps[0].approvals.approvers, ["U9"], "its own approvals");
    assert_eq!(
        ps[0].liveness.idle,
        Duration::from_secs(120),
        "top-level liveness"
    );
    assert_eq!(ps[1].approvals.approvers, ["U1"], "top-level approvals");
    assert_eq!(
        ps[1].liveness.idle,
        Duration::from_secs(30),
        "its own liveness"
    );
    assert_eq!(ps[1].daemon.mode.as_deref(), Some("yolo"));
    assert_eq!(
        ps[1].channels,
        [
            ChannelRef::parse("slack:C2").expect("ref"),
            ChannelRef::parse("discord:98765").expect("ref")
        ]
    );
}

#[test]
fn arrivals_route_by_platform_and_channel_then_default_project() {
    let cfg = parse(TWO);
    let r = cfg.routes();
    assert_eq!(r.project_for("slack", Some("C1")), Some("api"));
    assert_eq!(r.project_for("slack", Some("C2")), Some("web"));
    assert_eq!(r.project_for("discord", Some("98765")), Some("web"));
    assert_eq!(r.project_for("console", None), Some("api"));
    assert_eq!(r.project_for("console", Some("anything")), Some("api"));
    // Same id on another platform is another channel: unbound, so the default project.
    assert_eq!(r.project_for("discord", Some("C2")), Some("api"));
    let no_default = parse(&TWO.replace("default_project = \"api\"", ""));
    assert_eq!(
        no_default.routes().project_for("slack", Some("C3")),
        None,
        "ignored"
    );
    assert_eq!(
        no_default.routes().project_for("slack", Some("C1")),
        Some("api")
    );
}

#[test]
fn without_projects_the_implicit_project_is_todays_daemon_and_takes_every_channel() {
    let cfg = parse("[daemon]\nurl = \"ws://d:1/acp\"\ncwd = \"/w\"\n");
    assert!(problems(&cfg).is_empty());
    let ps = cfg.resolved_projects();
    assert_eq!(ps.len(), 1);
    assert_eq!(ps[0].name, IMPLICIT_PROJECT);
    assert_eq!(ps[0].daemon.url.as_deref(), Some("ws://d:1/acp"));
    assert_eq!(
        cfg.routes().project_for("slack", Some("anything")),
        Some(IMPLICIT_PROJECT)
    );
    Config::load(None, env(&[]), &Flags::default()).expect("today's defaults still load");
}

#[test]
fn a_channel_bound_twice_is_refused_naming_both_projects() {
    let cfg = parse(&TWO.replace("\"discord:98765\"", "\"discord:98765\", \"slack:C1\""));
    let p = problems(&cfg);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].contains("projects[1].channels[2]")
            && p[0].contains("slack:C1")
            && p[0].contains("\"api\""),
        "{p:?}"
    );
}

#[test]
fn an_unknown_default_project_is_refused_naming_the_projects() {
    let cfg = parse(&TWO.replace("default_project = \"api\"", "default_project = \"apj\""));
    let p = problems(&cfg);
    assert!(
        p.iter()
            .any(|m| m.contains("default_project = \"apj\" names no project")
                && m.contains("\"api\", \"web\"")),
        "{p:?}"
    );
    let alone = parse("default_project = \"x\"\n");
    assert!(
        problems(&alone)[0].contains("no [[projects]] entry"),
        "{:?}",
        problems(&alone)
    );
}

#[test]
fn malformed_projects_are_refused_each_naming_its_key() {
    let cfg = parse(
        r#"
[daemon]
cwd = "/w"
[[projects]]
name = "a b"
channels = ["slak:C1", "slack:", "discord", "console:x", "slack: C1"]
[projects.daemon]
url = "http://x"
[projects.access]
allowed_users = [" "]
[[projects]]
name = "dup"
channels = ["slack:C9"]
[[projects]]
name = "dup"
"#,
    );
    let p = problems(&cfg).join("\n");
    for needle in [
        "[daemon] is set alongside [[projects]]",
        "projects[0].name \"a b\"",
        "projects[0].channels[0] \"slak:C1\" names no platform",
        "projects[0].channels[1] \"slack:\" has a blank",
        "projects[0].channels[2] \"discord\" has no channel id",
        "projects[0].channels[3] \"console:x\": the console has one channel",
        "projects[0].channels[4] \"slack: C1\" has a blank or padded",
        "projects[0].daemon.url must be the daemon's ws://",
        "projects[0].access.allowed_users[0] is blank",
        "projects[2].name \"dup\" is already the name of projects[1]",
        "projects[2] (dup) serves no channel",
    ] {
        assert!(p.contains(needle), "missing {needle:?} in:\n{p}");
    }
}

#[test]
fn unknown_keys_in_a_project_are_refused() {
    let table: toml::Table =
        toml::from_str("[[projects]]\nname = \"a\"\nchanels = [\"console\"]\n").expect("toml");
    let e = Config::try_from(table).expect_err("typo");
    assert!(e.contains("chanels"), "{e}");
}

#[test]
fn s2_a_project_token_in_the_file_is_refused_without_its_value() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("cb.toml");
    std::fs::write(
        &path,
        "[[projects]]\nname = \"a\"\nchannels = [\"console\"]\n[projects.daemon]\nurl = \"ws://d/acp\"\ntoken = \"hunter2-project-token\"\n",
    )
    .expect("write");
    let e = Config::load(Some(&path), env(&[]), &Flags::default())
        .expect_err("a secret in the file")
        .to_string();
    assert!(
        e.contains("projects[0].daemon.token") && e.contains("token_file"),
        "{e}"
    );
    assert!(!e.contains("hunter2"), "S2: {e}");
}

#[test]
fn s1_project_tokens_come_from_their_files_are_redacted_and_a_missing_or_blank_one_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let token = dir.path().join("a.token");
    std::fs::write(&token, "tok-of-project-a-123\n").expect("write");
    let path = dir.path().join("cb.toml");
    let config = |file: &std::path::Path| {
        format!(
            "[[projects]]\nname = \"a\"\nchannels = [\"console\"]\n[projects.daemon]\nurl = \"ws://d/acp\"\ntoken_file = {:?}\n",
            file.display().to_string()
        )
    };
    std::fs::write(&path, config(&token)).expect("write");
    // Valid, and served: the token was read (trimmed) and is among the secrets redacted from chat.
    let cfg = Config::load(Some(&path), env(&[]), &Flags::default())
        .expect("a configuration with [[projects]] loads");
    let secrets = cfg.secrets();
    let (name, value) = secrets
        .iter()
        .find(|(n, _)| n.starts_with("projects[a]"))
        .expect("listed");
    assert_eq!(name, "projects[a].daemon.token_file");
    assert_eq!(value.map(expose), Some("tok-of-project-a-123"));
    assert!(
        cfg.projects.iter().all(|p| p.daemon.token_from_file),
        "read again before a reconnect"
    );
    assert!(
        !format!("{cfg:?}").contains("tok-of-project-a"),
        "S2: Debug hides it"
    );

    let missing = dir.path().join("absent.token");
    std::fs::write(&path, config(&missing)).expect("write");
    let e = Config::load(Some(&path), env(&[]), &Flags::default())
        .expect_err("missing")
        .to_string();
    assert!(
        e.contains("projects[a].daemon.token_file") && e.contains("missing"),
        "{e}"
    );

    std::fs::write(&token, " \n").expect("write");
    std::fs::write(&path, config(&token)).expect("write");
    let e = Config::load(Some(&path), env(&[]), &Flags::default())
        .expect_err("blank")
        .to_string();
    assert!(
        e.contains("projects[a].daemon.token_file is set but empty (S1)"),
        "{e}"
    );
}

#[test]
fn the_worked_example_in_docs_configuration_is_valid() {
    let doc = include_str!("../../../../docs/configuration.md");
    let start = doc.find("A worked example").expect("the example");
    let block = doc[start..]
        .split("```toml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("its toml block");
    let cfg = parse(block);
    assert!(problems(&cfg).is_empty(), "{:?}", problems(&cfg));
    let r = cfg.routes();
    assert_eq!(r.project_for("slack", Some("C0WEB00002")), Some("web"));
    assert_eq!(
        r.project_for("discord", Some("998877665544332211")),
        Some("mobile")
    );
    assert_eq!(r.project_for("console", None), Some("api"));
    assert_eq!(
        r.project_for("slack", Some("C0OTHER")),
        Some("api"),
        "default_project"
    );
    assert_eq!(
        cfg.resolved_projects()[1].liveness.idle,
        Duration::from_secs(300)
    );
}

/// The refusals of `validate` (start-up and `check-config`), in one string.
fn refused(cfg: &Config) -> String {
    match cfg.validate() {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_channel_bound_on_a_platform_not_served_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = parse(&format!(
        "[[projects]]\nname = \"api\"\nchannels = [\"slack:C1\", \"console\", \"discord:9\"]\n[projects.daemon]\ncwd = {:?}\n",
        dir.path().display().to_string()
    ));
    cfg.slack_mut().bot_token = Some("xoxb".into());
    cfg.slack_mut().app_token = Some("xapp-1".into());
    cfg.access.open = true;
    cfg.service.platforms = vec!["slack".into()];
    let err = refused(&cfg);
    assert!(
        err.contains("binds \"console\" but console is not served")
            && err.contains("console.enabled = true")
            && err.contains("binds \"discord:9\" but discord is not served"),
        "{err}"
    );
    // console.enabled adds the console next to the platforms listed.
    cfg.console_mut().enabled = true;
    cfg.projects[0].channels.pop();
    assert_eq!(refused(&cfg), "", "served");
}

#[test]
fn the_console_alone_bound_to_nothing_without_default_project_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = parse(&format!(
        "[[projects]]\nname = \"api\"\nchannels = [\"slack:C1\"]\n[projects.daemon]\ncwd = {:?}\n",
        dir.path().display().to_string()
    ));
    cfg.service.platforms = vec!["console".into()];
    let err = refused(&cfg);
    assert!(
        err.contains("console is served but no project binds a channel on it")
            && err.contains("nothing on console would be answered"),
        "{err}"
    );
    cfg.default_project = Some("api".into());
    assert!(
        !refused(&cfg).contains("nothing on console"),
        "{}",
        refused(&cfg)
    );
}

#[test]
fn a_projects_daemon_gets_the_checks_of_daemon() {
    let cfg = parse(
        r#"
[[projects]]
name = "a"
channels = ["console"]
[projects.daemon]
url = "ws://a:1/acp"
command = ["agent"]
cwd = "/nonexistent/dir/of/a"
[[projects]]
name = "b"
channels = ["slack:C1"]
[projects.daemon]
command = [" "]
[[projects]]
name = "c"
channels = ["slack:C2"]
[projects.daemon]
env = { A = "1" }
"#,
    );
    let p = problems(&cfg).join("\n");
    for needle in [
        "projects[0].daemon.url and projects[0].daemon.command are exclusive",
        "projects[1].daemon.command is empty",
        "projects[2].daemon.env is the environment of a daemon.command agent",
    ] {
        assert!(p.contains(needle), "missing {needle:?} in:\n{p}");
    }
    let err = refused(&cfg);
    assert!(
        err.contains("projects[0].daemon.cwd /nonexistent/dir/of/a is not a directory"),
        "{err}"
    );
}

#[test]
fn default_project_has_its_variable_and_a_stray_daemon_variable_is_named() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("p.toml");
    std::fs::write(
        &path,
        format!(
            "[[projects]]\nname = \"api\"\nchannels = [\"console\"]\n[projects.daemon]\ncwd = {:?}\n",
            dir.path().display().to_string()
        ),
    )
    .expect("write");
    let c = Config::load(
        Some(&path),
        env(&[("CHAT_BRIDGE_DEFAULT_PROJECT", "api")]),
        &Flags::default(),
    )
    .expect("loads");
    assert_eq!(c.default_project.as_deref(), Some("api"));
    let err = Config::load(
        Some(&path),
        env(&[
            ("CHAT_BRIDGE_DEFAULT_PROJECT", "api"),
            ("CHAT_BRIDGE_DAEMON__TOKEN", "t0ken-value"),
        ]),
        &Flags::default(),
    )
    .expect_err("refused")
    .to_string();
    assert!(
        err.contains("[daemon] is set alongside [[projects]]")
            && err.contains("CHAT_BRIDGE_DAEMON__TOKEN")
            && !err.contains("t0ken-value"),
        "{err}"
    );
}
