//! Configuration in layers: defaults in code, then a TOML file (`--config`), then
//! `CHAT_BRIDGE_<SECTION>__<KEY>` environment variables, then command-line flags. Secrets (tokens, the
//! signing secret) come only from the environment or from a file they name — never from the config
//! file itself.
//!
//! There is one validation path ([`Config::validate`], run by [`Config::load`]): whatever start-up
//! refuses, `chat-bridge check-config` refuses with the same words. It enforces the trust rules that
//! live in configuration:
//! - **S1** a secret that is set but empty or blank is an error naming its variable; a Slack signing
//!   secret is at least 16 bytes;
//! - **S2** no error ever carries a secret's value (secrets are [`Secret`]s: always strings, never
//!   printed) and URLs are printed with their credentials masked;
//! - **S3** every `CHAT_BRIDGE_*` variable must map to a key (the keys come from the types
//!   themselves, [`Config::keys`]), else an error names it and the nearest valid name;
//! - **A1** on Slack and Discord, no user (or role) allowlist refuses to start unless
//!   `access.open = true`.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::core::OnStall;

/// A secret setting (a token, the signing secret): never printed by `Debug` or serialized, and
/// refused from the config file. Only strings are secrets: a value of another type is an error that
/// does not repeat it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    #[must_use]
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into())
    }

    /// The secret, for the one place that uses it.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Empty or only whitespace: set, but worth nothing (an empty HMAC key, an empty bearer).
    #[must_use]
    pub fn is_blank(&self) -> bool {
        self.0.trim().is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Self(s.to_owned())
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("<secret>")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Through a `toml::Value` so that a wrong type is reported without serde's default
        // "invalid type: integer `424242`", which would print the secret back.
        match toml::Value::deserialize(d)? {
            // Surrounding whitespace is never part of a token or key: a trailing newline (a secret
            // made `--from-file`) would otherwise make every real signature fail to match.
            toml::Value::String(s) => Ok(Self(s.trim().to_owned())),
            other => Err(serde::de::Error::custom(format!(
                "a secret must be a string, not a {} (its value is not shown)",
                other.type_str()
            ))),
        }
    }
}

fn on_stall_name<S: Serializer>(v: &OnStall, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(match v {
        OnStall::Notify => "notify",
        OnStall::Cancel => "cancel",
    })
}

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
#[derive(Debug, Clone, Deserialize, Serialize)]
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
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Daemon {
    /// The daemon's `/acp` URL; unset runs the built-in shell agent in-process.
    pub url: Option<String>,
    /// Bearer token (environment only: `CHAT_BRIDGE_DAEMON__TOKEN`).
    pub token: Option<Secret>,
    /// A file holding the bearer token (for Kubernetes secrets mounted as files).
    pub token_file: Option<PathBuf>,
    /// Sent with `session/set_mode` for new sessions (qwen: `yolo`, `default`, …).
    pub mode: Option<String>,
    /// Working directory for new sessions; default the current directory.
    pub cwd: Option<PathBuf>,
}

/// `[liveness]` (L1–L5).
#[derive(Debug, Clone, Deserialize, Serialize)]
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
    #[serde(serialize_with = "on_stall_name")]
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
#[derive(Debug, Clone, Deserialize, Serialize)]
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
#[derive(Debug, Clone, Deserialize, Serialize)]
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
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
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Access {
    /// A1: on Slack and Discord, with no user or role allowlist the bridge refuses to start unless
    /// this says, on purpose, that everyone who can reach it may run commands.
    pub open: bool,
    /// A2: `owner` (default) or `shared`.
    pub threads: ThreadAccess,
}

/// How Slack's events reach the bridge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SlackMode {
    /// Socket Mode: the bridge dials out (needs the app-level token).
    #[default]
    Socket,
    /// The Events API: Slack posts to `slack.listen` (needs the signing secret).
    Http,
}

