//! `chat-bridge`: parses the command line, sets up logging, runs the chosen command, reports its exit.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use chat_bridge::channel::console;
use chat_bridge::config::{Config, ExposeSecret, Flags, SecretString, mask_url};
use chat_bridge::history_cli;
use clap::{Parser, Subcommand};
use shell_agent::{AgentConfig, ShellAgent, parse_duration};
use tokio_util::sync::CancellationToken;

/// chat-bridge: work with a coding-agent daemon from Slack, Discord and the console.
///
/// With no command it runs the bridge; with no configuration at all that is the embedded default:
/// the built-in shell agent, the console channel and SQLite in the working directory.
#[derive(Debug, Parser)]
#[command(name = "chat-bridge", version)]
struct Cli {
    /// A TOML config file (see docs/configuration.md).
    #[arg(long, global = true, env = "CHAT_BRIDGE_CONFIG")]
    config: Option<std::path::PathBuf>,
    /// Overrides database.url (a password in it shows in `ps`: prefer CHAT_BRIDGE_DATABASE__URL).
    #[arg(long, global = true, value_parser = secret)]
    database_url: Option<SecretString>,
    /// Overrides daemon.url (unset: the built-in shell agent).
    #[arg(long, global = true)]
    daemon_url: Option<String>,
    /// Overrides daemon.token (prefer CHAT_BRIDGE_DAEMON__TOKEN: flags show in `ps`).
    #[arg(long, global = true, hide_env_values = true, value_parser = secret)]
    daemon_token: Option<SecretString>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the built-in ACP daemon: each prompt is a shell command run in a PTY.
    ShellAgent(ShellAgentArgs),
    /// Serve a stdio ACP agent (`-- qwen --acp`) over WebSocket `/acp` with a bearer token, so it can
    /// run next to the repository while the bridge runs elsewhere.
    AgentHost(AgentHostArgs),
    /// Apply the database migrations (also done at start-up); safe to run again.
    Migrate,
    /// Reads the configuration (file, environment, flags) and says what it would run; exits 1 with
    /// the reason when it is invalid. Secrets are never printed.
    CheckConfig,
    /// Read past sessions.
    #[command(subcommand)]
    History(HistoryCommand),
}

