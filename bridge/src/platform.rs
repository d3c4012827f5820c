//! How a chat platform plugs in: the [`Platform`] trait and the [`REGISTRY`] of the platforms this
//! build serves.
//!
//! A platform owns its configuration checks and its start code inside its own folder
//! (`channel/slack/`, `channel/discord/`, `channel/console.rs`); start-up (`startup.rs`) knows only
//! this trait. Starting is two steps so that a standby replica takes nothing from the platform:
//! [`Platform::connect`] verifies the credentials and builds the outgoing [`Channel`] before the
//! leader lease is taken, and [`Connected::listen`] starts taking events once this replica is active.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::channel::{Arrival, BoxFuture, Channel};
use crate::config::{Config, SecretString};

/// A platform's own `[section]` of the configuration, kept in its folder (`channel/x/config.rs`).
/// The loader takes everything it needs from here: the section's keys and defaults (S3 variable
/// names come from its `Serialize`), its secrets (refused in the file, checked for blankness,
/// listed for redaction), and its own checks.
pub trait PlatformConfig:
    Default
    + Clone
    + std::fmt::Debug
    + serde::Serialize
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// Its secrets by key (`bot_token`), set or not: every field read with
    /// [`crate::config::secret::optional`].
    fn secrets(&self) -> Vec<(&'static str, Option<&SecretString>)>;

    /// Adds to `problems` what is wrong with the section whether or not the platform is served
    /// (malformed addresses, blank ids, too-short secrets); each problem names its key or variable,
    /// never a secret's value.
    fn check_section(&self, _cfg: &Config, _problems: &mut Vec<String>) {}
}

/// Reads one platform's section under its name.
type ParseSection =
    fn(&str, toml::Value) -> Result<Box<dyn crate::config::Section>, toml::de::Error>;

/// How the loader reads one platform's section: made by [`SectionSpec::of`].
#[derive(Clone, Copy)]
pub struct SectionSpec {
    /// The section's name: `[slack]`, `CHAT_BRIDGE_SLACK__*`.
    pub name: &'static str,
    pub(crate) default: fn() -> Box<dyn crate::config::Section>,
    pub(crate) parse: ParseSection,
}

impl std::fmt::Debug for SectionSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SectionSpec")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

fn default_of<T: PlatformConfig>() -> Box<dyn crate::config::Section> {
    Box::new(T::default())
}

fn parse_of<T: PlatformConfig>(
    name: &str,
    v: toml::Value,
) -> Result<Box<dyn crate::config::Section>, toml::de::Error> {
    // Under its name, so that an error says `in slack.mode` as the core's say `in daemon.url`.
    let table = toml::Table::from_iter([(name.to_owned(), v)]);
    let mut parsed: std::collections::BTreeMap<String, T> = toml::Value::Table(table).try_into()?;
    let section = parsed
        .remove(name)
        .ok_or_else(|| serde::de::Error::custom(format!("[{name}] is missing")))?;
    Ok(Box::new(section))
}

impl SectionSpec {
    /// The section `[name]`, read as `T`.
    #[must_use]
    pub const fn of<T: PlatformConfig>(name: &'static str) -> Self {
        Self {
            name,
            default: default_of::<T>,
            parse: parse_of::<T>,
        }
    }
}

/// A chat platform.
pub trait Platform: Send + Sync + std::fmt::Debug {
    /// Its `service.platform` name (also its channel's [`Channel::platform`]).
    fn name(&self) -> &'static str;

    /// Its own section of the configuration, if it has one (the console has none).
    fn section(&self) -> Option<SectionSpec> {
        None
    }

    /// Whether its credentials are set: `service.platform = "auto"` serves the one platform that
    /// says so (the console, which needs none, when no other does).
    fn configured(&self, cfg: &Config) -> bool;

    /// The variable whose being set makes it [configured](Platform::configured), for the error
    /// when `service.platform` names it without it.
    fn credentials(&self) -> &'static str;

    /// Adds to `problems` what is wrong with its settings when it is the platform served (missing
    /// tokens, A1 allowlists); each problem names its key or variable, never a secret's value.
    fn check(&self, cfg: &Config, problems: &mut Vec<String>);

    /// Who may use it, in words, for `check-config`.
    fn access(&self, cfg: &Config) -> String;

    /// Whether its input can end (the console's stdin): then the bridge finishes the work in hand
    /// and exits 0. For a platform whose listener runs until its stop (the default), a listener that
    /// returns on its own is an error: the process exits 1 so that it is restarted.
    fn input_ends(&self) -> bool {
        false
    }

    /// Verifies its credentials and builds its channel. Events it will take go to `inbound`, but
    /// only once [`Connected::listen`] runs.
    ///
    /// # Errors
    /// Refused credentials or an unreachable platform, in words for the operator.
    fn connect<'a>(
        &'a self,
        cfg: &'a Config,
        inbound: mpsc::Sender<Arrival>,
    ) -> BoxFuture<'a, anyhow::Result<Connected>>;
}

