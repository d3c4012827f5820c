//! Issue 17, projects served: one process on the fake Slack and the fake Discord with three
//! `[[projects]]`, each backed by its own shell agent in its own working directory — `a` on a
//! separate shell-agent server (its `url`, token from its `token_file`) bound to Slack's C1, `b` on
//! a built-in shell agent bound to Discord's channel, `c` on another built-in one as
//! `default_project`. A mention runs `pwd` in the directory of its channel's project; an unbound
//! channel reaches the default project; a reply in a thread stays in its conversation's project and
//! `/status` names it; the history API filters by project; stopping `a`'s daemon leaves `b`
//! answering as fast as before while `/readyz` names `a`. Runs on PostgreSQL and SQLite.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use chat_bridge::config::{Config, Daemon, Project};
use chat_bridge::startup::Application;
use chat_bridge_tests::bridge::config;
use chat_bridge_tests::fake_discord::{self, BOT, CHANNEL, FakeDiscord};
use chat_bridge_tests::fake_slack::{FakeSlack, event_envelope};
use chat_bridge_tests::on_both;
use serde_json::{Value, json};
use shell_agent::{AgentConfig, ShellAgent};
use tokio_util::sync::CancellationToken;

const API_TOKEN: &str = "api-token-of-the-projects-test";

async fn get(base: &str, path: &str) -> Value {
    reqwest::Client::new()
        .get(format!("{base}{path}"))
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .expect("answers")
        .json()
        .await
        .expect("json")
}

/// A directory whose `pwd` is itself: the physical path.
fn dir(root: &Path, name: &str) -> PathBuf {
    let d = root.join(name);
    std::fs::create_dir_all(&d).expect("mkdir");
    d.canonicalize().expect("canonical")
}

fn project(name: &str, channels: &[&str], daemon: Daemon) -> Project {
    Project {
        name: name.into(),
        channels: channels.iter().map(|c| (*c).to_owned()).collect(),
        daemon,
        ..Project::default()
    }
}

fn projects_config(url: &str, root: &Path, a: &ShellAgent, token_file: &Path) -> Config {
    let mut cfg = config(url, root);
    // With [[projects]] each project has its own daemon settings.
    cfg.daemon.cwd = None;
    cfg.projects = vec![
        project(
            "a",
            &["slack:C1"],
            Daemon {
                url: Some(a.url()),
                token: Some(a.token().to_owned().into()),
                token_file: Some(token_file.to_owned()),
                cwd: Some(dir(root, "a")),
                ..Daemon::default()
            },
        ),
        project(
            "b",
            &[&format!("discord:{CHANNEL}")],
            Daemon {
                cwd: Some(dir(root, "b")),
                ..Daemon::default()
            },
        ),
        project(
            "c",
            &[],
            Daemon {
                cwd: Some(dir(root, "c")),
                ..Daemon::default()
            },
        ),
    ];
    cfg.default_project = Some("c".into());
    cfg
}

/// The Slack result message of `pwd` in `channel`'s thread, once it carries a path.
fn slack_pwd(slack: &FakeSlack, channel: &str) -> Option<String> {
    slack
        .calls()
        .into_iter()
        .filter(|c| c.body["channel"] == channel)
        .map(|c| c.body.to_string())
        .find(|b| b.contains("pwd") && b.contains('✅'))
}

fn discord_text(discord: &FakeDiscord, thread: &str) -> String {
    format!("{:?}", discord.messages_in(thread))
}

async fn discord_pwd(discord: &FakeDiscord, message: &str, b_dir: &Path) -> Duration {
    let started = Instant::now();
    discord.dispatch(
        "MESSAGE_CREATE",
        fake_discord::person_message(message, CHANNEL, "501", &format!("<@{BOT}> pwd"), true),
    );
    let b = b_dir.display().to_string();
    discord
        .wait_for("project b's pwd on Discord", |f| {
            discord_text(f, message).contains(&b)
        })
        .await;
    started.elapsed()
}

