//! Configuration in layers: defaults in code, then a TOML file (`--config`), then
//! `CHAT_BRIDGE_<SECTION>__<KEY>` environment variables, then command-line flags. Secrets (the daemon
//! token) come only from the environment or from a file they name — never from the config file itself.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::core::OnStall;

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Secs(u64),
        Text(String),
    }
    match Raw::deserialize(d)? {
        Raw::Secs(s) => Ok(Duration::from_secs(s)),
        Raw::Text(t) => shell_agent::parse_duration(&t).map_err(serde::de::Error::custom),
    }
}

/// `[database]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Database {
    /// `postgres://…` or `sqlite://…`; default `sqlite://./chat-bridge.db`.
    pub url: String,
}

impl Default for Database {
    fn default() -> Self {
        Self {
            url: "sqlite://./chat-bridge.db".into(),
        }
    }
}

/// `[daemon]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Daemon {
    /// The daemon's `/acp` URL; unset runs the built-in shell agent in-process.
    pub url: Option<String>,
    /// Bearer token (environment only: `CHAT_BRIDGE_DAEMON__TOKEN`).
    pub token: Option<String>,
    /// A file holding the bearer token (for Kubernetes secrets mounted as files).
    pub token_file: Option<PathBuf>,
    /// Sent with `session/set_mode` for new sessions (qwen: `yolo`, `default`, …).
    pub mode: Option<String>,
    /// Working directory for new sessions; default the current directory.
    pub cwd: Option<PathBuf>,
}

/// `[liveness]` (L1–L5).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Liveness {
    /// Longest silence between frames of a turn.
    #[serde(deserialize_with = "duration")]
    pub idle: Duration,
    /// Longest turn.
    #[serde(deserialize_with = "duration")]
    pub wall: Duration,
    /// Added to a running tool's own timeout.
    #[serde(deserialize_with = "duration")]
    pub tool_grace: Duration,
    /// `notify` or `cancel`.
    pub on_stall: OnStall,
    /// A tool running longer shows a progress line.
    #[serde(deserialize_with = "duration")]
    pub progress_after: Duration,
    /// The progress line is edited at most this often.
    #[serde(deserialize_with = "duration")]
    pub progress_every: Duration,
    /// A running tool's heartbeat count and latest progress are written to the store at most this
    /// often (in batches, off the conversation's path); the result writes the rest.
    #[serde(deserialize_with = "duration")]
    pub progress_flush: Duration,
}

impl Default for Liveness {
    fn default() -> Self {
        Self {
            idle: Duration::from_secs(120),
            wall: Duration::from_secs(3600),
            tool_grace: Duration::from_secs(30),
            on_stall: OnStall::Notify,
            progress_after: Duration::from_secs(15),
            progress_every: Duration::from_secs(30),
            progress_flush: Duration::from_secs(10),
        }
    }
}

/// `[shell_agent]`: the built-in daemon, when `daemon.url` is unset.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShellAgent {
    /// Heartbeat period while a command is silent.
    #[serde(deserialize_with = "duration")]
    pub heartbeat_interval: Duration,
    /// Timeout of commands that set none.
    #[serde(deserialize_with = "duration")]
    pub default_timeout: Duration,
    /// Ask before each command.
    pub require_approval: bool,
}

impl Default for ShellAgent {
    fn default() -> Self {
        Self {
            heartbeat_interval: Duration::from_secs(10),
            default_timeout: Duration::from_secs(600),
            require_approval: false,
        }
    }
}

/// `[approvals]` (R6).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Approvals {
    /// Users who may answer anyone's requests.
    pub approvers: Vec<String>,
    /// Unanswered requests expire as rejected.
    #[serde(deserialize_with = "duration")]
    pub timeout: Duration,
    /// A3 four eyes: the person whose message asked for a tool call cannot approve it.
    pub require_second_person: bool,
}

impl Default for Approvals {
    fn default() -> Self {
        Self {
            approvers: Vec::new(),
            timeout: Duration::from_secs(600),
            require_second_person: false,
        }
    }
}

/// Who may act in a thread (A2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadAccess {
    /// A thread belongs to the person who opened it: only they, the approvers and the people they
    /// `/invite` may prompt, answer approvals or `/cancel` there.
    #[default]
    Owner,
    /// Anyone allowed to use the bridge may act in any thread (collaborative threads).
    Shared,
}

/// `[access]` (A1, A2): who may use the bridge at all, and who may act in a thread.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Access {
    /// A1: on Slack and Discord, with no user or role allowlist the bridge refuses to start unless
    /// this says, on purpose, that everyone who can reach it may run commands.
    pub open: bool,
    /// A2: `owner` (default) or `shared`.
    pub threads: ThreadAccess,
}

