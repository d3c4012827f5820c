//! Configuration in layers: defaults in code, then a TOML file (`--config`), then
//! `CHAT_BRIDGE_<SECTION>__<KEY>` environment variables, then command-line flags. Secrets (tokens, the
//! signing secret) come only from the environment or from a file they name — never from the config
//! file itself.
//!
//! # Layout
//! - this module: the sections and their defaults; a platform's own section lives in its folder
//!   (`channel/slack/config.rs`, `channel/discord/config.rs`).
//! - `load`: layering and the `CHAT_BRIDGE_*` names (S3); `validate`: what start-up refuses;
//!   `secret`: how secrets are read and checked (S1, S2).
//!
//! There is one validation path ([`Config::validate`], run by [`Config::load`]): whatever start-up
//! refuses, `chat-bridge check-config` refuses with the same words. It enforces the trust rules that
//! live in configuration:
//! - **S1** a secret that is set but empty or blank is an error naming its variable; a Slack signing
//!   secret is at least 16 bytes;
//! - **S2** no error ever carries a secret's value (secrets are [`SecretString`]s: always strings,
//!   never printed by `Debug` or serialized) and URLs are printed with their credentials masked;
//! - **S3** every `CHAT_BRIDGE_*` variable must map to a key (the keys come from the types
//!   themselves, [`Config::keys`]), else an error names it and the nearest valid name;
//! - **A1** on Slack and Discord, no user (or role) allowlist refuses to start unless
//!   `access.open = true`.

mod load;
mod projects;
pub mod secret;
mod sections;
#[cfg(test)]
mod tests;
mod validate;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

pub use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use crate::channel::discord::config::Discord;
pub use crate::channel::slack::config::{Slack, SlackMode};
use crate::core::OnStall;
pub use load::{Flags, OTHER_VARIABLES, check_variable_names};
pub use projects::{ChannelRef, IMPLICIT_PROJECT, Project, ProjectAccess, ResolvedProject, Routes};
pub use secret::required;
use secret::secret_env_var;
pub use sections::{Section, Sections};
pub(crate) use validate::{check_ids, is_listen_address, same_port};

/// The prefix of every configuration variable.
const ENV_PREFIX: &str = "CHAT_BRIDGE_";

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
    /// PostgreSQL: connections of the pool the conversations' transactions use (default 10; the
    /// bookkeeping pool adds 8). Thousands of concurrent sessions finishing tools need more: each
    /// result is a commit, and a result waits for a free connection. Keep replicas × (this + 8)
    /// under the server's `max_connections`. SQLite has one writer and ignores it.
    pub max_connections: u32,
}

impl Default for Database {
    fn default() -> Self {
        Self {
            url: "sqlite://./chat-bridge.db".into(),
            max_connections: crate::store::POOL_CONNECTIONS,
        }
    }
}

/// `[daemon]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Daemon {
    /// The daemon's `/acp` URL; unset (with no `command`) runs the built-in shell agent in-process.
    pub url: Option<String>,
    /// A stdio ACP agent the bridge runs as its child, program and arguments (`["qwen", "--acp"]`);
    /// exclusive with `url`.
    pub command: Option<Vec<String>>,
    /// Variables added to the child's environment (`command` only). Not for secrets: the child
    /// inherits the bridge's environment (minus `CHAT_BRIDGE_*`), which is where API keys belong.
    pub env: std::collections::BTreeMap<String, String>,
    /// Bearer token (environment only: `CHAT_BRIDGE_DAEMON__TOKEN`).
    #[serde(with = "secret::optional")]
    pub token: Option<SecretString>,
    /// A file holding the bearer token (for Kubernetes secrets mounted as files). Read at
    /// start-up, and again before every reconnect: a rotated Secret is taken without a restart.
    pub token_file: Option<PathBuf>,
    /// Whether `token` was read from `token_file` (not given by the environment or a flag, which
    /// win over it): only then is the file read again before a reconnect.
    #[serde(skip)]
    pub token_from_file: bool,
    /// Sent with `session/set_mode` for new sessions (qwen: `yolo`, `default`, …).
    pub mode: Option<String>,
    /// Working directory for new sessions (and of a `command` agent); default the current
    /// directory.
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
    /// After the daemon connection comes back, an open turn whose session sends nothing live within
    /// this is ended as interrupted (the daemon restarted and no longer runs it).
    #[serde(deserialize_with = "duration")]
    pub reconnect_grace: Duration,
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
            reconnect_grace: Duration::from_secs(30),
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
    /// In a thread the bot answers only messages that mention it; the others (from people who may
    /// prompt there) go along as context with its next prompt. For busy channels.
    pub require_mention_in_threads: bool,
}

