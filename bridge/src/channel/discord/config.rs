//! `[discord]`: Discord's section of the configuration (its checks are in `start.rs`).

use secrecy::SecretString;
use serde::{Deserialize, Serialize};

use crate::config::{Config, check_ids};
use crate::platform::PlatformConfig;

/// `[discord]`: set `CHAT_BRIDGE_DISCORD__TOKEN` to run on Discord.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Discord {
    /// Bot token (environment only).
    #[serde(with = "crate::config::secret::optional")]
    pub token: Option<SecretString>,
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
            api_base_url: super::DEFAULT_BASE_URL.into(),
            allowed_channels: Vec::new(),
            allowed_users: Vec::new(),
            allowed_roles: Vec::new(),
            allow_dms: true,
        }
    }
}

impl PlatformConfig for Discord {
    fn secrets(&self) -> Vec<(&'static str, Option<&SecretString>)> {
        vec![("token", self.token.as_ref())]
    }

    fn check_section(&self, _cfg: &Config, problems: &mut Vec<String>) {
        check_ids("discord.allowed_users", &self.allowed_users, problems);
        check_ids("discord.allowed_roles", &self.allowed_roles, problems);
        check_ids("discord.allowed_channels", &self.allowed_channels, problems);
    }
}

impl Config {
    /// `[discord]`.
    #[must_use]
    pub fn discord(&self) -> &Discord {
        self.section::<Discord>()
    }

    /// `[discord]`, to change it.
    pub fn discord_mut(&mut self) -> &mut Discord {
        self.section_mut::<Discord>()
    }
}
