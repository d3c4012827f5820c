//! `[slack]`: Slack's section of the configuration (its checks are in `start.rs`).

use secrecy::SecretString;
use serde::{Deserialize, Serialize};

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
    #[serde(with = "crate::config::secret::optional")]
    pub bot_token: Option<SecretString>,
    /// App-level token `xapp-…` for Socket Mode (environment only).
    #[serde(with = "crate::config::secret::optional")]
    pub app_token: Option<SecretString>,
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
    #[serde(with = "crate::config::secret::optional")]
    pub signing_secret: Option<SecretString>,
}

impl Default for Slack {
    fn default() -> Self {
        Self {
            bot_token: None,
            app_token: None,
            api_base_url: super::api::DEFAULT_BASE_URL.into(),
            allowed_channels: Vec::new(),
            allowed_users: Vec::new(),
            allow_dms: true,
            mode: SlackMode::Socket,
            listen: "0.0.0.0:3000".into(),
            signing_secret: None,
        }
    }
}
