//! `[[projects]]` and `default_project` (issue 17): channels bound to projects, each project with its
//! own daemon, approvals, liveness and access list.
//!
//! Without `[[projects]]` the configuration is the implicit one-project case of before: `[daemon]`,
//! `[approvals]`, `[liveness]` are the default project's. With `[[projects]]`, each entry carries
//! its own sub-tables (a missing `[projects.approvals]` or `[projects.liveness]` takes the top-level
//! section), and the top-level `[daemon]` must stay unset so that no daemon is configured twice.
//!
//! A project's daemon token comes only from `token_file` (a Kubernetes Secret key mounted as a file):
//! secrets never sit in the config file, and a list has no `CHAT_BRIDGE_*` variable name.

use std::collections::HashMap;

use secrecy::SecretString;
use serde::{Deserialize, Serialize};

use super::{Approvals, Config, Daemon, Liveness, check_ids};

/// The name of the implicit project of a configuration without `[[projects]]`.
pub const IMPLICIT_PROJECT: &str = "default";

/// `[projects.access]`: who may use this project, on top of the platform's own allowlist.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProjectAccess {
    /// User ids who may prompt in this project's channels; empty: whoever the platform admits.
    pub allowed_users: Vec<String>,
}

/// One `[[projects]]` entry.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Project {
    /// Its name (letters, digits, `-`, `_`): in `/status`, `/readyz`, the history and metrics.
    pub name: String,
    /// The channels it serves: `"slack:C123"`, `"discord:98765"`, `"console"`.
    pub channels: Vec<String>,
    /// `[projects.daemon]`, shaped like `[daemon]` (its token from `token_file` only).
    pub daemon: Daemon,
    /// `[projects.approvals]`; unset: the top-level `[approvals]`.
    pub approvals: Option<Approvals>,
    /// `[projects.liveness]`; unset: the top-level `[liveness]`.
    pub liveness: Option<Liveness>,
    /// `[projects.access]`.
    pub access: ProjectAccess,
}

/// A channel a project is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChannelRef {
    /// The registered platform (`slack`, `discord`, `console`).
    pub platform: String,
    /// The platform's channel id; `None` for the console (it has one channel).
    pub channel: Option<String>,
}