#[derive(Debug, Subcommand)]
enum HistoryCommand {
    /// Conversations, newest first.
    List {
        /// `slack`, `discord`, `console`.
        #[arg(long)]
        platform: Option<String>,
        /// The project (`default` in the one-project configuration).
        #[arg(long)]
        project: Option<String>,
        /// Channel id.
        #[arg(long)]
        channel: Option<String>,
        /// Who started it.
        #[arg(long)]
        user: Option<String>,
        /// The conversation's state (`active`).
        #[arg(long)]
        status: Option<String>,
        /// Started at or after: `2026-11-29`, `2026-11-29T14:05:00Z`, unix ms, or `24h` / `7d` ago.
        #[arg(long)]
        since: Option<String>,
        /// Started before (same forms as `--since`).
        #[arg(long)]
        until: Option<String>,
        /// Page size.
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// The `more:` cursor of the previous page.
        #[arg(long)]
        cursor: Option<String>,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// A conversation's transcript, or one tool call with its full output.
    Show {
        /// Conversation id or tool-call id.
        id: String,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Search prompts, answers, tool titles and tool output.
    Search {
        /// Text to find (case-insensitive).
        query: String,
        /// Most hits.
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, clap::Args)]
struct ShellAgentArgs {
    /// Address to listen on; a non-loopback address needs a token.
    #[arg(long, default_value = "127.0.0.1:7070")]
    listen: SocketAddr,
    /// Bearer token clients must send; generated and printed when not given. Set but empty is an
    /// error (S1).
    #[arg(long, env = SHELL_AGENT_TOKEN, hide_env_values = true, value_parser = secret)]
    token: Option<SecretString>,
    /// Heartbeat period while a command is silent (`0` disables).
    #[arg(long, default_value = "10s", value_parser = duration)]
    heartbeat_interval: Duration,
    /// Timeout for commands that set none with `timeout=…` (`0` for none).
    #[arg(long, default_value = "10m", value_parser = duration)]
    default_timeout: Duration,
    /// Ask for approval (`session/request_permission`) before each command.
    #[arg(long)]
    require_approval: bool,
    /// Output kept per command, in bytes (the tail is kept).
    #[arg(long, default_value_t = 1 << 20)]
    output_cap: usize,
}

#[derive(Debug, clap::Args)]
struct AgentHostArgs {
    /// Address to listen on (`HOST:PORT`, `localhost:7071` too); a non-loopback address needs a
    /// token.
    #[arg(long, default_value = "127.0.0.1:7071", value_parser = listen_addr)]
    listen: SocketAddr,
    /// Bearer token clients must send, at least 16 characters; generated and printed when not given
    /// (loopback only).
    #[arg(long, env = AGENT_HOST_TOKEN, hide_env_values = true, value_parser = secret)]
    token: Option<SecretString>,
    /// The agent's working directory (its repository).
    #[arg(long)]
    cwd: Option<std::path::PathBuf>,
    /// One agent process per session instead of one for all; each is ended after `--idle` without
    /// traffic and started again (the session reloaded) at its next message.
    #[arg(long)]
    per_session: bool,
    /// With `--per-session`: how long a session's agent process may sit idle.
    #[arg(long, default_value = "10m", value_parser = duration)]
    idle: Duration,
    /// The agent's command line, after `--`: `-- qwen --acp`.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// The agent-host subcommand's token variable (read outside the configuration).
const AGENT_HOST_TOKEN: &str = "CHAT_BRIDGE_AGENT_HOST_TOKEN";

async fn agent_host(args: AgentHostArgs) -> anyhow::Result<()> {
    chat_bridge::config::check_variable_names(env().iter().map(|(k, _)| k.as_str()))?;
    let token = args.token.map(|t| t.expose_secret().to_owned());
    let mut command = daemon_client::AgentCommand::new(args.command)?;
    command.cwd = args.cwd;
    let mode = if args.per_session {
        shell_agent::host::Mode::PerSession { idle: args.idle }
    } else {
        shell_agent::host::Mode::Shared
    };
    let host = shell_agent::AgentHost::start_with(args.listen, token, command, mode)
        .await
        .context("starting agent-host")?;
    println!("agent-host listening on {}", host.url());
    if host.token_was_generated() {
        println!("token: {}", host.token());
    }
    shutdown_signal().cancelled().await;
    host.shutdown().await;
    Ok(())
}

/// `HOST:PORT`, the host an IP address or a name (`localhost`), resolved to its first address.
fn listen_addr(s: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    s.to_socket_addrs()
        .map_err(|e| format!("{s:?} is not HOST:PORT: {e}"))?
        .next()
        .ok_or_else(|| format!("{s:?} resolves to no address"))
}

/// A secret flag: kept as a [`SecretString`], so the parsed command line never prints it (S2).
fn secret(s: &str) -> Result<SecretString, String> {
    Ok(SecretString::from(s))
}

fn duration(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

/// The shell-agent subcommand's token variable (read outside the configuration).
const SHELL_AGENT_TOKEN: &str = "CHAT_BRIDGE_SHELL_AGENT_TOKEN";

/// Log targets capped at `info` whatever `CHAT_BRIDGE_LOG` says (S2): at debug and trace they print
/// what must never reach a log — tungstenite the daemon handshake with its `Authorization` header and
/// every frame (command output); hyper, h2 and reqwest request headers with the Slack and Discord bot
/// tokens; serenity the gateway's IDENTIFY payload with the bot token.
const SECRET_BEARING_TARGETS: [&str; 8] = [
    "tungstenite",
    "tokio_tungstenite",
    "hyper",
    "hyper_util",
    "h2",
    "reqwest",
    "serenity",
    "tower_http",
];

/// `CHAT_BRIDGE_LOG` (default `info`), then a cap no directive can lift: a second filter that must
/// also pass, so even `CHAT_BRIDGE_LOG=trace,tungstenite::handshake=trace` stays at info there; then
/// the database driver's budget (a few lines a minute per call site, `log_budget`).
fn init_logging(filter: tracing_subscriber::EnvFilter) {
    use std::io::IsTerminal;
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::{FilterExt, LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let cap = Targets::new()
        .with_default(LevelFilter::TRACE)
        .with_targets(
            SECRET_BEARING_TARGETS
                .iter()
                .map(|t| (*t, LevelFilter::INFO)),
        );
    let layer = tracing_subscriber::fmt::layer().with_writer(console::LogWriter);
    let layer = if std::io::stderr().is_terminal() {
        layer.boxed()
    } else {
        layer.json().boxed()
    };
    tracing_subscriber::registry()
        .with(
            layer.with_filter(
                filter
                    .and(cap)
                    .and(chat_bridge::log_budget::DriverBudget::default()),
            ),
        )
        .init();
}

/// The log filter `CHAT_BRIDGE_LOG` asks for (`info` when unset or empty).
///
/// # Errors
/// A value that is not a filter, and a bare number (tracing reads `1` as "errors only", which
/// silently hides everything a person setting `CHAT_BRIDGE_LOG=1` wanted to see): the message names
/// the variable and says what it takes.
fn log_filter(value: Option<&str>) -> Result<tracing_subscriber::EnvFilter, String> {
    let value = value
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .unwrap_or("info");
    let refuse = |why: String| {
        format!(
            "CHAT_BRIDGE_LOG={value:?} is not a log filter{why}: use a level (error, warn, info, debug, trace) or directives such as \"info,chat_bridge=debug\""
        )
    };
    if value.chars().all(|c| c.is_ascii_digit()) {
        return Err(refuse(String::new()));
    }
    tracing_subscriber::EnvFilter::builder()
        .parse(value)
        .map_err(|e| refuse(format!(" ({e})")))
}

/// Cancelled on SIGTERM or Ctrl-C.
fn shutdown_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending().await,
            }
        };
        #[cfg(not(unix))]
        let term = std::future::pending::<()>();
        tokio::select! {
            _ = ctrl_c => {}
            () = term => {}
        }
        t.cancel();
    });
    token
}