async fn run(url: &str) {
    chat_bridge_tests::init_tracing();
    let slack = FakeSlack::start().await;
    let discord = FakeDiscord::start(300).await;
    let root_dir = tempfile::tempdir().expect("tmp");
    let root = root_dir.path().canonicalize().expect("canonical");
    // Project a's daemon runs on its own, so the test can stop it.
    let a = ShellAgent::start(
        "127.0.0.1:0".parse().expect("addr"),
        Some("token-of-project-a-daemon".into()),
        AgentConfig {
            heartbeat_interval: Duration::from_millis(200),
            default_timeout: Duration::ZERO,
            ..AgentConfig::default()
        },
    )
    .await
    .expect("project a's shell agent");
    let token_file = root.join("a.token");
    std::fs::write(&token_file, a.token()).expect("token file");
    let mut cfg = projects_config(url, &root, &a, &token_file);
    cfg.service.platforms = vec!["slack".into(), "discord".into()];
    cfg.slack_mut().bot_token = Some("xoxb-test".into());
    cfg.slack_mut().app_token = Some("xapp-1-test".into());
    cfg.slack_mut().api_base_url = slack.base_url.clone();
    cfg.discord_mut().token = Some(fake_discord::TOKEN.into());
    cfg.discord_mut().api_base_url = discord.base_url.clone();
    cfg.access.open = true;
    cfg.http.listen = Some("127.0.0.1:0".into());
    cfg.http.api_token = Some(API_TOKEN.into());
    let stop = CancellationToken::new();
    let app = Application::build(&cfg, stop.clone())
        .await
        .expect("a configuration with [[projects]] starts")
        .expect("active");
    let base = format!("http://{}", app.bridge().http_addr.expect("http"));
    let run = tokio::spawn(app.run_until_stopped());
    discord
        .wait_for("the gateway session (IDENTIFY)", |f| {
            !f.frames_op(2).is_empty()
        })
        .await;
    slack
        .wait_for("the Socket Mode connection", |f| f.sockets() > 0)
        .await;

    // Slack's C1 is project a's: pwd runs in a's directory.
    slack.push(event_envelope(
        "env-1",
        "Ev1",
        0,
        json!({"type": "app_mention", "user": "U1", "channel": "C1", "ts": "1700.000100",
               "text": "<@UBOT> pwd", "event_ts": "1700.000100"}),
    ));
    slack
        .wait_for("project a's pwd", |f| slack_pwd(f, "C1").is_some())
        .await;
    let a_out = slack_pwd(&slack, "C1").expect("a's result");
    assert!(
        a_out.contains(&root.join("a").display().to_string()),
        "C1 is project a's: {a_out}"
    );

    // Discord's channel is project b's.
    let before = discord_pwd(&discord, "1001", &root.join("b")).await;
    let b_text = discord_text(&discord, "1001");
    assert!(
        !b_text.contains(&root.join("a").display().to_string()),
        "{b_text}"
    );

    // C9 is bound to no project: the default project (c) takes it.
    slack.push(event_envelope(
        "env-2",
        "Ev2",
        0,
        json!({"type": "app_mention", "user": "U1", "channel": "C9", "ts": "1700.000300",
               "text": "<@UBOT> pwd", "event_ts": "1700.000300"}),
    ));
    slack
        .wait_for("the default project's pwd", |f| {
            slack_pwd(f, "C9").is_some()
        })
        .await;
    let c_out = slack_pwd(&slack, "C9").expect("c's result");
    assert!(
        c_out.contains(&root.join("c").display().to_string()),
        "an unbound channel goes to default_project: {c_out}"
    );

    // A reply in a's thread stays in a's conversation, and /status names the project.
    slack.push(event_envelope(
        "env-3",
        "Ev3",
        0,
        json!({"type": "message", "user": "U1", "channel": "C1", "ts": "1700.000200",
               "thread_ts": "1700.000100", "text": "/status"}),
    ));
    slack
        .wait_for("/status in a's thread", |f| {
            f.calls()
                .iter()
                .any(|c| c.body["channel"] == "C1" && c.body.to_string().contains("Project: a."))
        })
        .await;

    // The history API filters by project.
    for (name, platform, channel) in [
        ("a", "slack", "C1"),
        ("b", "discord", "1001"),
        ("c", "slack", "C9"),
    ] {
        let page = get(&base, &format!("/api/v1/conversations?project={name}")).await;
        let items = page["items"].as_array().expect("items");
        assert_eq!(items.len(), 1, "project {name}: {page}");
        assert_eq!(items[0]["project"], name, "{page}");
        assert_eq!(items[0]["platform"], platform, "{page}");
        assert_eq!(items[0]["channel"], channel, "{page}");
    }
    let all = get(&base, "/api/v1/conversations").await;
    assert_eq!(all["items"].as_array().expect("items").len(), 3, "{all}");

    let ready = get(&base, "/readyz").await;
    assert_eq!(ready["ready"], true, "{ready}");
    assert_eq!(ready["daemons_down"], json!([]), "{ready}");
    assert_eq!(
        ready["projects"],
        json!([{"project": "a", "daemon": true}, {"project": "b", "daemon": true}, {"project": "c", "daemon": true}]),
        "{ready}"
    );

    // Project a's daemon stops: /readyz names it, b keeps answering as fast as before.
    a.shutdown().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let down = loop {
        let r = get(&base, "/readyz").await;
        if r["daemons_down"] == json!(["a"]) {
            break r;
        }
        assert!(Instant::now() < deadline, "/readyz never named a: {r}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(down["ready"], true, "b and c still serve: {down}");
    assert_eq!(down["daemon"], false, "{down}");
    let during = discord_pwd(&discord, "1002", &root.join("b")).await;
    assert!(
        during <= before * 2 + Duration::from_secs(1),
        "b answered in {during:?} with a's daemon down, {before:?} before"
    );

    // Per-daemon metrics carry the project.
    let metrics = chat_bridge::metrics::handle().expect("recorder").render();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("chatbridge_daemon_events_total{")
                && l.contains("project=\"b\"")
                && !l.trim_end().ends_with(" 0")),
        "{metrics}"
    );

    stop.cancel();
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("stops in time")
        .expect("join")
        .expect("clean shutdown");
}

on_both! {
    async fn issue17_projects_route_channels_to_their_own_daemons_and_one_down_leaves_the_others(db) {
        run(&db.url).await;
    }
}