/// `[http]`: health, readiness, the history API and the history pages.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Http {
    /// Where to listen (`0.0.0.0:8080`); unset: no HTTP server.
    pub listen: Option<String>,
    /// Bearer token for `/api/v1` (environment only); unset: the API answers 401.
    #[serde(with = "secret::optional")]
    pub api_token: Option<SecretString>,
    /// Serve the read-only history pages under `/ui/` (off by default). Sign-in: the API token on
    /// `/ui/login`, or `ui_auth_header` behind a trusted proxy.
    pub ui: bool,
    /// A header a trusted auth proxy (oauth2-proxy) sets to the signed-in user's identity; honoured
    /// only when set here, and only the proxy must be able to reach the listener.
    pub ui_auth_header: Option<String>,
    /// The address people reach the UI at (`https://bridge.example.com`): chat's "full output"
    /// pointer then links to the tool call's page there. Unset: the pointer names the `/ui/` path.
    pub ui_url: Option<String>,
    /// How long a UI sign-in lasts, in minutes (default 720: 12 hours).
    pub ui_session_minutes: u64,
    /// Wrong tokens one client address may try on `/ui/login` within `ui_login_window` before it
    /// is refused (429) for the rest of that window (default 10).
    pub ui_login_attempts: u32,
    /// The window of `ui_login_attempts` (default 10 minutes).
    #[serde(deserialize_with = "duration")]
    pub ui_login_window: Duration,
    /// A header the trusted proxy in front sets to the client's address (`X-Forwarded-For`: its
    /// last entry, the one the proxy appended; `X-Real-IP`): sign-in attempts are counted per that
    /// address. Unset: per TCP peer.
    pub ui_client_ip_header: Option<String>,
    /// `[http.ui_oidc]`: single sign-on with an OpenID Connect provider; unset: off.
    pub ui_oidc: Option<UiOidc>,
    /// The OpenID Connect client secret (environment only:
    /// `CHAT_BRIDGE_HTTP__UI_OIDC_CLIENT_SECRET`).
    #[serde(with = "secret::optional")]
    pub ui_oidc_client_secret: Option<SecretString>,
}

/// `[http.ui_oidc]`: sign-in to the history pages with the company's identity provider
/// (authorization code flow with PKCE). Closed unless opened on purpose: at least one of the
/// allow lists must be set, else the bridge refuses to start.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct UiOidc {
    /// The provider's issuer (`https://example.okta.com`); its discovery document is
    /// `<issuer>/.well-known/openid-configuration`.
    pub issuer: String,
    /// The client id registered with the provider.
    pub client_id: String,
    /// Where the provider sends people back (`https://bridge.example.com/ui/oidc/callback`);
    /// unset: `http.ui_url` + `/ui/oidc/callback`.
    pub redirect_url: Option<String>,
    /// Addresses let in (the ID token's `email`, compared without case).
    pub allowed_emails: Vec<String>,
    /// Domains let in (`example.com`: the part of a verified `email` after `@`).
    pub allowed_domains: Vec<String>,
    /// Groups let in (the ID token's `groups` claim; the `groups` scope is asked for).
    pub allowed_groups: Vec<String>,
    /// How long the provider's discovery document and keys are kept (default 15 minutes); a
    /// token signed by a key not among them fetches the keys again at once.
    #[serde(deserialize_with = "duration")]
    pub cache_for: Duration,
}

impl Default for UiOidc {
    fn default() -> Self {
        Self {
            issuer: String::new(),
            client_id: String::new(),
            redirect_url: None,
            allowed_emails: Vec::new(),
            allowed_domains: Vec::new(),
            allowed_groups: Vec::new(),
            cache_for: Duration::from_secs(15 * 60),
        }
    }
}

impl Default for Http {
    fn default() -> Self {
        Self {
            listen: None,
            api_token: None,
            ui: false,
            ui_auth_header: None,
            ui_url: None,
            ui_session_minutes: 720,
            ui_login_attempts: 10,
            ui_login_window: Duration::from_secs(600),
            ui_client_ip_header: None,
            ui_oidc: None,
            ui_oidc_client_secret: None,
        }
    }
}

/// `service.platform`: `auto` or the name of a registered platform ([`crate::platform::REGISTRY`]),
/// checked against the registry when the configuration is loaded.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct PlatformName(String);

impl PlatformName {
    /// The name as set.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for PlatformName {
    fn default() -> Self {
        Self(crate::platform::AUTO.to_owned())
    }
}

impl fmt::Display for PlatformName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for PlatformName {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_owned()))
    }
}