async fn shell_agent(args: ShellAgentArgs) -> anyhow::Result<()> {
    // S3 holds here too (a misspelt token variable would silently mean a generated token), and an
    // empty CHAT_BRIDGE_SHELL_AGENT_TOKEN is refused rather than read as unset (S1).
    chat_bridge::config::check_variable_names(env().iter().map(|(k, _)| k.as_str()))?;
    let token = match args.token {
        Some(t) => Some(t.expose_secret().to_owned()),
        None => std::env::var_os(SHELL_AGENT_TOKEN).map(|v| v.to_string_lossy().into_owned()),
    };
    let cfg = AgentConfig {
        heartbeat_interval: args.heartbeat_interval,
        default_timeout: args.default_timeout,
        require_approval: args.require_approval,
        output_cap: args.output_cap,
        ..AgentConfig::default()
    };
    let agent = ShellAgent::start(args.listen, token, cfg)
        .await
        .context("starting the shell agent")?;
    println!("shell-agent listening on {}", agent.url());
    if agent.token_was_generated() {
        println!("token: {}", agent.token());
    }
    agent.run_until(shutdown_signal()).await;
    Ok(())
}

/// The environment as (name, value) pairs; a value that is not UTF-8 is read lossily rather than
/// making `std::env::vars` panic.
fn env() -> Vec<(String, String)> {
    std::env::vars_os()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect()
}

/// The configuration, validated: the one path start-up and `check-config` share (S3).
fn load_config(cli: &Cli) -> anyhow::Result<Config> {
    let flags = Flags {
        database_url: cli
            .database_url
            .as_ref()
            .map(|u| u.expose_secret().to_owned()),
        daemon_url: cli.daemon_url.clone(),
        daemon_token: cli
            .daemon_token
            .as_ref()
            .map(|t| t.expose_secret().to_owned()),
    };
    Ok(Config::load(cli.config.as_deref(), env(), &flags)?)
}

