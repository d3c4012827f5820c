//! `[slack]`: Slack's section of the configuration (its checks are in `start.rs`).

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use crate::config::secret::is_blank;
use crate::config::{Config, check_ids, is_listen_address, same_port};
use crate::platform::PlatformConfig;

/// The shortest Slack signing secret accepted (Slack issues 32 hex characters).
pub const MIN_SIGNING_SECRET_LEN: usize = 16;

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

impl PlatformConfig for Slack {
    fn secrets(&self) -> Vec<(&'static str, Option<&SecretString>)> {
        vec![
            ("bot_token", self.bot_token.as_ref()),
            ("app_token", self.app_token.as_ref()),
            ("signing_secret", self.signing_secret.as_ref()),
        ]
    }

    fn check_section(&self, cfg: &Config, problems: &mut Vec<String>) {
        if let Some(secret) = &self.signing_secret
            && !is_blank(secret)
            && secret.expose_secret().len() < MIN_SIGNING_SECRET_LEN
        {
            problems.push(format!(
                "CHAT_BRIDGE_SLACK__SIGNING_SECRET is shorter than {MIN_SIGNING_SECRET_LEN} bytes (S1): use the app's signing secret from Slack's Basic Information page"
            ));
        }
        if self.mode == SlackMode::Http
            && let Some(listen) = &cfg.http.listen
            && same_port(listen, &self.listen)
        {
            problems.push(format!(
                "http.listen ({listen}) and slack.listen ({}) use the same port: give the Slack events listener its own",
                self.listen
            ));
        }
        check_ids("slack.allowed_users", &self.allowed_users, problems);
        check_ids("slack.allowed_channels", &self.allowed_channels, problems);
        if !is_listen_address(&self.listen) {
            problems.push(format!(
                "slack.listen must be an address with a port (0.0.0.0:3000), not {:?}",
                self.listen
            ));
        }
    }
}

impl Config {
    /// `[slack]`.
    #[must_use]
    pub fn slack(&self) -> &Slack {
        self.section::<Slack>()
    }

    /// `[slack]`, to change it.
    pub fn slack_mut(&mut self) -> &mut Slack {
        self.section_mut::<Slack>()
    }
}