/// `[slack]`: set `CHAT_BRIDGE_SLACK__BOT_TOKEN` and `CHAT_BRIDGE_SLACK__APP_TOKEN` to run on Slack.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Slack {
    /// Bot token `xoxb-…` (environment only).
    pub bot_token: Option<Secret>,
    /// App-level token `xapp-…` for Socket Mode (environment only).
    pub app_token: Option<Secret>,
    /// Web API base; tests point it at a fake.
    pub api_base_url: String,
    /// Channels the bridge answers in (empty: every channel it is in).
    pub allowed_channels: Vec<String>,
    /// Users who may prompt, in channels and in DMs. Empty refuses to start unless `access.open`
    /// (A1).
    pub allowed_users: Vec<String>,
    /// Whether direct messages are answered.
    pub allow_dms: bool,
    /// `socket` (Socket Mode; needs the app token) or `http` (the Events API; needs the signing secret).
    pub mode: SlackMode,
    /// Where the `http` mode listens for Slack's requests.
    pub listen: String,
    /// The app's signing secret, for the `http` mode (environment only; at least 16 bytes).
    pub signing_secret: Option<Secret>,
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
            mode: SlackMode::Socket,
            listen: "0.0.0.0:3000".into(),
            signing_secret: None,
        }
    }
}

/// `[discord]`: set `CHAT_BRIDGE_DISCORD__TOKEN` to run on Discord.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Discord {
    /// Bot token (environment only).
    pub token: Option<Secret>,
    /// REST base (`https://discord.com`); the gateway URL comes from its `/gateway` answer, so
    /// tests point both at a fake.
    pub api_base_url: String,
    /// Channel ids the bridge answers in (empty: every channel it can read).
    pub allowed_channels: Vec<String>,
    /// User ids who may prompt, in channels and in DMs. With `allowed_roles` empty too, the bridge
    /// refuses to start unless `access.open` (A1).
    pub allowed_users: Vec<String>,
    /// Role ids whose members may prompt. With `allowed_users` too, either admits; a DM carries no
    /// roles, so there only `allowed_users` admits.
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
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Http {
    /// Where to listen (`0.0.0.0:8080`); unset: no HTTP server.
    pub listen: Option<String>,
    /// Bearer token for `/api/v1` (environment only); unset: the API answers 401.
    pub api_token: Option<Secret>,
}

/// `service.platform`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Platform {
    /// Discord or Slack when its token is set, else the console.
    #[default]
    Auto,
    /// The console (stdin/stdout).
    Console,
    /// Slack.
    Slack,
    /// Discord.
    Discord,
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Console => "console",
            Self::Slack => "slack",
            Self::Discord => "discord",
        })
    }
}

/// `[service]`: replicas and shutdown (D5).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Service {
    /// The chat platform: `auto` (Discord or Slack when its token is set, else the console),
    /// `console`, `slack` or `discord` — explicit in deployments, so a missing token is an error
    /// rather than a console that reads a closed stdin.
    pub platform: Platform,
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
            platform: Platform::Auto,
            leader_retry: Duration::from_secs(2),
            leader_check: Duration::from_secs(2),
            drain_timeout: Duration::from_secs(20),
            outbox_workers: 4,
            conversation_idle: Duration::from_secs(600),
        }
    }
}

/// `[redact]` (R7).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Redact {
    /// Extra regular expressions to redact.
    pub patterns: Vec<String>,
    /// Store redacted text in the history too (prompts, answers, tool output), for teams whose
    /// history must never hold a secret. Off by default: the history keeps what ran.
    pub store: bool,
}

/// The whole configuration.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
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
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file or an environment override does not parse into the configuration's types.
    #[error("invalid configuration: {0}")]
    Invalid(String),
    /// A secret was put where secrets do not belong.
    #[error(
        "{0} is a secret: set it with the environment variable {var}, not in the config file",
        var = secret_env_var(.0)
    )]
    SecretInFile(&'static str),
    /// S3: a `CHAT_BRIDGE_*` variable that maps to no key (a typo that would otherwise be ignored).
    #[error(
        "{name} is set but maps to no configuration key; did you mean {nearest}? (configuration variables are CHAT_BRIDGE_<SECTION>__<KEY>, with two underscores between section and key; see docs/configuration.md)"
    )]
    UnknownVariable {
        /// The variable as set.
        name: String,
        /// The valid name nearest to it.
        nearest: String,
    },
    /// Values that parse but are refused (each names its key or variable, never a secret's value).
    #[error("invalid configuration: {}", problem_list(.0))]
    Refused(Vec<String>),
}