/// `[service]`: replicas and shutdown (D5).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Service {
    /// One chat platform: `auto` (every platform whose credentials are set, else the console),
    /// `console`, `slack` or `discord` — explicit in deployments, so a missing token is an error
    /// rather than a console that reads a closed stdin. See also `platforms`.
    pub platform: PlatformName,
    /// The chat platforms served at once (`["slack", "discord"]`): explicit in deployments, where a
    /// listed platform without its credentials is a start-up error. Empty (the default): as
    /// `service.platform` says.
    pub platforms: Vec<String>,
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
            platform: PlatformName::default(),
            platforms: Vec::new(),
            leader_retry: Duration::from_secs(2),
            leader_check: Duration::from_secs(2),
            drain_timeout: Duration::from_secs(20),
            outbox_workers: 4,
            conversation_idle: Duration::from_secs(600),
        }
    }
}

/// `[turns]`: how prompts reach the agent.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Turns {
    /// Each prompt reaches the agent as `[name] text`, the name the person shows in the platform
    /// (looked up once per user). The built-in shell agent runs text as a command and never gets
    /// the label.
    pub speaker_prefix: bool,
    /// A prompt that arrives while a turn runs: `queue` (waits), `steer` (cancels the running turn
    /// and runs next) or `collect` (merged with the others into the next prompt).
    pub while_busy: crate::conversation::busy::WhileBusy,
}

impl Default for Turns {
    fn default() -> Self {
        Self {
            speaker_prefix: true,
            while_busy: crate::conversation::busy::WhileBusy::Queue,
        }
    }
}

/// `[schedules]`: prompts a thread runs on a schedule (`/every`, `/at`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Schedules {
    /// Schedules one thread may have.
    pub per_thread: usize,
    /// The shortest `/every` interval.
    #[serde(deserialize_with = "duration")]
    pub min_interval: Duration,
    /// How often the active replica looks for due schedules.
    #[serde(deserialize_with = "duration")]
    pub check_every: Duration,
}

impl Default for Schedules {
    fn default() -> Self {
        Self {
            per_thread: 10,
            min_interval: Duration::from_secs(60),
            check_every: Duration::from_secs(1),
        }
    }
}

/// `[workspace]`: where each thread's session works.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Workspace {
    /// `shared` (default: every session works in `daemon.cwd`) or `worktree` (each conversation
    /// gets its own `git worktree` of `daemon.cwd`'s repository, on the branch
    /// `chat/<platform>-<short id>`; a `daemon.cwd` that is no git repository falls back to
    /// `shared` with a warning at start-up).
    pub isolation: crate::worktree::Isolation,
    /// A conversation idle this long has its worktree removed (not with uncommitted changes; the
    /// branch is kept), as `/done` does.
    #[serde(deserialize_with = "duration")]
    pub retain: Duration,
    /// Where the worktrees go (relative: to the repository's top level); default
    /// `.chat-bridge/worktrees` in the repository, listed in its `.git/info/exclude`.
    pub dir: Option<PathBuf>,
    /// How often the active replica looks for conversations idle past `retain`.
    #[serde(deserialize_with = "duration")]
    pub sweep_every: Duration,
}