/// `[slack]`: set `CHAT_BRIDGE_SLACK__BOT_TOKEN` and `CHAT_BRIDGE_SLACK__APP_TOKEN` to run on Slack.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Slack {
    /// Bot token `xoxb-…` (environment only).
    pub bot_token: Option<String>,
    /// App-level token `xapp-…` for Socket Mode (environment only).
    pub app_token: Option<String>,
    /// Web API base; tests point it at a fake.
    pub api_base_url: String,
    /// Channels the bridge answers in (empty: every channel it is in).
    pub allowed_channels: Vec<String>,
    /// Users who may prompt (empty: everyone who can see it).
    pub allowed_users: Vec<String>,
    /// Whether direct messages are answered.
    pub allow_dms: bool,
    /// `socket` (Socket Mode; needs the app token) or `http` (the Events API; needs the signing secret).
    pub mode: String,
    /// Where the `http` mode listens for Slack's requests.
    pub listen: String,
    /// The app's signing secret, for the `http` mode (environment only).
    pub signing_secret: Option<String>,
}

impl Default for Slack {
    fn default() -> Self {
        Self {
            bot_token: None,
            app_token: None,
            api_base_url: crate::channel::slack::api::DEFAULT_BASE_URL.into(),
            allowed_channels: Vec::new(),
            allowed_users: Vec::new(),
            allow_dms: true,
            mode: "socket".into(),
            listen: "0.0.0.0:3000".into(),
            signing_secret: None,
        }
    }
}

/// `[discord]`: set `CHAT_BRIDGE_DISCORD__TOKEN` to run on Discord.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Discord {
    /// Bot token (environment only).
    pub token: Option<String>,
    /// REST base (`https://discord.com`); the gateway URL comes from its `/gateway` answer, so
    /// tests point both at a fake.
    pub api_base_url: String,
    /// Channel ids the bridge answers in (empty: every channel it can read).
    pub allowed_channels: Vec<String>,
    /// User ids who may prompt (empty: everyone who can see it).
    pub allowed_users: Vec<String>,
    /// Role ids whose members may prompt (empty: no role needed). With `allowed_users` too, either
    /// admits.
    pub allowed_roles: Vec<String>,
    /// Whether direct messages are answered.
    pub allow_dms: bool,
}

impl Default for Discord {
    fn default() -> Self {
        Self {
            token: None,
            api_base_url: crate::channel::discord::DEFAULT_BASE_URL.into(),
            allowed_channels: Vec::new(),
            allowed_users: Vec::new(),
            allowed_roles: Vec::new(),
            allow_dms: true,
        }
    }
}

/// `[http]`: health, readiness and the history API.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Http {
    /// Where to listen (`0.0.0.0:8080`); unset: no HTTP server.
    pub listen: Option<String>,
    /// Bearer token for `/api/v1` (environment only); unset: the API answers 401.
    pub api_token: Option<String>,
}

/// `[service]`: replicas and shutdown (D5).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Service {
    /// The chat platform: `auto` (Discord or Slack when its token is set, else the console),
    /// `console`, `slack` or `discord` — explicit in deployments, so a missing token is an error
    /// rather than a console that reads a closed stdin.
    pub platform: String,
    /// How often a standby replica tries to take the leader lease.
    #[serde(deserialize_with = "duration")]
    pub leader_retry: Duration,
    /// How often the active replica checks that it still holds the lease.
    #[serde(deserialize_with = "duration")]
    pub leader_check: Duration,
    /// How long a SIGTERM waits for the outbox to drain before closing connections.
    #[serde(deserialize_with = "duration")]
    pub drain_timeout: Duration,
    /// Outbox workers delivering in parallel across conversations (order within one holds).
    pub outbox_workers: usize,
    /// A conversation with nothing running, queued or awaiting approval is let go from memory after
    /// this; its next message loads it again (so memory follows active threads, not all threads).
    #[serde(deserialize_with = "duration")]
    pub conversation_idle: Duration,
}

impl Default for Service {
    fn default() -> Self {
        Self {
            platform: "auto".into(),
            leader_retry: Duration::from_secs(2),
            leader_check: Duration::from_secs(2),
            drain_timeout: Duration::from_secs(20),
            outbox_workers: 4,
            conversation_idle: Duration::from_secs(600),
        }
    }
}

/// `[redact]` (R7).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Redact {
    /// Extra regular expressions to redact.
    pub patterns: Vec<String>,
    /// Store redacted text in the history too (prompts, answers, tool output), for teams whose
    /// history must never hold a secret. Off by default: the history keeps what ran.
    pub store: bool,
}