/// One problem inline; several as a list, one per line.
fn problem_list(problems: &[String]) -> String {
    match problems {
        [one] => one.clone(),
        many => many.iter().map(|p| format!("\n  - {p}")).collect(),
    }
}

/// Command-line overrides.
#[derive(Clone, Default)]
pub struct Flags {
    /// `--database-url`.
    pub database_url: Option<String>,
    /// `--daemon-url`.
    pub daemon_url: Option<String>,
    /// `--daemon-token`.
    pub daemon_token: Option<String>,
}

impl fmt::Debug for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Flags")
            .field("database_url", &self.database_url.as_deref().map(mask_url))
            .field("daemon_url", &self.daemon_url.as_deref().map(mask_url))
            .field(
                "daemon_token",
                &self.daemon_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// The keys whose values are secrets: refused in the file, always read as strings from the
/// environment, checked for blankness (S1). `secret_keys_are_exactly_the_secret_typed_fields` keeps
/// this list equal to the fields of type [`Secret`].
const SECRET_KEYS: [&str; 6] = [
    "daemon.token",
    "slack.bot_token",
    "slack.app_token",
    "slack.signing_secret",
    "discord.token",
    "http.api_token",
];

fn is_secret(section: &str, key: &str) -> bool {
    SECRET_KEYS
        .iter()
        .any(|k| k.split_once('.') == Some((section, key)))
}

/// `CHAT_BRIDGE_*` variables the product and its scripts read outside the configuration: the config
/// file's path, the log filter, the standalone shell-agent's token, and the test and chart scripts'
/// own settings.
pub const OTHER_VARIABLES: [&str; 6] = [
    "CHAT_BRIDGE_CONFIG",
    "CHAT_BRIDGE_LOG",
    "CHAT_BRIDGE_SHELL_AGENT_TOKEN",
    "CHAT_BRIDGE_SHARED_DIR",
    "CHAT_BRIDGE_BIN",
    "CHAT_BRIDGE_CHART_VENV",
];

const ENV_PREFIX: &str = "CHAT_BRIDGE_";

/// The shortest Slack signing secret accepted (Slack issues 32 hex characters).
pub const MIN_SIGNING_SECRET_LEN: usize = 16;

/// `discord.token` → `CHAT_BRIDGE_DISCORD__TOKEN`.
fn secret_env_var(key: &str) -> String {
    format!("{ENV_PREFIX}{}", key.to_uppercase().replace('.', "__"))
}

/// `("slack", "allowed_users")` → `CHAT_BRIDGE_SLACK__ALLOWED_USERS`.
fn env_name(section: &str, key: &str) -> String {
    format!(
        "{ENV_PREFIX}{}__{}",
        section.to_uppercase(),
        key.to_uppercase()
    )
}

/// `url` with its credentials masked, for anything that prints it (S2).
#[must_use]
pub fn mask_url(url: &str) -> String {
    daemon_client::mask_url(url)
}

fn env_value(raw: &str) -> toml::Value {
    // Typed when it reads as TOML (`true`, `5`, `["a","b"]`), else the string itself (`120s`, URLs).
    toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_owned()))
}