impl Default for Workspace {
    fn default() -> Self {
        Self {
            isolation: crate::worktree::Isolation::Shared,
            retain: Duration::from_secs(7 * 86_400),
            dir: None,
            sweep_every: Duration::from_secs(3600),
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

/// `[attachments]`: files people attach to their messages. Images go to the agent inline (when it
/// takes images), other accepted files are saved under the session's directory; everything past
/// these limits is refused with a notice that says why.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Attachments {
    /// Images per message.
    pub max_images: usize,
    /// Bytes of one image.
    pub max_image_bytes: u64,
    /// Bytes of all images of one message.
    pub max_images_total: u64,
    /// Other files per message.
    pub max_files: usize,
    /// Bytes of one other file.
    pub max_file_bytes: u64,
    /// Bytes of saved text files embedded in one prompt when the agent takes embedded context.
    pub max_embedded_bytes: u64,
    /// Time the downloads of one message's files may take together.
    #[serde(deserialize_with = "duration")]
    pub download_timeout: Duration,
}

impl Default for Attachments {
    fn default() -> Self {
        let l = crate::conversation::files::Limits::default();
        Self {
            max_images: l.max_images,
            max_image_bytes: l.max_image_bytes,
            max_images_total: l.max_images_total,
            max_files: l.max_files,
            max_file_bytes: l.max_file_bytes,
            max_embedded_bytes: l.max_embedded_bytes,
            download_timeout: l.download_time,
        }
    }
}

impl Attachments {
    /// The limits for conversations; `agent_images` and `agent_embedded` from the daemon's
    /// `initialize` (`promptCapabilities.image`, `.embeddedContext`).
    #[must_use]
    pub fn limits(
        &self,
        agent_images: bool,
        agent_embedded: bool,
    ) -> crate::conversation::files::Limits {
        crate::conversation::files::Limits {
            agent_images,
            agent_embedded,
            max_embedded_bytes: self.max_embedded_bytes,
            max_images: self.max_images,
            max_image_bytes: self.max_image_bytes,
            max_images_total: self.max_images_total,
            max_files: self.max_files,
            max_file_bytes: self.max_file_bytes,
            download_time: self.download_timeout,
        }
    }
}

/// `[render]`: how answers look in chat.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Render {
    /// An answer longer than this many bytes is uploaded as a file (`answer.md`) with a short
    /// preview, instead of being split over many messages.
    pub upload_over: usize,
    /// Stream the agent's answer into a draft message as it is written (Slack and Discord).
    pub stream: bool,
    /// The draft is edited at most this often (within the platform's rate budget; the outbox
    /// coalesces edits).
    #[serde(deserialize_with = "duration")]
    pub stream_every: Duration,
    /// Channel ids whose answers are posted whole when the turn ends, never streamed.
    pub no_stream_channels: Vec<String>,
}

impl Default for Render {
    fn default() -> Self {
        Self {
            upload_over: 20_000,
            stream: true,
            stream_every: Duration::from_millis(1500),
            no_stream_channels: Vec::new(),
        }
    }
}

/// The whole configuration.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(try_from = "toml::Table")]
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
    /// `[attachments]`.
    pub attachments: Attachments,
    /// `[render]`.
    pub render: Render,
    /// `[turns]`.
    pub turns: Turns,
    /// `[schedules]`.
    pub schedules: Schedules,
    /// `[workspace]`.
    pub workspace: Workspace,
    /// `[http]`.
    pub http: Http,
    /// `[service]`.
    pub service: Service,
    /// `default_project`: the project of every channel no `[[projects]]` entry names; unset, such
    /// channels are ignored.
    pub default_project: Option<String>,
    /// `[[projects]]`; empty: the implicit one-project case (`[daemon]` and friends).
    pub projects: Vec<Project>,
    /// Each registered platform's own section (`[slack]`, `[discord]`, …): see
    /// [`crate::platform::PlatformConfig`].
    #[serde(flatten)]
    pub platforms: Sections,
}

/// The sections every build has, parsed before the platforms' are added.
#[derive(Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Core {
    database: Database,
    daemon: Daemon,
    liveness: Liveness,
    shell_agent: ShellAgent,
    approvals: Approvals,
    access: Access,
    redact: Redact,
    attachments: Attachments,
    render: Render,
    turns: Turns,
    schedules: Schedules,
    workspace: Workspace,
    http: Http,
    service: Service,
    default_project: Option<String>,
    projects: Vec<Project>,
}

impl TryFrom<toml::Table> for Config {
    type Error = String;

    /// The platforms' sections are read by their platforms (from the registry); a section that is
    /// neither theirs nor the core's is refused naming every section there is.
    fn try_from(mut table: toml::Table) -> Result<Self, String> {
        let platforms = Sections::take(&mut table)?;
        let core_names = Config::core_sections();
        if let Some(unknown) = table.keys().find(|k| !core_names.contains(k)) {
            return Err(format!(
                "[{unknown}] is not a configuration section: the sections are {}",
                core_names
                    .iter()
                    .map(String::as_str)
                    .chain(crate::platform::sections().map(|s| s.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let core: Core = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| e.to_string())?;
        Ok(Self {
            database: core.database,
            daemon: core.daemon,
            liveness: core.liveness,
            shell_agent: core.shell_agent,
            approvals: core.approvals,
            access: core.access,
            redact: core.redact,
            attachments: core.attachments,
            render: core.render,
            turns: core.turns,
            schedules: core.schedules,
            workspace: core.workspace,
            http: core.http,
            service: core.service,
            default_project: core.default_project,
            projects: core.projects,
            platforms,
        })
    }
}

impl Config {
    /// The names of the core sections (those of no platform), from the type itself.
    fn core_sections() -> Vec<String> {
        let mut cfg = serde_json::to_value(Config::default()).unwrap_or_default();
        if let Some(map) = cfg.as_object_mut() {
            for spec in crate::platform::sections() {
                map.remove(spec.name);
            }
        }
        cfg.as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The section of platform config type `T` (`cfg.section::<Slack>()`).
    #[must_use]
    pub fn section<T: crate::platform::PlatformConfig>(&self) -> &T {
        self.platforms.get::<T>()
    }

    /// The section of platform config type `T`, to change it.
    pub fn section_mut<T: crate::platform::PlatformConfig>(&mut self) -> &mut T {
        self.platforms.get_mut::<T>()
    }
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
    SecretInFile(String),
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

/// `url` with its credentials masked, for anything that prints it (S2).
#[must_use]
pub fn mask_url(url: &str) -> String {
    daemon_client::mask_url(url)
}