/// The whole configuration.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[database]`.
    pub database: Database,
    /// `[daemon]`.
    pub daemon: Daemon,
    /// `[liveness]`.
    pub liveness: Liveness,
    /// `[shell_agent]`.
    pub shell_agent: ShellAgent,
    /// `[approvals]`.
    pub approvals: Approvals,
    /// `[access]`.
    pub access: Access,
    /// `[redact]`.
    pub redact: Redact,
    /// `[slack]`.
    pub slack: Slack,
    /// `[discord]`.
    pub discord: Discord,
    /// `[http]`.
    pub http: Http,
    /// `[service]`.
    pub service: Service,
}

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read the config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file or an environment override is not valid.
    #[error("invalid configuration: {0}")]
    Invalid(String),
    /// A secret was put where secrets do not belong.
    #[error(
        "{0} is a secret: set it with the environment variable {var}, not in the config file",
        var = secret_env_var(.0)
    )]
    SecretInFile(&'static str),
}

/// Command-line overrides.
#[derive(Debug, Clone, Default)]
pub struct Flags {
    /// `--database-url`.
    pub database_url: Option<String>,
    /// `--daemon-url`.
    pub daemon_url: Option<String>,
    /// `--daemon-token`.
    pub daemon_token: Option<String>,
}

/// `discord.token` → `CHAT_BRIDGE_DISCORD__TOKEN`.
fn secret_env_var(key: &str) -> String {
    format!("CHAT_BRIDGE_{}", key.to_uppercase().replace('.', "__"))
}

fn env_value(raw: &str) -> toml::Value {
    // Typed when it reads as TOML (`true`, `5`, `["a","b"]`), else the string itself (`120s`, URLs).
    toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_owned()))
}

impl Config {
    /// Loads `file` (if any), then `CHAT_BRIDGE_*` variables from `env`, then `flags`.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file, key or variable at fault.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        flags: &Flags,
    ) -> Result<Self, ConfigError> {
        let mut table = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_owned(),
                    source,
                })?;
                let t: toml::Table = toml::from_str(&text)
                    .map_err(|e| ConfigError::Invalid(format!("{}: {e}", path.display())))?;
                for (section, key, name) in [
                    ("daemon", "token", "daemon.token"),
                    ("slack", "bot_token", "slack.bot_token"),
                    ("slack", "app_token", "slack.app_token"),
                    ("slack", "signing_secret", "slack.signing_secret"),
                    ("discord", "token", "discord.token"),
                    ("http", "api_token", "http.api_token"),
                ] {
                    if t.get(section).and_then(|d| d.get(key)).is_some() {
                        return Err(ConfigError::SecretInFile(name));
                    }
                }
                t
            }
            None => toml::Table::new(),
        };
        for (name, value) in env {
            let Some(rest) = name.strip_prefix("CHAT_BRIDGE_") else {
                continue;
            };
            let Some((section, key)) = rest.split_once("__") else {
                continue;
            };
            let (section, key) = (section.to_lowercase(), key.to_lowercase());
            let entry = table
                .entry(section.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            let Some(sec) = entry.as_table_mut() else {
                return Err(ConfigError::Invalid(format!(
                    "{name}: [{section}] is not a section"
                )));
            };
            sec.insert(key, env_value(&value));
        }
        let mut cfg: Config = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Invalid(e.to_string()))?;
        if let Some(url) = &flags.database_url {
            cfg.database.url.clone_from(url);
        }
        if let Some(url) = &flags.daemon_url {
            cfg.daemon.url = Some(url.clone());
        }
        if let Some(token) = &flags.daemon_token {
            cfg.daemon.token = Some(token.clone());
        }
        if cfg.daemon.token.is_none()
            && let Some(path) = &cfg.daemon.token_file
        {
            let token = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.clone(),
                source,
            })?;
            cfg.daemon.token = Some(token.trim().to_owned());
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(c.daemon.token.as_deref(), Some("s3cret"));
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
            err.to_string().contains("CHAT_BRIDGE_DISCORD__TOKEN")
                && !err.to_string().contains("oops"),
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
        assert_eq!(c.daemon.token.as_deref(), Some("from-file"));
    }

    #[test]
    fn unknown_keys_and_bad_durations_are_clear_errors() {
        let err = Config::load(
            None,
            env(&[("CHAT_BRIDGE_LIVENESS__IDEL", "5s")]),
            &Flags::default(),
        )
        .expect_err("typo");
        assert!(err.to_string().contains("idel"), "{err}");
        let err = Config::load(
            None,
            env(&[("CHAT_BRIDGE_LIVENESS__IDLE", "5x")]),
            &Flags::default(),
        )
        .expect_err("bad");
        assert!(err.to_string().contains("500ms, 10s"), "{err}");
    }
}
