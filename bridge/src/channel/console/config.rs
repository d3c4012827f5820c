//! `[console]`: the console's section of the configuration.

use secrecy::SecretString;
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::platform::PlatformConfig;

/// `[console]`: the console serves on its own when no other platform is configured; with
/// `enabled = true` it serves next to the others (stdin lines as one more channel).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleConfig {
    /// Serve the console next to the configured platforms.
    pub enabled: bool,
}

impl PlatformConfig for ConsoleConfig {
    fn secrets(&self) -> Vec<(&'static str, Option<&SecretString>)> {
        Vec::new()
    }
}

impl Config {
    /// `[console]`.
    #[must_use]
    pub fn console(&self) -> &ConsoleConfig {
        self.section::<ConsoleConfig>()
    }

    /// `[console]`, to change it.
    pub fn console_mut(&mut self) -> &mut ConsoleConfig {
        self.section_mut::<ConsoleConfig>()
    }
}