fn check_config(cfg: &Config) -> anyhow::Result<()> {
    let platforms = cfg.validate()?;
    if let Some(argv) = &cfg.daemon.command {
        // A program that is not there, or a missing cwd: refused here in start-up's words (S3).
        let mut c = daemon_client::AgentCommand::new(argv.clone()).context("daemon.command")?;
        c.cwd.clone_from(&cfg.daemon.cwd);
        daemon_client::stdio::check(&c).context("daemon.command")?;
    }
    for (i, p) in cfg.projects.iter().enumerate() {
        if let Some(argv) = &p.daemon.command {
            // The same check for every project's agent.
            let key = format!("projects[{i}].daemon.command");
            let mut c = daemon_client::AgentCommand::new(argv.clone()).context(key.clone())?;
            c.cwd.clone_from(&p.daemon.cwd);
            daemon_client::stdio::check(&c).context(key)?;
        }
    }
    let (label, names, access) = match platforms.as_slice() {
        [one] => ("platform", one.name().to_owned(), one.access(cfg)),
        many => (
            "platforms",
            many.iter().map(|p| p.name()).collect::<Vec<_>>().join(", "),
            many.iter()
                .map(|p| format!("{}: {}", p.name(), p.access(cfg)))
                .collect::<Vec<_>>()
                .join(", "),
        ),
    };
    let daemon = |d: &chat_bridge::config::Daemon| match (&d.url, &d.command) {
        (_, Some(argv)) => format!("the child agent {}", argv.join(" ")),
        (Some(url), None) => mask_url(url),
        (None, None) => "the built-in shell agent".to_owned(),
    };
    let daemons = if cfg.projects.is_empty() {
        format!("daemon {}", daemon(&cfg.daemon))
    } else {
        format!(
            "projects {}",
            cfg.resolved_projects()
                .iter()
                .map(|p| format!("{} ({})", p.name, daemon(&p.daemon)))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    println!(
        "configuration ok: {label} {names}; access {access}; database {}; {daemons}; http {}",
        mask_url(&cfg.database.url),
        cfg.http.listen.as_deref().unwrap_or("off"),
    );
    Ok(())
}

async fn migrate(cfg: &Config) -> anyhow::Result<()> {
    let store = chat_bridge::store::Store::open(&cfg.database.url).await?;
    println!("migrations applied to {}", mask_url(&cfg.database.url));
    store.close().await;
    Ok(())
}

async fn history(cfg: &Config, cmd: HistoryCommand) -> anyhow::Result<()> {
    // Reading history must not leave an empty database behind where there was none.
    if let Some(path) = chat_bridge::store::sqlite_file(&cfg.database.url)
        && !path.exists()
    {
        anyhow::bail!(
            "no history here: the database file {} does not exist (database.url); run from the \
             directory the bridge runs in, or pass --config or set CHAT_BRIDGE_DATABASE__URL",
            path.display()
        );
    }
    let store = chat_bridge::store::Store::open(&cfg.database.url).await?;
    let out = match cmd {
        HistoryCommand::List {
            platform,
            project,
            channel,
            user,
            status,
            since,
            until,
            limit,
            cursor,
            json,
        } => {
            let now = chat_bridge::store::now_ms();
            let at = |t: Option<String>| t.map(|t| history_cli::parse_time(&t, now)).transpose();
            let filter = chat_bridge::store::history::Filter {
                platform,
                project,
                channel,
                user,
                status,
                since: at(since)?,
                until: at(until)?,
                cursor,
                limit: Some(limit),
            };
            history_cli::list(&store, &filter, json).await?
        }
        HistoryCommand::Show { id, json } => history_cli::show(&store, &id, json).await?,
        HistoryCommand::Search { query, limit, json } => {
            history_cli::search(&store, &query, limit, json).await?
        }
    };
    // What commands printed goes to on-call's terminal: shown, never obeyed (S4).
    let out = chat_bridge::channel::text::terminal_safe(&out);
    print!("{out}");
    if !out.ends_with('\n') {
        println!();
    }
    store.close().await;
    Ok(())
}

fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("chat-bridge: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(run());
    // A console read still blocked on stdin (SIGTERM with stdin open) must not hold the exit up.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    code
}

async fn run() -> ExitCode {
    let mut cli = Cli::parse();
    let log = std::env::var_os("CHAT_BRIDGE_LOG").map(|v| v.to_string_lossy().into_owned());
    match log_filter(log.as_deref()) {
        Ok(filter) => init_logging(filter),
        Err(e) => {
            eprintln!("chat-bridge: {e}");
            return ExitCode::FAILURE;
        }
    }
    if let Some(url) = &cli.database_url
        && let masked = chat_bridge::store::mask_url(url.expose_secret())
        && masked != url.expose_secret()
    {
        // S2: any local user reads a process's arguments.
        tracing::warn!(
            url = %masked,
            "--database-url holds a password, which every local user can read in the process list; set CHAT_BRIDGE_DATABASE__URL or database.url in the configuration file instead"
        );
    }
    let result = match cli.command.take() {
        // The standalone agent reads its flags, not the bridge's configuration.
        Some(Command::ShellAgent(args)) => shell_agent(args).await,
        Some(Command::AgentHost(args)) => agent_host(args).await,
        command => match load_config(&cli) {
            Ok(cfg) => run_command(&cfg, command).await,
            Err(e) => Err(e),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("chat-bridge: {}", chat_bridge::startup::error_text(&e));
            ExitCode::FAILURE
        }
    }
}

/// Runs `command` (the bridge itself when `None`) with a validated configuration.
async fn run_command(cfg: &Config, command: Option<Command>) -> anyhow::Result<()> {
    match command {
        None => {
            // On a terminal the console's conversation owns the screen: logs go to a file (the
            // banner says which) before anything is logged.
            if chat_bridge::platform::select(cfg)
                .is_ok_and(|ps| ps.iter().any(|p| p.name() == "console"))
            {
                let _ = console::logs_to_file();
            }
            chat_bridge::startup::run(cfg, shutdown_signal()).await
        }
        Some(Command::ShellAgent(args)) => shell_agent(args).await,
        Some(Command::AgentHost(args)) => agent_host(args).await,
        Some(Command::Migrate) => migrate(cfg).await,
        Some(Command::CheckConfig) => check_config(cfg),
        Some(Command::History(cmd)) => history(cfg, cmd).await,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn s3_a_log_filter_that_is_not_one_is_a_start_up_error_naming_the_variable() {
        for bad in ["1", "0", "info,=,==", "chat_bridge=loud"] {
            let e = super::log_filter(Some(bad)).expect_err(bad);
            assert!(e.starts_with("CHAT_BRIDGE_LOG="), "{e}");
            assert!(e.contains("use a level"), "{e}");
        }
        for good in ["info", "warn,chat_bridge=debug", "", " trace "] {
            assert!(super::log_filter(Some(good)).is_ok(), "{good}");
        }
        assert!(super::log_filter(None).is_ok());
    }

    use clap::Parser;

    use super::*;

    #[test]
    fn s2_the_parsed_command_line_never_debug_prints_a_token() {
        let cli = Cli::try_parse_from([
            "chat-bridge",
            "--database-url",
            "postgres://bridge:db-424242@db/bridge",
            "--daemon-token",
            "flag-424242",
            "shell-agent",
            "--token",
            "agent-424242",
        ])
        .expect("parse");
        let debug = format!("{cli:?}");
        assert!(!debug.contains("424242"), "{debug}");
        assert_eq!(
            cli.daemon_token.as_ref().map(ExposeSecret::expose_secret),
            Some("flag-424242")
        );
        assert_eq!(
            cli.database_url.as_ref().map(ExposeSecret::expose_secret),
            Some("postgres://bridge:db-424242@db/bridge")
        );
    }
}