/// Levenshtein distance, for "did you mean".
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = Vec::with_capacity(b.len() + 1);
        cur.push(i + 1);
        for (j, cb) in b.iter().enumerate() {
            let replace = prev[j] + usize::from(ca != *cb);
            cur.push(replace.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Every key with its default, as JSON: a `Config::default()` serialized, where `None` fields are
/// `null` (so optional keys are listed too).
fn key_defaults() -> BTreeMap<(String, String), serde_json::Value> {
    let mut keys = BTreeMap::new();
    if let Ok(serde_json::Value::Object(sections)) = serde_json::to_value(Config::default()) {
        for (section, fields) in sections {
            if let serde_json::Value::Object(fields) = fields {
                for (key, default) in fields {
                    keys.insert((section.clone(), key), default);
                }
            }
        }
    }
    keys
}

/// S3: every `CHAT_BRIDGE_*` name in `names` must be a configuration variable or one of
/// [`OTHER_VARIABLES`].
///
/// # Errors
/// [`ConfigError::UnknownVariable`] for the first that is neither, with the nearest valid name.
pub fn check_variable_names<'a>(
    names: impl IntoIterator<Item = &'a str>,
) -> Result<(), ConfigError> {
    let keys = key_defaults();
    for name in names {
        if let Some(nearest) = unknown_variable(name, &keys) {
            return Err(ConfigError::UnknownVariable {
                name: name.to_owned(),
                nearest,
            });
        }
    }
    Ok(())
}

/// `Some(nearest valid name)` when `name` is a `CHAT_BRIDGE_*` variable that maps to nothing.
fn unknown_variable(
    name: &str,
    keys: &BTreeMap<(String, String), serde_json::Value>,
) -> Option<String> {
    let rest = name.strip_prefix(ENV_PREFIX)?;
    if OTHER_VARIABLES.contains(&name) {
        return None;
    }
    if let Some((section, key)) = rest.split_once("__")
        && keys.contains_key(&(section.to_lowercase(), key.to_lowercase()))
    {
        return None;
    }
    let upper = name.to_uppercase();
    keys.keys()
        .map(|(s, k)| env_name(s, k))
        .chain(OTHER_VARIABLES.iter().map(|v| (*v).to_owned()))
        .min_by_key(|candidate| distance(&upper, candidate))
}

/// Is `s` something a listener can bind: `IP:port` or `host:port`?
/// Whether start-up will be able to read `url` as connection options.
fn database_url_parses(url: &str) -> bool {
    use std::str::FromStr;
    if url.to_ascii_lowercase().starts_with("sqlite:") {
        sqlx::sqlite::SqliteConnectOptions::from_str(url).is_ok()
    } else {
        sqlx::postgres::PgConnectOptions::from_str(url).is_ok()
    }
}

/// Whether two listen addresses would take the same port on an overlapping address.
fn same_port(a: &str, b: &str) -> bool {
    match (a.parse::<SocketAddr>(), b.parse::<SocketAddr>()) {
        (Ok(a), Ok(b)) => {
            a.port() == b.port()
                && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
        }
        _ => false,
    }
}

fn is_listen_address(s: &str) -> bool {
    if s.parse::<SocketAddr>().is_ok() {
        return true;
    }
    match s.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
                && port.parse::<u16>().is_ok()
        }
        None => false,
    }
}

/// A TOML syntax error without the source line it would quote (the line may hold a secret).
fn syntax_error(path: &Path, text: &str, e: &toml::de::Error) -> ConfigError {
    let at = e.span().map_or(String::new(), |span| {
        let before = text.get(..span.start).unwrap_or("");
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        format!(" at line {line}, column {column}")
    });
    ConfigError::Invalid(format!("{}{at}: {}", path.display(), e.message()))
}

impl Config {
    /// Every `(section, key)` of the configuration, read from the types themselves.
    #[must_use]
    pub fn keys() -> Vec<(String, String)> {
        key_defaults().into_keys().collect()
    }