/// What a platform runs once this replica is active.
pub struct Running {
    /// Cancelled when the process stops: the listener returns soon after.
    pub stop: CancellationToken,
    /// Where the daemon is (masked, for a banner).
    pub daemon_url: String,
    /// Where the database is (masked, for a banner).
    pub database_url: String,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("daemon_url", &self.daemon_url)
            .field("database_url", &self.database_url)
            .finish_non_exhaustive()
    }
}

/// Takes the platform's events until `stop` (`Ok`), until its input ends (`Ok`: with
/// [`Platform::input_ends`] the bridge then finishes the work in hand and exits, as the console does
/// at end of input), or until it fails for good (`Err`: the process ends with that error).
pub type Listener = Box<dyn FnOnce(Running) -> BoxFuture<'static, anyhow::Result<()>> + Send>;

/// A platform whose credentials were accepted.
pub struct Connected {
    /// Where the outbox delivers.
    pub channel: Arc<dyn Channel>,
    /// Starts taking events.
    pub listen: Listener,
}

impl std::fmt::Debug for Connected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connected")
            .field("platform", &self.channel.platform())
            .finish_non_exhaustive()
    }
}

/// Every platform this build serves. Adding a platform adds its line here.
pub static REGISTRY: &[&dyn Platform] = &[
    &crate::channel::console::ConsolePlatform,
    &crate::channel::slack::start::SlackPlatform,
    &crate::channel::discord::start::DiscordPlatform,
];

/// Every platform's configuration section, in registry order.
pub fn sections() -> impl Iterator<Item = SectionSpec> {
    REGISTRY.iter().filter_map(|p| p.section())
}

/// `service.platform`'s special value: the one platform whose credentials are set.
pub const AUTO: &str = "auto";

/// The registered platform called `name`.
#[must_use]
pub fn by_name(name: &str) -> Option<&'static dyn Platform> {
    REGISTRY.iter().copied().find(|p| p.name() == name)
}

/// Every name `service.platform` accepts: `auto` and the registered platforms.
#[must_use]
pub fn names() -> Vec<&'static str> {
    std::iter::once(AUTO)
        .chain(REGISTRY.iter().map(|p| p.name()))
        .collect()
}

/// The platform this configuration serves: `service.platform`, or with `auto` the one whose
/// credentials are set (the console when none is).
///
/// # Errors
/// An unknown name, several configured platforms with `auto`, or an explicit platform whose
/// credentials are not set — in words naming what to set.
pub fn select(cfg: &Config) -> Result<&'static dyn Platform, String> {
    let name = cfg.service.platform.as_str();
    if name == AUTO {
        let configured: Vec<&'static dyn Platform> = REGISTRY
            .iter()
            .copied()
            .filter(|p| p.name() != "console" && p.configured(cfg))
            .collect();
        return match configured.as_slice() {
            [] => by_name("console").ok_or_else(|| "no platform is configured".to_owned()),
            [one] => Ok(*one),
            many => Err(format!(
                "the credentials of {} are all set; one process serves one platform (set service.platform, or run one deployment per platform)",
                many.iter()
                    .map(|p| p.name())
                    .collect::<Vec<_>>()
                    .join(" and ")
            )),
        };
    }
    let Some(platform) = by_name(name) else {
        return Err(format!(
            "service.platform {name:?} is not a platform this build serves: one of {}",
            names().join(", ")
        ));
    };
    if platform.configured(cfg) {
        Ok(platform)
    } else {
        Err(format!(
            "service.platform is {name} but {} is not set",
            platform.credentials()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registered_platform_has_a_distinct_name_and_auto_is_none_of_them() {
        let mut seen = std::collections::BTreeSet::new();
        for p in REGISTRY {
            assert!(seen.insert(p.name()), "{} twice", p.name());
            assert_ne!(p.name(), AUTO);
        }
        assert_eq!(names(), ["auto", "console", "slack", "discord"]);
    }

    #[test]
    fn auto_serves_the_console_without_credentials_and_refuses_two_platforms() {
        let mut cfg = Config::default();
        assert_eq!(select(&cfg).map(|p| p.name()), Ok("console"));
        cfg.discord_mut().token = Some("d".into());
        assert_eq!(select(&cfg).map(|p| p.name()), Ok("discord"));
        cfg.slack_mut().bot_token = Some("s".into());
        let err = select(&cfg).map(|p| p.name()).expect_err("two platforms");
        assert!(err.contains("slack and discord"), "{err}");
        cfg.service.platform = "slack".parse().expect("a name");
        assert_eq!(select(&cfg).map(|p| p.name()), Ok("slack"));
    }

    #[test]
    fn an_unknown_platform_is_refused_with_the_registered_names() {
        let mut cfg = Config::default();
        cfg.service.platform = "irc".parse().expect("a name");
        let err = select(&cfg).map(|p| p.name()).expect_err("irc");
        assert!(
            err.contains("\"irc\"") && err.contains("auto, console, slack, discord"),
            "{err}"
        );
    }
}
