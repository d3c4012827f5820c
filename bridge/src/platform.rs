//! How a chat platform plugs in: the [`Platform`] trait and the [`REGISTRY`] of the platforms this
//! build serves.
//!
//! A platform owns its configuration checks and its start code inside its own folder
//! (`channel/slack/`, `channel/discord/`, `channel/console/`); start-up (`startup.rs`) knows only
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
#[derive(Clone)]
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

/// The listeners of several platforms as one, each named: it ends `Ok` when every one has ended
/// well (after the stop, or a local input such as the console's that ended — the others go on),
/// and with the first failure, or the first listener that returned on its own when its input
/// cannot end, at once.
#[must_use]
pub fn listen_all(listeners: Vec<(&'static str, bool, Listener)>) -> Listener {
    Box::new(move |run: Running| {
        Box::pin(async move {
            use futures_util::StreamExt;
            let mut running = futures_util::stream::FuturesUnordered::new();
            for (name, input_ends, listen) in listeners {
                let run = run.clone();
                running.push(async move { (name, input_ends, listen(run).await) });
            }
            while let Some((name, input_ends, result)) = running.next().await {
                match result {
                    Err(e) => return Err(e.context(format!("{name} stopped"))),
                    Ok(()) if input_ends || run.stop.is_cancelled() => {}
                    Ok(()) => anyhow::bail!(
                        "{name} stopped taking events on its own; exiting so that it is restarted"
                    ),
                }
            }
            Ok(())
        })
    })
}

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

/// Every platform this build serves: the `platforms!` list in `channel/mod.rs`, where adding a
/// platform adds its one line.
pub static REGISTRY: &[&dyn Platform] = crate::channel::PLATFORMS;

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

/// The platforms this configuration serves, in registry order:
/// - `service.platforms = [...]`: exactly those (each must have its credentials);
/// - else `service.platform = "<name>"`: that one (today's single-platform key);
/// - else (`auto`): every platform whose credentials are set (the console with `console.enabled`),
///   or the local console alone when none is.
///
/// A local platform (one whose [input ends](Platform::input_ends): the console) needs no
/// credentials when named.
///
/// # Errors
/// An unknown name, both keys set, or a named platform whose credentials are not set — in words
/// naming what to set.
pub fn select(cfg: &Config) -> Result<Vec<&'static dyn Platform>, String> {
    let single = cfg.service.platform.as_str();
    let named: Vec<&str> = match (cfg.service.platforms.as_slice(), single) {
        ([], AUTO) => Vec::new(),
        ([], one) => vec![one],
        (many, AUTO) => many.iter().map(String::as_str).collect(),
        (_, _) => {
            return Err(
                "service.platform and service.platforms are both set: keep service.platforms (the list) only".into(),
            );
        }
    };
    let key = if cfg.service.platforms.is_empty() {
        "service.platform"
    } else {
        "service.platforms"
    };
    if named.is_empty() {
        let configured: Vec<&'static dyn Platform> = REGISTRY
            .iter()
            .copied()
            .filter(|p| p.configured(cfg))
            .collect();
        if configured.is_empty() {
            let local: Vec<&'static dyn Platform> = REGISTRY
                .iter()
                .copied()
                .filter(|p| p.input_ends())
                .collect();
            if local.is_empty() {
                return Err("no platform is configured".into());
            }
            return Ok(local);
        }
        return Ok(configured);
    }
    let mut problems = Vec::new();
    for name in &named {
        match by_name(name) {
            None => problems.push(format!(
                "{key} {name:?} is not a platform this build serves: one of {}",
                if key == "service.platform" {
                    names().join(", ")
                } else {
                    REGISTRY
                        .iter()
                        .map(|p| p.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            )),
            Some(p) if !p.input_ends() && !p.configured(cfg) => problems.push(format!(
                "{key} {} {name} but {} is not set",
                if key == "service.platform" {
                    "is"
                } else {
                    "lists"
                },
                p.credentials()
            )),
            Some(_) => {}
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    // `console.enabled` adds the console next to the platforms listed.
    Ok(REGISTRY
        .iter()
        .copied()
        .filter(|p| {
            named.contains(&p.name())
                || (key == "service.platforms" && p.input_ends() && p.configured(cfg))
        })
        .collect())
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
        // The registry's order after `auto`; a new platform's line adds its name here by itself.
        let listed: Vec<&str> = REGISTRY.iter().map(|p| p.name()).collect();
        assert_eq!(names()[0], "auto");
        assert_eq!(names()[1..], listed[..]);
        assert_eq!(listed[..3], ["console", "slack", "discord"]);
    }

    fn names_of(cfg: &Config) -> Result<Vec<&'static str>, String> {
        select(cfg).map(|ps| ps.iter().map(|p| p.name()).collect())
    }

    #[test]
    fn auto_serves_every_configured_platform_and_the_console_when_none_or_enabled() {
        let mut cfg = Config::default();
        assert_eq!(names_of(&cfg), Ok(vec!["console"]));
        cfg.discord_mut().token = Some("d".into());
        assert_eq!(names_of(&cfg), Ok(vec!["discord"]));
        cfg.slack_mut().bot_token = Some("s".into());
        assert_eq!(names_of(&cfg), Ok(vec!["slack", "discord"]));
        cfg.console_mut().enabled = true;
        assert_eq!(names_of(&cfg), Ok(vec!["console", "slack", "discord"]));
        cfg.service.platform = "slack".parse().expect("a name");
        assert_eq!(names_of(&cfg), Ok(vec!["slack"]));
    }

    #[test]
    fn service_platforms_lists_exactly_the_served_ones_each_with_its_credentials() {
        let mut cfg = Config::default();
        cfg.slack_mut().bot_token = Some("s".into());
        cfg.service.platforms = vec!["slack".into(), "console".into()];
        assert_eq!(names_of(&cfg), Ok(vec!["console", "slack"]));
        cfg.service.platforms = vec!["discord".into(), "irc".into()];
        let err = names_of(&cfg).expect_err("discord has no token, irc is none");
        assert!(
            err.contains(
                "service.platforms lists discord but CHAT_BRIDGE_DISCORD__TOKEN is not set"
            ) && err.contains("\"irc\""),
            "{err}"
        );
        cfg.service.platforms = vec!["slack".into()];
        cfg.service.platform = "slack".parse().expect("a name");
        let err = names_of(&cfg).expect_err("both keys");
        assert!(err.contains("both set"), "{err}");
    }

    #[test]
    fn console_enabled_adds_the_console_to_an_explicit_platforms_list() {
        let mut cfg = Config::default();
        cfg.slack_mut().bot_token = Some("s".into());
        cfg.service.platforms = vec!["slack".into()];
        assert_eq!(names_of(&cfg), Ok(vec!["slack"]));
        cfg.console_mut().enabled = true;
        assert_eq!(names_of(&cfg), Ok(vec!["console", "slack"]));
    }

    #[test]
    fn an_unknown_platform_is_refused_with_the_registered_names() {
        let mut cfg = Config::default();
        cfg.service.platform = "irc".parse().expect("a name");
        let err = names_of(&cfg).expect_err("irc");
        assert!(
            err.contains("\"irc\"") && err.contains("auto, console, slack, discord"),
            "{err}"
        );
    }
}