/// Without `default_project`, a channel bound to no project is ignored (nothing is answered, no
/// conversation is stored) and counted; a project's `allowed_users` admits only them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue17_an_unbound_channel_without_default_project_is_ignored_and_a_projects_allowlist_holds()
 {
    chat_bridge_tests::init_tracing();
    let slack = FakeSlack::start().await;
    let root_dir = tempfile::tempdir().expect("tmp");
    let root = root_dir.path().canonicalize().expect("canonical");
    let mut cfg = config(
        &format!("sqlite://{}", root.join("unbound.db").display()),
        &root,
    );
    cfg.daemon.cwd = None;
    let mut web = project(
        "web",
        &["slack:C2"],
        Daemon {
            cwd: Some(dir(&root, "web")),
            ..Daemon::default()
        },
    );
    web.access.allowed_users = vec!["U2".into()];
    cfg.projects = vec![
        project(
            "api",
            &["slack:C1"],
            Daemon {
                cwd: Some(dir(&root, "api")),
                ..Daemon::default()
            },
        ),
        web,
    ];
    cfg.service.platforms = vec!["slack".into()];
    cfg.slack_mut().bot_token = Some("xoxb-test".into());
    cfg.slack_mut().app_token = Some("xapp-1-test".into());
    cfg.slack_mut().api_base_url = slack.base_url.clone();
    cfg.access.open = true;
    cfg.http.listen = Some("127.0.0.1:0".into());
    cfg.http.api_token = Some(API_TOKEN.into());
    let stop = CancellationToken::new();
    let app = Application::build(&cfg, stop.clone())
        .await
        .expect("build")
        .expect("active");
    let base = format!("http://{}", app.bridge().http_addr.expect("http"));
    let run = tokio::spawn(app.run_until_stopped());
    slack
        .wait_for("the Socket Mode connection", |f| f.sockets() > 0)
        .await;
    let unrouted = || {
        chat_bridge::metrics::handle()
            .expect("recorder")
            .render()
            .lines()
            .find_map(|l| {
                l.strip_prefix("chatbridge_inbound_unrouted_total{platform=\"slack\"} ")
                    .map(|v| v.trim().parse::<f64>().expect("a number"))
            })
            .unwrap_or(0.0)
    };
    let before = unrouted();
    let mention = |env: &str, channel: &str, user: &str, ts: &str| {
        event_envelope(
            env,
            &format!("Ev-{env}"),
            0,
            json!({"type": "app_mention", "user": user, "channel": channel, "ts": ts,
                   "text": "<@UBOT> pwd", "event_ts": ts}),
        )
    };
    // C9 serves no project and there is no default_project; U1 is not on web's list.
    slack.push(mention("u1", "C9", "U1", "1700.000100"));
    slack.push(mention("u2", "C2", "U1", "1700.000200"));
    // Then one each that is answered, so the ignored ones had their chance first (one queue).
    slack.push(mention("u3", "C1", "U1", "1700.000300"));
    slack.push(mention("u4", "C2", "U2", "1700.000400"));
    for channel in ["C1", "C2"] {
        slack
            .wait_for("the bound channels' answers", |f| {
                slack_pwd(f, channel).is_some()
            })
            .await;
    }
    let web_out = slack_pwd(&slack, "C2").expect("web");
    assert!(
        web_out.contains(&root.join("web").display().to_string()),
        "{web_out}"
    );
    assert!(
        slack.calls().iter().all(|c| c.body["channel"] != "C9"),
        "nothing answered in the unbound channel: {:?}",
        slack.calls()
    );
    assert!(
        slack
            .calls_of("chat.postMessage")
            .iter()
            .filter(|c| c.body["channel"] == "C2")
            .all(|c| c.body["thread_ts"] == "1700.000400"),
        "U1's mention in web's channel was not answered"
    );
    assert!(unrouted() >= before + 1.0, "the unbound event is counted");
    let all = get(&base, "/api/v1/conversations").await;
    let mut kept: Vec<(String, String)> = all["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|c| {
            (
                c["project"].as_str().unwrap_or("").to_owned(),
                c["channel"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    kept.sort();
    assert_eq!(
        kept,
        [
            ("api".to_owned(), "C1".to_owned()),
            ("web".to_owned(), "C2".to_owned())
        ],
        "{all}"
    );
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("stops in time")
        .expect("join")
        .expect("clean shutdown");
}

/// One bridge run of `cfg` on the fake Slack: its API base and what stops it.
async fn slack_run(
    slack: &FakeSlack,
    mut cfg: Config,
) -> (
    String,
    CancellationToken,
    tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    cfg.service.platforms = vec!["slack".into()];
    cfg.slack_mut().bot_token = Some("xoxb-test".into());
    cfg.slack_mut().app_token = Some("xapp-1-test".into());
    cfg.slack_mut().api_base_url = slack.base_url.clone();
    cfg.access.open = true;
    cfg.http.listen = Some("127.0.0.1:0".into());
    cfg.http.api_token = Some(API_TOKEN.into());
    let sockets = slack.sockets();
    let stop = CancellationToken::new();
    let app = Application::build(&cfg, stop.clone())
        .await
        .expect("build")
        .expect("active");
    let base = format!("http://{}", app.bridge().http_addr.expect("http"));
    let run = tokio::spawn(app.run_until_stopped());
    slack
        .wait_for("the Socket Mode connection", |f| f.sockets() > sockets)
        .await;
    (base, stop, run)
}

async fn stop_run(stop: CancellationToken, run: tokio::task::JoinHandle<anyhow::Result<()>>) {
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("stops in time")
        .expect("join")
        .expect("clean shutdown");
}

fn slack_reply(n: u32, channel: &str, thread: &str, text: &str) -> Value {
    let ts = format!("1700.{n:06}");
    event_envelope(
        &format!("env-gone-{n}"),
        &format!("Ev-gone-{n}"),
        0,
        json!({"type": "message", "user": "U1", "channel": channel, "ts": ts,
               "thread_ts": thread, "text": text}),
    )
}

/// What was posted to `channel` (each channel below has one thread) after `after` calls.
fn slack_in_thread(slack: &FakeSlack, channel: &str, after: usize) -> Vec<String> {
    slack
        .calls()
        .into_iter()
        .skip(after)
        .filter(|c| c.body["channel"] == channel)
        .map(|c| c.body.to_string())
        .collect()
}

/// A thread whose project is no longer configured goes where its channel is bound now: a thread
/// of the one-project configuration (project `default`) whose channel is then bound to `beta`
/// (listed second, after `alpha`) runs in beta's directory — not on the first-listed project's
/// daemon — is stored as beta's (`/status`, the API), and is told once that it continues there
/// without the earlier context. A thread of a project removed since, whose channel serves no
/// project and with no `default_project`, is not run anywhere and is told once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue17_a_thread_of_a_project_no_longer_configured_goes_where_its_channel_goes_now() {
    chat_bridge_tests::init_tracing();
    let slack = FakeSlack::start().await;
    let root_dir = tempfile::tempdir().expect("tmp");
    let root = root_dir.path().canonicalize().expect("canonical");
    let db = format!("sqlite://{}", root.join("gone.db").display());
    let old = dir(&root, "old");
    let alpha = dir(&root, "alpha");
    let beta = dir(&root, "beta");
    let qwen = dir(&root, "qwen");

    // 1. One project: a thread in C1 (project `default`); a second run with project `qwen` on C2.
    let (_, stop, run) = slack_run(&slack, config(&db, &old)).await;
    slack.push(event_envelope(
        "env-gone-0",
        "Ev-gone-0",
        0,
        json!({"type": "app_mention", "user": "U1", "channel": "C1", "ts": "1700.000001",
               "text": "<@UBOT> pwd", "event_ts": "1700.000001"}),
    ));
    slack
        .wait_for("pwd in the one-project thread", |f| {
            slack_pwd(f, "C1").is_some()
        })
        .await;
    stop_run(stop, run).await;
    let mut cfg = config(&db, &root);
    cfg.daemon.cwd = None;
    let with_qwen = |cfg: &mut Config| {
        cfg.projects = vec![
            project(
                "alpha",
                &["slack:C9"],
                Daemon {
                    cwd: Some(alpha.clone()),
                    ..Daemon::default()
                },
            ),
            project(
                "qwen",
                &["slack:C2"],
                Daemon {
                    cwd: Some(qwen.clone()),
                    ..Daemon::default()
                },
            ),
        ];
    };
    with_qwen(&mut cfg);
    let (_, stop, run) = slack_run(&slack, cfg.clone()).await;
    slack.push(event_envelope(
        "env-gone-q",
        "Ev-gone-q",
        0,
        json!({"type": "app_mention", "user": "U1", "channel": "C2", "ts": "1700.000002",
               "text": "<@UBOT> pwd", "event_ts": "1700.000002"}),
    ));
    slack
        .wait_for("pwd in qwen's thread", |f| slack_pwd(f, "C2").is_some())
        .await;
    stop_run(stop, run).await;

    // 2. alpha (listed first, C9) and beta (C1); qwen removed, C2 bound to nothing, no default.
    cfg.projects = vec![
        project(
            "alpha",
            &["slack:C9"],
            Daemon {
                cwd: Some(alpha.clone()),
                ..Daemon::default()
            },
        ),
        project(
            "beta",
            &["slack:C1"],
            Daemon {
                cwd: Some(beta.clone()),
                ..Daemon::default()
            },
        ),
    ];
    let (base, stop, run) = slack_run(&slack, cfg).await;
    let mark = slack.calls().len();
    slack.push(slack_reply(10, "C1", "1700.000001", "pwd"));
    let beta_s = beta.display().to_string();
    slack
        .wait_for("pwd in beta's directory", |f| {
            slack_in_thread(f, "C1", mark)
                .iter()
                .any(|b| b.contains(&beta_s))
        })
        .await;
    slack.push(slack_reply(11, "C1", "1700.000001", "/status"));
    slack
        .wait_for("/status naming beta", |f| {
            slack_in_thread(f, "C1", mark)
                .iter()
                .any(|b| b.contains("Project: beta."))
        })
        .await;
    let c1 = slack_in_thread(&slack, "C1", mark);
    let alpha_s = alpha.display().to_string();
    assert!(
        c1.iter().all(|b| !b.contains(&alpha_s)),
        "nothing ran on the first-listed project's daemon: {c1:?}"
    );
    let moved: Vec<_> = c1
        .iter()
        .filter(|b| b.contains("continues in project beta"))
        .collect();
    assert_eq!(moved.len(), 1, "told once: {c1:?}");
    assert!(moved[0].contains("project default"), "{moved:?}");
    let page = get(&base, "/api/v1/conversations?project=beta").await;
    let items = page["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{page}");
    assert_eq!(items[0]["channel"], "C1", "{page}");

    // qwen's thread: its channel serves no project now; twice, told once, nothing run.
    slack.push(slack_reply(12, "C2", "1700.000002", "echo first"));
    slack.push(slack_reply(13, "C2", "1700.000002", "echo second"));
    // A mention in C1 after them (one queue): once it is answered, both were taken.
    slack.push(slack_reply(14, "C1", "1700.000001", "echo after"));
    slack
        .wait_for("the later answer in beta's thread", |f| {
            slack_in_thread(f, "C1", mark)
                .iter()
                .any(|b| b.contains("echo after") && b.contains('✅'))
        })
        .await;
    slack
        .wait_for("qwen's thread told", |f| {
            slack_in_thread(f, "C2", mark)
                .iter()
                .any(|b| b.contains("project qwen is no longer served here"))
        })
        .await;
    let c2 = slack_in_thread(&slack, "C2", mark);
    assert_eq!(
        c2.iter()
            .filter(|b| b.contains("no longer served here"))
            .count(),
        1,
        "told once: {c2:?}"
    );
    assert!(
        c2.iter()
            .all(|b| !b.contains("echo first") && !b.contains("echo second")),
        "nothing ran: {c2:?}"
    );
    let page = get(&base, "/api/v1/conversations?project=qwen").await;
    assert_eq!(page["items"].as_array().expect("items").len(), 1, "{page}");
    stop_run(stop, run).await;
}

/// A port nothing listens on yet (the daemon started on it later).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// A shell-agent server on `port` with `token`, as a project's own daemon.
async fn agent_on(port: u16, token: &str) -> ShellAgent {
    ShellAgent::start(
        format!("127.0.0.1:{port}").parse().expect("addr"),
        Some(token.into()),
        AgentConfig {
            heartbeat_interval: Duration::from_millis(200),
            default_timeout: Duration::ZERO,
            ..AgentConfig::default()
        },
    )
    .await
    .expect("the daemon starts on its port")
}

/// Waits until `/readyz` says `pred`.
async fn readyz_until(base: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = get(base, "/readyz").await;
        if pred(&r) {
            return r;
        }
        assert!(Instant::now() < deadline, "/readyz never {what}: {r}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The tool calls stored for the one conversation of `project`.
async fn tool_calls_of(base: &str, project: &str) -> Vec<Value> {
    let page = get(base, &format!("/api/v1/conversations?project={project}")).await;
    let items = page["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "one conversation of {project}: {page}");
    let id = items[0]["id"].as_str().expect("id");
    let detail = get(base, &format!("/api/v1/conversations/{id}")).await;
    detail["tool_calls"].as_array().cloned().unwrap_or_default()
}

/// L7 per project at start-up: project a's daemon does not listen when the bridge starts. The
/// bridge starts anyway; b (a built-in shell agent, on Discord) answers at once; `/readyz` is
/// ready (b serves) and names a in `daemons_down`; a mention in a's Slack channel is held with the
/// one "agent is unreachable" notice. Then a's daemon (a shell-agent server) starts on its port:
/// the bridge connects, `/readyz` lists nobody, and the held `pwd` runs once, in a's directory.
async fn a_project_whose_daemon_is_down_at_start(url: &str) {
    chat_bridge_tests::init_tracing();
    let slack = FakeSlack::start().await;
    let discord = FakeDiscord::start(300).await;
    let root_dir = tempfile::tempdir().expect("tmp");
    let root = root_dir.path().canonicalize().expect("canonical");
    let port = free_port();
    let token = "token-of-project-a-daemon";
    let token_file = root.join("a.token");
    std::fs::write(&token_file, token).expect("token file");
    let mut cfg = config(url, &root);
    cfg.daemon.cwd = None;
    cfg.projects = vec![
        project(
            "a",
            &["slack:C1"],
            Daemon {
                url: Some(format!("ws://127.0.0.1:{port}/acp")),
                token: Some(token.to_owned().into()),
                token_file: Some(token_file.clone()),
                cwd: Some(dir(&root, "a")),
                ..Daemon::default()
            },
        ),
        project(
            "b",
            &[&format!("discord:{CHANNEL}")],
            Daemon {
                cwd: Some(dir(&root, "b")),
                ..Daemon::default()
            },
        ),
    ];
    cfg.service.platforms = vec!["slack".into(), "discord".into()];
    cfg.slack_mut().bot_token = Some("xoxb-test".into());
    cfg.slack_mut().app_token = Some("xapp-1-test".into());
    cfg.slack_mut().api_base_url = slack.base_url.clone();
    cfg.discord_mut().token = Some(fake_discord::TOKEN.into());
    cfg.discord_mut().api_base_url = discord.base_url.clone();
    cfg.access.open = true;
    cfg.http.listen = Some("127.0.0.1:0".into());
    cfg.http.api_token = Some(API_TOKEN.into());
    let stop = CancellationToken::new();
    let app = Application::build(&cfg, stop.clone())
        .await
        .expect("the bridge starts while project a's daemon is down")
        .expect("active");
    let base = format!("http://{}", app.bridge().http_addr.expect("http"));
    let run = tokio::spawn(app.run_until_stopped());
    discord
        .wait_for("the gateway session (IDENTIFY)", |f| {
            !f.frames_op(2).is_empty()
        })
        .await;
    slack
        .wait_for("the Socket Mode connection", |f| f.sockets() > 0)
        .await;

    let ready = get(&base, "/readyz").await;
    assert_eq!(ready["ready"], true, "b serves: {ready}");
    assert_eq!(ready["daemons_down"], json!(["a"]), "{ready}");

    // b answers at once.
    let b_took = discord_pwd(&discord, "1001", &root.join("b")).await;
    assert!(b_took < Duration::from_secs(10), "b took {b_took:?}");

    // A mention in a's channel is held, with one notice.
    slack.push(event_envelope(
        "env-held",
        "Ev-held",
        0,
        json!({"type": "app_mention", "user": "U1", "channel": "C1", "ts": "1700.000100",
               "text": "<@UBOT> pwd", "event_ts": "1700.000100"}),
    ));
    slack
        .wait_for("the unreachable notice in a's thread", |f| {
            slack_in_thread(f, "C1", 0)
                .iter()
                .any(|b| b.contains("The agent is unreachable"))
        })
        .await;
    assert!(slack_pwd(&slack, "C1").is_none(), "nothing ran on a yet");

    // a's daemon comes up on its port: the bridge connects and runs the held message.
    let a = agent_on(port, token).await;
    readyz_until(&base, "empty daemons_down", |r| {
        r["daemons_down"] == json!([])
    })
    .await;
    slack
        .wait_for("the held pwd in a's directory", |f| {
            slack_pwd(f, "C1").is_some()
        })
        .await;
    let a_out = slack_pwd(&slack, "C1").expect("a's result");
    assert!(
        a_out.contains(&root.join("a").display().to_string()),
        "ran in a's directory: {a_out}"
    );
    // Whatever is still delivered, the command ran once and the notice was given once.
    let calls = tool_calls_of(&base, "a").await;
    assert_eq!(
        calls.len(),
        1,
        "the held message ran exactly once: {calls:?}"
    );
    let c1 = slack_in_thread(&slack, "C1", 0);
    assert_eq!(
        c1.iter()
            .filter(|b| b.contains("The agent is unreachable"))
            .count(),
        1,
        "one notice: {c1:?}"
    );
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("stops in time")
        .expect("join")
        .expect("clean shutdown");
    a.shutdown().await;
}

on_both! {
    async fn l7_a_project_whose_daemon_is_down_at_start_up_is_held_while_the_others_answer(db) {
        a_project_whose_daemon_is_down_at_start(&db.url).await;
    }
}

/// L7 in the one-project configuration: the bridge starts while its daemon does not listen
/// (it used to exit), `/readyz` says not ready with `"daemon": false`, a message is held with one
/// notice, and once the daemon listens the bridge connects and runs it, once.
async fn the_one_daemon_is_down_at_start(url: &str) {
    chat_bridge_tests::init_tracing();
    let slack = FakeSlack::start().await;
    let root_dir = tempfile::tempdir().expect("tmp");
    let root = root_dir.path().canonicalize().expect("canonical");
    let port = free_port();
    let token = "token-of-the-one-daemon";
    let mut cfg = config(url, &root);
    cfg.daemon.url = Some(format!("ws://127.0.0.1:{port}/acp"));
    cfg.daemon.token = Some(token.to_owned().into());
    let (base, stop, run) = slack_run(&slack, cfg).await;
    let ready = get(&base, "/readyz").await;
    assert_eq!(ready["ready"], false, "{ready}");
    assert_eq!(ready["role"], "active", "{ready}");
    assert_eq!(ready["daemon"], false, "{ready}");
    slack.push(event_envelope(
        "env-one",
        "Ev-one",
        0,
        json!({"type": "app_mention", "user": "U1", "channel": "C1", "ts": "1700.000100",
               "text": "<@UBOT> pwd", "event_ts": "1700.000100"}),
    ));
    slack
        .wait_for("the unreachable notice", |f| {
            slack_in_thread(f, "C1", 0)
                .iter()
                .any(|b| b.contains("The agent is unreachable"))
        })
        .await;
    assert!(slack_pwd(&slack, "C1").is_none(), "nothing ran yet");
    let daemon = agent_on(port, token).await;
    readyz_until(&base, "ready", |r| r["ready"] == true).await;
    slack
        .wait_for("the held pwd", |f| slack_pwd(f, "C1").is_some())
        .await;
    let out = slack_pwd(&slack, "C1").expect("result");
    assert!(
        out.contains(&root.display().to_string()),
        "in daemon.cwd: {out}"
    );
    let calls = tool_calls_of(&base, "default").await;
    assert_eq!(calls.len(), 1, "ran exactly once: {calls:?}");
    let c1 = slack_in_thread(&slack, "C1", 0);
    assert_eq!(
        c1.iter()
            .filter(|b| b.contains("The agent is unreachable"))
            .count(),
        1,
        "one notice: {c1:?}"
    );
    stop_run(stop, run).await;
    daemon.shutdown().await;
}

on_both! {
    async fn l7_the_bridge_starts_while_its_one_daemon_is_down_and_runs_the_held_message_once_it_is_up(db) {
        the_one_daemon_is_down_at_start(&db.url).await;
    }
}

/// The id of the one conversation of `project`.
async fn conversation_of(base: &str, project: &str) -> String {
    let page = get(base, &format!("/api/v1/conversations?project={project}")).await;
    let items = page["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "one conversation of {project}: {page}");
    items[0]["id"].as_str().expect("id").to_owned()
}

/// A project removed, then the deployment moved back to the single `[daemon]`:
/// - at start-up a turn left open by the removed project `gone` is closed as interrupted with a
///   notice in its thread, and its due schedule fires on no daemon (neither with `[[projects]]` nor
///   with the one daemon);
/// - its thread, whose channel serves no project, is told once that it is not served — and not
///   again after a restart (the notice is stored);
/// - with the one `[daemon]` again, a thread of project `alpha` continues in `default`: told once,
///   a new session in `daemon.cwd`, stored as `default`'s (its old session is not loaded).
async fn removed_projects_and_back_to_one_daemon(url: &str) {
    chat_bridge_tests::init_tracing();
    let slack = FakeSlack::start().await;
    let root_dir = tempfile::tempdir().expect("tmp");
    let root = root_dir.path().canonicalize().expect("canonical");
    let alpha = dir(&root, "alpha");
    let gone = dir(&root, "gone");
    let one = dir(&root, "one");
    let mut cfg = config(url, &root);
    cfg.daemon.cwd = None;
    cfg.schedules.check_every = Duration::from_millis(50);
    let alpha_project = project(
        "alpha",
        &["slack:C1"],
        Daemon {
            cwd: Some(alpha.clone()),
            ..Daemon::default()
        },
    );
    cfg.projects = vec![
        alpha_project.clone(),
        project(
            "gone",
            &["slack:C2"],
            Daemon {
                cwd: Some(gone.clone()),
                ..Daemon::default()
            },
        ),
    ];

    // 1. Both projects serve a thread each.
    let (base, stop, run) = slack_run(&slack, cfg.clone()).await;
    for (n, channel) in [(1, "C1"), (2, "C2")] {
        slack.push(event_envelope(
            &format!("env-back-{n}"),
            &format!("Ev-back-{n}"),
            0,
            json!({"type": "app_mention", "user": "U1", "channel": channel,
                   "ts": format!("1700.00000{n}"), "text": "<@UBOT> pwd",
                   "event_ts": format!("1700.00000{n}")}),
        ));
        slack
            .wait_for("pwd", |f| slack_pwd(f, channel).is_some())
            .await;
    }
    let gone_conv = conversation_of(&base, "gone").await;
    stop_run(stop, run).await;

    // What the previous run left of `gone`: an open turn and a due schedule.
    let store = chat_bridge::store::Store::open(url).await.expect("store");
    {
        let mut c = store.conn().await.expect("conn");
        let now = chat_bridge::store::now_ms();
        chat_bridge::store::turns::start(&mut c, &gone_conv, "sleep 100", "U1", now)
            .await
            .expect("an open turn");
        chat_bridge::store::schedules::add(
            &mut c,
            &chat_bridge::store::schedules::Schedule {
                id: "s1".into(),
                conversation_id: gone_conv.clone(),
                created_by: "U1".into(),
                prompt: "echo scheduled-in-gone".into(),
                every_ms: Some(60_000),
                next_run_at: now - 1_000,
                created_at: now - 60_000,
            },
        )
        .await
        .expect("a due schedule");
    }

    // 2. `gone` removed: C2 is bound to nothing, no default_project.
    cfg.projects = vec![alpha_project];
    let mark = slack.calls().len();
    let (_, stop, run) = slack_run(&slack, cfg.clone()).await;
    slack
        .wait_for("the interrupted notice in gone's thread", |f| {
            slack_in_thread(f, "C2", mark).iter().any(|b| {
                b.contains("project gone is no longer configured; the turn was interrupted")
            })
        })
        .await;
    {
        let mut c = store.conn().await.expect("conn");
        let turns = chat_bridge::store::turns::of_conversation(&mut c, &gone_conv)
            .await
            .expect("turns");
        assert!(
            turns.iter().all(|t| t.status != "open"),
            "no turn of gone left open: {turns:?}"
        );
        assert!(
            turns
                .iter()
                .any(|t| t.status == "interrupted" && t.prompt == "sleep 100"),
            "{turns:?}"
        );
    }
    slack.push(slack_reply(20, "C2", "1700.000002", "echo in-gone"));
    // A message in alpha's thread after it (one queue): once answered, the reply was taken, and
    // the schedule had many checks to fire in.
    slack.push(slack_reply(21, "C1", "1700.000001", "echo in-alpha"));
    slack
        .wait_for("alpha's answer", |f| {
            slack_in_thread(f, "C1", mark)
                .iter()
                .any(|b| b.contains("echo in-alpha") && b.contains('✅'))
        })
        .await;
    slack
        .wait_for("gone's thread told it is not served", |f| {
            slack_in_thread(f, "C2", mark)
                .iter()
                .any(|b| b.contains("This thread's project gone is no longer served here."))
        })
        .await;
    stop_run(stop, run).await;

    // 3. A restart: the thread is not told again.
    let (_, stop, run) = slack_run(&slack, cfg.clone()).await;
    slack.push(slack_reply(22, "C2", "1700.000002", "echo in-gone-again"));
    slack.push(slack_reply(23, "C1", "1700.000001", "echo in-alpha-again"));
    slack
        .wait_for("alpha's second answer", |f| {
            slack_in_thread(f, "C1", mark)
                .iter()
                .any(|b| b.contains("echo in-alpha-again") && b.contains('✅'))
        })
        .await;
    stop_run(stop, run).await;

    // 4. Back to the one [daemon].
    cfg.projects = Vec::new();
    cfg.daemon.cwd = Some(one.clone());
    let (base1, stop, run) = slack_run(&slack, cfg).await;
    slack.push(slack_reply(24, "C1", "1700.000001", "pwd"));
    let one_s = one.display().to_string();
    slack
        .wait_for("pwd in the one daemon's directory", |f| {
            slack_in_thread(f, "C1", mark)
                .iter()
                .any(|b| b.contains(&one_s) && b.contains('✅'))
        })
        .await;
    slack.push(slack_reply(25, "C1", "1700.000001", "echo once-more"));
    slack
        .wait_for("the next answer", |f| {
            slack_in_thread(f, "C1", mark)
                .iter()
                .any(|b| b.contains("echo once-more") && b.contains('✅'))
        })
        .await;
    let c1 = slack_in_thread(&slack, "C1", mark);
    let moved: Vec<_> = c1
        .iter()
        .filter(|b| b.contains("continues in project default"))
        .collect();
    assert_eq!(moved.len(), 1, "told once: {c1:?}");
    assert!(moved[0].contains("project alpha"), "{moved:?}");
    let page = get(&base1, "/api/v1/conversations?project=default").await;
    let items = page["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "alpha's thread is default's now: {page}");
    assert_eq!(items[0]["channel"], "C1", "{page}");
    stop_run(stop, run).await;

    let c2 = slack_in_thread(&slack, "C2", mark);
    assert_eq!(
        c2.iter()
            .filter(|b| b.contains("no longer served here."))
            .count(),
        1,
        "told once, across a restart: {c2:?}"
    );
    assert!(
        c2.iter()
            .all(|b| !b.contains("in-gone") && !b.contains("scheduled-in-gone")),
        "nothing of gone ran: {c2:?}"
    );
    {
        let mut c = store.conn().await.expect("conn");
        let left = chat_bridge::store::schedules::of(&mut c, &gone_conv)
            .await
            .expect("schedules");
        assert_eq!(left.len(), 1, "{left:?}");
        assert!(
            left[0].next_run_at < chat_bridge::store::now_ms(),
            "never fired, still due: {left:?}"
        );
    }
    store.close().await;
}

on_both! {
    async fn issue17_a_removed_projects_open_turn_is_interrupted_its_schedules_fire_nowhere_and_back_to_one_daemon_moves_threads(db) {
        removed_projects_and_back_to_one_daemon(&db.url).await;
    }
}

/// L7 with D3: a turn the previous run left open, taken back by a bridge started while its daemon
/// is down, is not written off at once (its session cannot be asked for yet): `/status` answers that
/// the agent is unreachable and nothing is interrupted. Once the daemon is reached its session is
/// loaded — this daemon started afresh no longer has it — so the turn ends as interrupted then, once,
/// and the thread carries on.
async fn an_open_turn_taken_back_while_the_daemon_is_down(url: &str) {
    chat_bridge_tests::init_tracing();
    let slack = FakeSlack::start().await;
    let root_dir = tempfile::tempdir().expect("tmp");
    let root = root_dir.path().canonicalize().expect("canonical");
    let port = free_port();
    let token = "token-of-the-one-daemon";
    let mut cfg = config(url, &root);
    cfg.daemon.url = Some(format!("ws://127.0.0.1:{port}/acp"));
    cfg.daemon.token = Some(token.to_owned().into());
    let first = agent_on(port, token).await;
    let (base, stop, run) = slack_run(&slack, cfg.clone()).await;
    slack.push(event_envelope(
        "env-open",
        "Ev-open",
        0,
        json!({"type": "app_mention", "user": "U1", "channel": "C1", "ts": "1700.000100",
               "text": "<@UBOT> pwd", "event_ts": "1700.000100"}),
    ));
    slack
        .wait_for("pwd", |f| slack_pwd(f, "C1").is_some())
        .await;
    let conv = conversation_of(&base, "default").await;
    stop_run(stop, run).await;
    first.shutdown().await;
    // As a crash mid-turn leaves it.
    let store = chat_bridge::store::Store::open(url).await.expect("store");
    {
        let mut c = store.conn().await.expect("conn");
        chat_bridge::store::turns::start(
            &mut c,
            &conv,
            "sleep 100",
            "U1",
            chat_bridge::store::now_ms(),
        )
        .await
        .expect("an open turn");
    }

    let mark = slack.calls().len();
    let (_, stop, run) = slack_run(&slack, cfg).await;
    slack.push(slack_reply(30, "C1", "1700.000100", "/status"));
    slack
        .wait_for("/status while the daemon is down", |f| {
            slack_in_thread(f, "C1", mark)
                .iter()
                .any(|b| b.contains("The agent is unreachable"))
        })
        .await;
    let lost = "The bridge restarted during this turn and the agent no longer has it";
    let before = slack_in_thread(&slack, "C1", mark);
    assert!(
        before.iter().all(|b| !b.contains(lost)),
        "not written off while the daemon cannot be asked: {before:?}"
    );
    let second = agent_on(port, token).await;
    slack
        .wait_for("the turn interrupted once the daemon is reached", |f| {
            slack_in_thread(f, "C1", mark)
                .iter()
                .any(|b| b.contains(lost))
        })
        .await;
    slack.push(slack_reply(31, "C1", "1700.000100", "echo carries-on"));
    slack
        .wait_for("the next message runs", |f| {
            slack_in_thread(f, "C1", mark)
                .iter()
                .any(|b| b.contains("echo carries-on") && b.contains('✅'))
        })
        .await;
    let c1 = slack_in_thread(&slack, "C1", mark);
    assert_eq!(
        c1.iter().filter(|b| b.contains(lost)).count(),
        1,
        "told once: {c1:?}"
    );
    stop_run(stop, run).await;
    second.shutdown().await;
    store.close().await;
}

on_both! {
    async fn l7_d3_an_open_turn_taken_back_while_the_daemon_is_down_is_settled_once_it_is_reached(db) {
        an_open_turn_taken_back_while_the_daemon_is_down(&db.url).await;
    }
}

/// L7 on a reconnect: project a's daemon, reached at start-up, drops and comes back refusing the
/// token. The project stays in `daemons_down`, a message is held (one notice), the client keeps
/// trying on its backoff; once the daemon takes the token again the held `pwd` runs, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l7_a_daemon_back_with_a_refused_token_holds_messages_and_is_retried_until_it_accepts() {
    refused_token_then_accepted(true).await;
}

/// L7 after start-up: project a's daemon is down when the bridge starts and first comes up refusing
/// the token. The bridge does not stop (its other projects would stop with it): a is in
/// `daemons_down`, its message is held, the client keeps trying, and once the daemon takes the
/// token the held `pwd` runs, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l7_a_daemon_first_reached_after_start_up_refusing_the_token_is_retried_and_the_bridge_runs_on()
 {
    refused_token_then_accepted(false).await;
}

/// A daemon refusing a's token, reached before (`reached_first`) or never reached yet.
async fn refused_token_then_accepted(reached_first: bool) {
    chat_bridge_tests::init_tracing();
    let slack = FakeSlack::start().await;
    let root_dir = tempfile::tempdir().expect("tmp");
    let root = root_dir.path().canonicalize().expect("canonical");
    let db = format!("sqlite://{}", root.join("refused.db").display());
    let port = free_port();
    let token = "token-of-project-a-daemon";
    let token_file = root.join("a.token");
    std::fs::write(&token_file, token).expect("token file");
    let mut cfg = config(&db, &root);
    cfg.daemon.cwd = None;
    cfg.projects = vec![project(
        "a",
        &["slack:C1"],
        Daemon {
            url: Some(format!("ws://127.0.0.1:{port}/acp")),
            token: Some(token.to_owned().into()),
            token_file: Some(token_file),
            cwd: Some(dir(&root, "a")),
            ..Daemon::default()
        },
    )];
    let (base, stop, run, refused, refusing) = if reached_first {
        let a = agent_on(port, token).await;
        let (base, stop, run) = slack_run(&slack, cfg).await;
        readyz_until(&base, "a up", |r| r["daemons_down"] == json!([])).await;
        a.shutdown().await;
        let (refused, refusing) = chat_bridge_tests::refusing_daemon(port).await;
        (base, stop, run, refused, refusing)
    } else {
        let (base, stop, run) = slack_run(&slack, cfg).await;
        readyz_until(&base, "a down from the start", |r| {
            r["daemons_down"] == json!(["a"])
        })
        .await;
        let (refused, refusing) = chat_bridge_tests::refusing_daemon(port).await;
        (base, stop, run, refused, refusing)
    };
    readyz_until(&base, "a down", |r| r["daemons_down"] == json!(["a"])).await;
    slack.push(event_envelope(
        "env-refused",
        "Ev-refused",
        0,
        json!({"type": "app_mention", "user": "U1", "channel": "C1", "ts": "1700.000200",
               "text": "<@UBOT> pwd", "event_ts": "1700.000200"}),
    ));
    slack
        .wait_for("the unreachable notice in a's thread", |f| {
            slack_in_thread(f, "C1", 0)
                .iter()
                .any(|b| b.contains("The agent is unreachable"))
        })
        .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while refused.load(Ordering::SeqCst) < 2 {
        assert!(
            Instant::now() < deadline,
            "the bridge stopped trying a's daemon"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ready = get(&base, "/readyz").await;
    assert_eq!(ready["daemons_down"], json!(["a"]), "{ready}");
    assert!(
        !run.is_finished(),
        "a refused token does not stop the bridge"
    );
    assert!(slack_pwd(&slack, "C1").is_none(), "nothing ran on a yet");

    refusing.abort();
    let _ = refusing.await;
    let a = agent_on(port, token).await;
    readyz_until(&base, "a back", |r| r["daemons_down"] == json!([])).await;
    slack
        .wait_for("the held pwd in a's directory", |f| {
            slack_pwd(f, "C1").is_some()
        })
        .await;
    let calls = tool_calls_of(&base, "a").await;
    assert_eq!(
        calls.len(),
        1,
        "the held message ran exactly once: {calls:?}"
    );
    stop_run(stop, run).await;
    a.shutdown().await;
}

/// A message held for project a (its daemon down) when the bridge stops, after which the
/// configuration removes a and binds its channel to b (the built-in shell agent): at the next start
/// the held text is not run on b's daemon — it was written for a's agent — and the thread is told
/// plainly it was not run and to send it again; a message sent again runs in b.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l7_a_message_held_for_a_removed_project_is_not_run_on_the_project_its_thread_moves_to() {
    chat_bridge_tests::init_tracing();
    let slack = FakeSlack::start().await;
    let root_dir = tempfile::tempdir().expect("tmp");
    let root = root_dir.path().canonicalize().expect("canonical");
    let db = format!("sqlite://{}", root.join("moved.db").display());
    let port = free_port();
    let token_file = root.join("a.token");
    std::fs::write(&token_file, "token-of-a").expect("token file");
    let mut cfg = config(&db, &root);
    cfg.daemon.cwd = None;
    cfg.projects = vec![project(
        "a",
        &["slack:C1"],
        Daemon {
            url: Some(format!("ws://127.0.0.1:{port}/acp")),
            token: Some("token-of-a".to_owned().into()),
            token_file: Some(token_file),
            cwd: Some(dir(&root, "a")),
            ..Daemon::default()
        },
    )];
    let (_, stop, run) = slack_run(&slack, cfg.clone()).await;
    slack.push(event_envelope(
        "env-moved",
        "Ev-moved",
        0,
        json!({"type": "app_mention", "user": "U1", "channel": "C1", "ts": "1700.000300",
               "text": "<@UBOT> pwd", "event_ts": "1700.000300"}),
    ));
    slack
        .wait_for("the unreachable notice in a's thread", |f| {
            slack_in_thread(f, "C1", 0)
                .iter()
                .any(|b| b.contains("The agent is unreachable"))
        })
        .await;
    stop_run(stop, run).await;

    let b = dir(&root, "b");
    cfg.projects = vec![project(
        "b",
        &["slack:C1"],
        Daemon {
            cwd: Some(b.clone()),
            ..Daemon::default()
        },
    )];
    let mark = slack.calls().len();
    let (_, stop, run) = slack_run(&slack, cfg).await;
    slack
        .wait_for("the thread told the held message was not run", |f| {
            slack_in_thread(f, "C1", mark)
                .iter()
                .any(|b| b.contains("was not run in project b") && b.contains("send it again"))
        })
        .await;
    slack.push(slack_reply(30, "C1", "1700.000300", "pwd"));
    let b_s = b.display().to_string();
    slack
        .wait_for("the message sent again runs in b", |f| {
            slack_in_thread(f, "C1", mark)
                .iter()
                .any(|m| m.contains(&b_s))
        })
        .await;
    let runs = slack_in_thread(&slack, "C1", mark)
        .iter()
        .filter(|m| m.contains(&b_s) && m.contains('✅'))
        .count();
    assert!(runs <= 1, "only the message sent again ran in b");
    stop_run(stop, run).await;
}