    /// Every secret with the variable that sets it.
    fn secrets(&self) -> [(&'static str, Option<&Secret>); 6] {
        [
            ("CHAT_BRIDGE_DAEMON__TOKEN", self.daemon.token.as_ref()),
            (
                "CHAT_BRIDGE_SLACK__BOT_TOKEN",
                self.slack.bot_token.as_ref(),
            ),
            (
                "CHAT_BRIDGE_SLACK__APP_TOKEN",
                self.slack.app_token.as_ref(),
            ),
            (
                "CHAT_BRIDGE_SLACK__SIGNING_SECRET",
                self.slack.signing_secret.as_ref(),
            ),
            ("CHAT_BRIDGE_DISCORD__TOKEN", self.discord.token.as_ref()),
            ("CHAT_BRIDGE_HTTP__API_TOKEN", self.http.api_token.as_ref()),
        ]
    }

    /// Loads `file` (if any), then `CHAT_BRIDGE_*` variables from `env`, then `flags`, and
    /// [validates](Config::validate) the result.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file, key or variable at fault — never a secret's value.
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
                let t: toml::Table =
                    toml::from_str(&text).map_err(|e| syntax_error(path, &text, &e))?;
                for name in SECRET_KEYS {
                    let (section, key) = name.split_once('.').unwrap_or((name, ""));
                    if t.get(section).and_then(|d| d.get(key)).is_some() {
                        return Err(ConfigError::SecretInFile(name));
                    }
                }
                t
            }
            None => toml::Table::new(),
        };
        let keys = key_defaults();
        for (name, value) in env {
            if name == "CHAT_BRIDGE_SHELL_AGENT_TOKEN" && value.trim().is_empty() {
                return Err(ConfigError::Refused(vec![
                    "CHAT_BRIDGE_SHELL_AGENT_TOKEN is set but empty (S1): a blank secret would let anyone in; set the real value or unset CHAT_BRIDGE_SHELL_AGENT_TOKEN".into(),
                ]));
            }
            if !name.starts_with(ENV_PREFIX) || OTHER_VARIABLES.contains(&name.as_str()) {
                continue;
            }
            if let Some(nearest) = unknown_variable(&name, &keys) {
                return Err(ConfigError::UnknownVariable { name, nearest });
            }
            let Some((section, key)) = name[ENV_PREFIX.len()..].split_once("__") else {
                continue;
            };
            let (section, key) = (section.to_lowercase(), key.to_lowercase());
            let secret = is_secret(&section, &key);
            // Strings stay strings (`DAEMON__TOKEN=424242` is a token, `DAEMON__MODE=1` a mode);
            // other keys read TOML (`true`, `5`, `["U1"]`, `90` seconds).
            let value = match keys.get(&(section.clone(), key.clone())) {
                _ if secret => toml::Value::String(value),
                Some(serde_json::Value::String(_) | serde_json::Value::Null) => {
                    toml::Value::String(value)
                }
                _ => env_value(&value),
            };
            let entry = table
                .entry(section.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            let Some(sec) = entry.as_table_mut() else {
                return Err(ConfigError::Invalid(format!(
                    "{name}: [{section}] is not a section"
                )));
            };
            sec.insert(key, value);
        }
        let mut cfg: Config =
            toml::Value::Table(table)
                .try_into()
                .map_err(|e: toml::de::Error| {
                    ConfigError::Invalid(e.to_string().trim().replace("\nin ", " in "))
                })?;
        if let Some(url) = &flags.database_url {
            cfg.database.url.clone_from(url);
        }
        if let Some(url) = &flags.daemon_url {
            cfg.daemon.url = Some(url.clone());
        }
        if let Some(token) = &flags.daemon_token {
            if token.trim().is_empty() {
                return Err(ConfigError::Refused(vec![
                    "--daemon-token is set but empty (S1): a blank secret would let anyone in; pass the real token or leave the flag out".into(),
                ]));
            }
            cfg.daemon.token = Some(Secret::new(token.clone()));
        }
        if cfg.daemon.token.is_none()
            && let Some(path) = &cfg.daemon.token_file
        {
            let token = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.clone(),
                source,
            })?;
            let token = token.trim();
            if token.is_empty() {
                return Err(ConfigError::Refused(vec![format!(
                    "daemon.token_file {} is empty (S1): a blank secret would let anyone in; put the daemon's token in it",
                    path.display()
                )]));
            }
            cfg.daemon.token = Some(Secret::new(token));
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Which platform this configuration serves: `service.platform`, or when it is `auto` the one
    /// whose token is set (the console when none is). Never [`Platform::Auto`].
    ///
    /// # Errors
    /// Both tokens with `auto`, or an explicit platform without its token.
    pub fn platform(&self) -> Result<Platform, String> {
        let slack = self.slack.bot_token.is_some();
        let discord = self.discord.token.is_some();
        match self.service.platform {
            Platform::Auto => match (slack, discord) {
                (true, true) => Err("both CHAT_BRIDGE_SLACK__BOT_TOKEN and CHAT_BRIDGE_DISCORD__TOKEN are set; one process serves one platform (set service.platform, or run one deployment per platform)".into()),
                (true, false) => Ok(Platform::Slack),
                (false, true) => Ok(Platform::Discord),
                (false, false) => Ok(Platform::Console),
            },
            Platform::Slack if !slack => {
                Err("service.platform is slack but CHAT_BRIDGE_SLACK__BOT_TOKEN is not set".into())
            }
            Platform::Discord if !discord => {
                Err("service.platform is discord but CHAT_BRIDGE_DISCORD__TOKEN is not set".into())
            }
            p => Ok(p),
        }
    }

    /// Everything start-up and `check-config` refuse, in one place; returns the platform to serve.
    ///
    /// # Errors
    /// [`ConfigError::Refused`] listing every problem found, each naming its key or variable and
    /// what to set — never a secret's value, and URLs with their credentials masked.
    pub fn validate(&self) -> Result<Platform, ConfigError> {
        let mut problems = Vec::new();
        // S1: set but empty is worse than unset (an empty HMAC key verifies anyone's signature).
        for (var, secret) in self.secrets() {
            if secret.is_some_and(Secret::is_blank) {
                problems.push(format!(
                    "{var} is set but empty (S1): a blank secret would let anyone in; set the real value or unset {var}"
                ));
            }
        }
        if let Some(secret) = &self.slack.signing_secret
            && !secret.is_blank()
            && secret.expose().len() < MIN_SIGNING_SECRET_LEN
        {
            problems.push(format!(
                "CHAT_BRIDGE_SLACK__SIGNING_SECRET is shorter than {MIN_SIGNING_SECRET_LEN} bytes (S1): use the app's signing secret from Slack's Basic Information page"
            ));
        }
        let db = self.database.url.to_ascii_lowercase();
        if !(db.starts_with("postgres://")
            || db.starts_with("postgresql://")
            || db.starts_with("sqlite:"))
        {
            // Not echoed: a URL with a mistyped scheme (`postgres:/u:pw@h/db`) is not masked reliably.
            problems.push(
                "database.url must start with postgres://, postgresql:// or sqlite: (its value is not shown: it may hold a password)".into(),
            );
        } else if !database_url_parses(&self.database.url) {
            problems.push(format!(
                "database.url {} cannot be parsed as a database URL: check the host and the port, and percent-encode a password that holds / @ : ? or # (%2F %40 %3A %3F %23)",
                mask_url(&self.database.url)
            ));
        }
        if let Some(url) = &self.daemon.url {
            let lower = url.to_ascii_lowercase();
            let host = lower
                .strip_prefix("ws://")
                .or_else(|| lower.strip_prefix("wss://"));
            if host.is_none_or(str::is_empty) {
                problems.push(format!(
                    "daemon.url must be the daemon's ws:// or wss:// URL (…/acp), not {:?}",
                    mask_url(url)
                ));
            }
        }
        if let Some(listen) = &self.http.listen
            && !is_listen_address(listen)
        {
            problems.push(format!(
                "http.listen must be an address with a port (0.0.0.0:8080), not {listen:?}"
            ));
        }
        if self.slack.mode == SlackMode::Http
            && let Some(listen) = &self.http.listen
            && same_port(listen, &self.slack.listen)
        {
            problems.push(format!(
                "http.listen ({listen}) and slack.listen ({}) use the same port: give the Slack events listener its own",
                self.slack.listen
            ));
        }
        for (key, list) in [
            ("slack.allowed_users", &self.slack.allowed_users),
            ("slack.allowed_channels", &self.slack.allowed_channels),
            ("discord.allowed_users", &self.discord.allowed_users),
            ("discord.allowed_roles", &self.discord.allowed_roles),
            ("discord.allowed_channels", &self.discord.allowed_channels),
            ("approvals.approvers", &self.approvals.approvers),
        ] {
            if let Some(i) = list.iter().position(|v| v.trim().is_empty()) {
                problems.push(format!(
                    "{key}[{i}] is blank (A1): an empty id admits no one you meant and may admit an event without a user; list real ids"
                ));
            }
        }
        if !is_listen_address(&self.slack.listen) {
            problems.push(format!(
                "slack.listen must be an address with a port (0.0.0.0:3000), not {:?}",
                self.slack.listen
            ));
        }
        for (i, pattern) in self.redact.patterns.iter().enumerate() {
            if let Err(e) = regex::Regex::new(pattern) {
                problems.push(format!(
                    "redact.patterns[{i}] is not a valid regular expression: {}",
                    e.to_string().replace('\n', " ")
                ));
            }
        }
        if self.service.outbox_workers == 0 {
            problems.push("service.outbox_workers must be at least 1".into());
        }
        let platform = match self.platform() {
            Ok(p) => p,
            Err(e) => {
                problems.push(e);
                Platform::Auto
            }
        };
        match platform {
            Platform::Slack => self.check_slack(&mut problems),
            Platform::Discord => self.check_discord(&mut problems),
            Platform::Console | Platform::Auto => {}
        }
        if problems.is_empty() {
            Ok(platform)
        } else {
            Err(ConfigError::Refused(problems))
        }
    }

    fn check_slack(&self, problems: &mut Vec<String>) {
        match self.slack.mode {
            SlackMode::Socket if self.slack.app_token.is_none() => problems.push(
                "CHAT_BRIDGE_SLACK__APP_TOKEN is not set (Socket Mode needs the app-level token; or set slack.mode = \"http\" and CHAT_BRIDGE_SLACK__SIGNING_SECRET)".into(),
            ),
            SlackMode::Http if self.slack.signing_secret.is_none() => problems.push(
                "CHAT_BRIDGE_SLACK__SIGNING_SECRET is not set (slack.mode = \"http\" verifies every request with it)".into(),
            ),
            _ => {}
        }
        if self.slack.allowed_users.is_empty() && !self.access.open {
            problems.push(
                "no Slack user allowlist (A1): set slack.allowed_users (CHAT_BRIDGE_SLACK__ALLOWED_USERS='[\"U0123ABCD\"]') to the people who may run commands, or set access.open = true (CHAT_BRIDGE_ACCESS__OPEN=true) to let everyone who can reach the bot, DMs included, run them".into(),
            );
        }
    }

    fn check_discord(&self, problems: &mut Vec<String>) {
        if self.discord.allowed_users.is_empty()
            && self.discord.allowed_roles.is_empty()
            && !self.access.open
        {
            problems.push(
                "no Discord allowlist (A1): set discord.allowed_users (CHAT_BRIDGE_DISCORD__ALLOWED_USERS='[\"123456789012345678\"]') or discord.allowed_roles (CHAT_BRIDGE_DISCORD__ALLOWED_ROLES) to who may run commands, or set access.open = true (CHAT_BRIDGE_ACCESS__OPEN=true) to let everyone in the guild, and anyone who can DM the bot, run them".into(),
            );
        }
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
        assert_eq!(c.daemon.token.as_ref().map(Secret::expose), Some("s3cret"));
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
        assert_eq!(
            c.daemon.token.as_ref().map(Secret::expose),
            Some("from-file")
        );
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
        let open =
            load_with(tokens, &[("CHAT_BRIDGE_ACCESS__OPEN", "true")]).expect("open on purpose");
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
        assert_eq!(c.daemon.token.as_ref().map(Secret::expose), Some("424242"));
        let c = load(&[("CHAT_BRIDGE_HTTP__API_TOKEN", "true")]).expect("a boolean-looking token");
        assert_eq!(c.http.api_token.as_ref().map(Secret::expose), Some("true"));
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
            c.slack.signing_secret.as_ref().map(Secret::expose),
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
}