impl ChannelRef {
    /// Reads `"slack:C123"` or `"console"`.
    ///
    /// # Errors
    /// Words naming what is wrong (an unknown platform, a missing or blank id).
    pub fn parse(s: &str) -> Result<Self, String> {
        let (platform, channel) = match s.split_once(':') {
            Some((p, c)) => (p, Some(c)),
            None => (s, None),
        };
        if crate::platform::by_name(platform).is_none() {
            return Err(format!(
                "{s:?} names no platform: write <platform>:<channel id> with a platform among {}",
                crate::platform::REGISTRY
                    .iter()
                    .map(|p| p.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        match channel {
            None if platform != "console" => Err(format!(
                "{s:?} has no channel id: write {platform}:<channel id>"
            )),
            Some(c) if c.trim().is_empty() || c.trim() != c => Err(format!(
                "{s:?} has a blank or padded channel id: write {platform}:<channel id>"
            )),
            Some(_) if platform == "console" => Err(format!(
                "{s:?}: the console has one channel; write \"console\""
            )),
            _ => Ok(Self {
                platform: platform.to_owned(),
                channel: channel.map(str::to_owned),
            }),
        }
    }
}

impl std::fmt::Display for ChannelRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.channel {
            Some(c) => write!(f, "{}:{c}", self.platform),
            None => f.write_str(&self.platform),
        }
    }
}

/// A project as served: its settings with the top-level sections filled in.
#[derive(Debug, Clone)]
pub struct ResolvedProject {
    /// Its name ([`IMPLICIT_PROJECT`] for the configuration without `[[projects]]`).
    pub name: String,
    /// The channels bound to it (empty for the implicit project, which takes every channel).
    pub channels: Vec<ChannelRef>,
    /// Its daemon.
    pub daemon: Daemon,
    /// Its approvals.
    pub approvals: Approvals,
    /// Its liveness.
    pub liveness: Liveness,
    /// Its access list.
    pub access: ProjectAccess,
}

/// Where arrivals go: (platform, channel) → project, else the default project, else nowhere.
#[derive(Debug, Clone, Default)]
pub struct Routes {
    bound: HashMap<(String, Option<String>), String>,
    default: Option<String>,
}

impl Routes {
    /// The project serving `channel` on `platform` (`None` for the console), if any.
    #[must_use]
    pub fn project_for(&self, platform: &str, channel: Option<&str>) -> Option<&str> {
        let key = (
            platform.to_owned(),
            if platform == "console" {
                None
            } else {
                channel.map(str::to_owned)
            },
        );
        self.bound
            .get(&key)
            .or(self.default.as_ref())
            .map(String::as_str)
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl Config {
    /// Every project served, with the top-level sections filled in: the `[[projects]]` entries, or
    /// the implicit one-project case (`[daemon]` and friends, named [`IMPLICIT_PROJECT`]).
    #[must_use]
    pub fn resolved_projects(&self) -> Vec<ResolvedProject> {
        if self.projects.is_empty() {
            return vec![ResolvedProject {
                name: IMPLICIT_PROJECT.to_owned(),
                channels: Vec::new(),
                daemon: self.daemon.clone(),
                approvals: self.approvals.clone(),
                liveness: self.liveness.clone(),
                access: ProjectAccess::default(),
            }];
        }
        self.projects
            .iter()
            .map(|p| ResolvedProject {
                name: p.name.clone(),
                channels: p
                    .channels
                    .iter()
                    .filter_map(|c| ChannelRef::parse(c).ok())
                    .collect(),
                daemon: p.daemon.clone(),
                approvals: p
                    .approvals
                    .clone()
                    .unwrap_or_else(|| self.approvals.clone()),
                liveness: p.liveness.clone().unwrap_or_else(|| self.liveness.clone()),
                access: p.access.clone(),
            })
            .collect()
    }

    /// The routing table of a valid configuration; the implicit project takes every channel.
    #[must_use]
    pub fn routes(&self) -> Routes {
        if self.projects.is_empty() {
            return Routes {
                bound: HashMap::new(),
                default: Some(IMPLICIT_PROJECT.to_owned()),
            };
        }
        let mut bound = HashMap::new();
        for p in self.resolved_projects() {
            for c in p.channels {
                bound
                    .entry((c.platform, c.channel))
                    .or_insert(p.name.clone());
            }
        }
        Routes {
            bound,
            default: self.default_project.clone(),
        }
    }

    /// Each project's daemon token (read from its `token_file` at load), by the key that names it.
    pub(super) fn project_secrets(&self) -> Vec<(String, Option<&SecretString>)> {
        self.projects
            .iter()
            .map(|p| {
                (
                    format!("projects[{}].daemon.token_file", p.name),
                    p.daemon.token.as_ref(),
                )
            })
            .collect()
    }

    /// Reads each project's `token_file` (called by [`Config::load`]).
    pub(super) fn read_project_tokens(&mut self) -> Result<(), super::ConfigError> {
        for p in &mut self.projects {
            if let Some(path) = &p.daemon.token_file {
                let token = std::fs::read_to_string(path).map_err(|e| {
                    super::ConfigError::Refused(vec![format!(
                        "projects[{}].daemon.token_file {} cannot be read ({}): the project's daemon token is missing",
                        p.name,
                        path.display(),
                        e.kind()
                    )])
                })?;
                // A blank file is left for `validate` to refuse (S1), naming the key.
                p.daemon.token = Some(SecretString::from(token.trim().to_owned()));
                p.daemon.token_from_file = true;
            }
        }
        Ok(())
    }

    /// What is wrong with `[[projects]]` and `default_project` (called by [`Config::validate`]).
    pub(super) fn check_projects(&self, problems: &mut Vec<String>) {
        if self.projects.is_empty() {
            if let Some(d) = &self.default_project {
                problems.push(format!(
                    "default_project = {d:?} but there is no [[projects]] entry: add the project or remove default_project"
                ));
            }
            return;
        }
        let top = &self.daemon;
        let set: Vec<String> = [
            ("url", top.url.is_some()),
            ("token", top.token.is_some()),
            ("token_file", top.token_file.is_some()),
            ("mode", top.mode.is_some()),
            ("cwd", top.cwd.is_some()),
            ("command", top.command.is_some()),
            ("env", !top.env.is_empty()),
        ]
        .into_iter()
        .filter(|(_, on)| *on)
        .map(|(key, _)| format!("daemon.{key} ({})", super::load::env_name("daemon", key)))
        .collect();
        if !set.is_empty() {
            problems.push(format!(
                "[daemon] is set alongside [[projects]] — {}, from the file or the environment: each project has its own [projects.daemon]; move the settings there",
                set.join(", ")
            ));
        }
        let mut names: HashMap<&str, usize> = HashMap::new();
        let mut bound: HashMap<ChannelRef, &str> = HashMap::new();
        for (i, p) in self.projects.iter().enumerate() {
            let key = format!("projects[{i}]");
            if !valid_name(&p.name) {
                problems.push(format!(
                    "{key}.name {:?} must be 1 to 64 letters, digits, - or _",
                    p.name
                ));
            } else if let Some(first) = names.insert(&p.name, i) {
                problems.push(format!(
                    "{key}.name {:?} is already the name of projects[{first}]: project names are unique",
                    p.name
                ));
            }
            if p.channels.is_empty() && self.default_project.as_deref() != Some(p.name.as_str()) {
                problems.push(format!(
                    "{key} ({}) serves no channel and is not default_project: list its channels (\"slack:C123\", \"discord:98765\", \"console\")",
                    p.name
                ));
            }
            for (j, c) in p.channels.iter().enumerate() {
                match ChannelRef::parse(c) {
                    Ok(r) => {
                        if let Some(other) = bound.get(&r) {
                            problems.push(format!(
                                "{key}.channels[{j}] {r} is already bound to project {other:?}: a channel serves one project"
                            ));
                        } else {
                            bound.insert(r, &p.name);
                        }
                    }
                    Err(e) => problems.push(format!("{key}.channels[{j}] {e}")),
                }
            }
            if let Some(url) = &p.daemon.url {
                let lower = url.to_ascii_lowercase();
                let host = lower
                    .strip_prefix("ws://")
                    .or_else(|| lower.strip_prefix("wss://"));
                if host.is_none_or(str::is_empty) {
                    problems.push(format!(
                        "{key}.daemon.url must be the daemon's ws:// or wss:// URL (…/acp), not {:?}",
                        super::mask_url(url)
                    ));
                }
            }
            match (&p.daemon.url, &p.daemon.command) {
                (Some(_), Some(_)) => problems.push(format!(
                    "{key}.daemon.url and {key}.daemon.command are exclusive: set url for an agent reached over WebSocket, or command for one the bridge runs over stdio"
                )),
                (None, Some(argv)) => {
                    if argv.first().is_none_or(|p| p.trim().is_empty()) {
                        problems.push(format!(
                            "{key}.daemon.command is empty: give the agent's program and its arguments, e.g. [\"qwen\", \"--acp\"]"
                        ));
                    }
                    if p.daemon.token_file.is_some() {
                        problems.push(format!(
                            "{key}.daemon.token_file is for daemon.url; an agent run with daemon.command needs none: unset it"
                        ));
                    }
                }
                (_, None) if !p.daemon.env.is_empty() => problems.push(format!(
                    "{key}.daemon.env is the environment of a daemon.command agent; without daemon.command it has no effect: unset it"
                )),
                _ => {}
            }
            if p.daemon.token.is_some() && p.daemon.token_file.is_none() {
                // Only reachable from code: the file's `token` is refused at load.
                problems.push(format!(
                    "{key}.daemon.token is set without token_file: a project's token comes from its token_file"
                ));
            }
            if let Some(a) = &p.approvals {
                check_ids(
                    &format!("{key}.approvals.approvers"),
                    &a.approvers,
                    problems,
                );
            }
            check_ids(
                &format!("{key}.access.allowed_users"),
                &p.access.allowed_users,
                problems,
            );
        }
        if let Some(d) = &self.default_project
            && !self.projects.iter().any(|p| &p.name == d)
        {
            problems.push(format!(
                "default_project = {d:?} names no project: the projects are {}",
                self.projects
                    .iter()
                    .map(|p| format!("{:?}", p.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
}
