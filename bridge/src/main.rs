//! `chat-bridge`: parses the command line, sets up logging, runs the chosen command, reports its exit.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use shell_agent::{AgentConfig, ShellAgent, parse_duration};
use tokio_util::sync::CancellationToken;

/// chat-bridge: work with a coding-agent daemon from Slack, Discord and the console.
#[derive(Debug, Parser)]
#[command(name = "chat-bridge", version, arg_required_else_help = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the built-in ACP daemon: each prompt is a shell command run in a PTY.
    ShellAgent(ShellAgentArgs),
    /// Apply the database migrations (also done at start-up); safe to run again.
    Migrate(MigrateArgs),
}

#[derive(Debug, clap::Args)]
struct MigrateArgs {
    /// `postgres://…` or `sqlite://…`.
    #[arg(long, env = "CHAT_BRIDGE_DATABASE__URL", hide_env_values = true)]
    database_url: String,
}

#[derive(Debug, clap::Args)]
struct ShellAgentArgs {
    /// Address to listen on; a non-loopback address needs a token.
    #[arg(long, default_value = "127.0.0.1:7070")]
    listen: SocketAddr,
    /// Bearer token clients must send; generated and printed when not given.
    #[arg(long, env = "CHAT_BRIDGE_SHELL_AGENT_TOKEN", hide_env_values = true)]
    token: Option<String>,
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

fn duration(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

fn init_logging() {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("CHAT_BRIDGE_LOG")
        .unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if std::io::stderr().is_terminal() {
        builder.init();
    } else {
        builder.json().init();
    }
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
    let cfg = AgentConfig {
        heartbeat_interval: args.heartbeat_interval,
        default_timeout: args.default_timeout,
        require_approval: args.require_approval,
        output_cap: args.output_cap,
        ..AgentConfig::default()
    };
    let agent = ShellAgent::start(args.listen, args.token, cfg)
        .await
        .context("starting the shell agent")?;
    println!("shell-agent listening on {}", agent.url());
    if agent.token_was_generated() {
        println!("token: {}", agent.token());
    }
    agent.run_until(shutdown_signal()).await;
    Ok(())
}

async fn migrate(args: MigrateArgs) -> anyhow::Result<()> {
    let store = chat_bridge::store::Store::open(&args.database_url).await?;
    println!("migrations applied to {}", store.url());
    store.close().await;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let result = match cli.command {
        Command::ShellAgent(args) => shell_agent(args).await,
        Command::Migrate(args) => migrate(args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("chat-bridge: {e:#}");
            ExitCode::FAILURE
        }
    }
}
