//! Loading the configuration in layers — defaults, the file, `CHAT_BRIDGE_*` variables, flags — and
//! the S3 rule that every `CHAT_BRIDGE_*` variable names a key.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use secrecy::SecretString;

use super::secret::{is_secret, secret_keys};
use super::{Config, ConfigError, ENV_PREFIX, mask_url};

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

/// `CHAT_BRIDGE_*` variables the product and its scripts read outside the configuration: the config
/// file's path, the log filter, the standalone shell-agent's token, and the test and chart scripts'
/// own settings.
pub const OTHER_VARIABLES: [&str; 7] = [
    "CHAT_BRIDGE_CONFIG",
    "CHAT_BRIDGE_LOG",
    "CHAT_BRIDGE_SHELL_AGENT_TOKEN",
    "CHAT_BRIDGE_AGENT_HOST_TOKEN",
    "CHAT_BRIDGE_SHARED_DIR",
    "CHAT_BRIDGE_BIN",
    "CHAT_BRIDGE_CHART_VENV",
];

/// The top-level key `default_project` (it has no section).
pub const DEFAULT_PROJECT_VARIABLE: &str = "CHAT_BRIDGE_DEFAULT_PROJECT";

/// `("slack", "allowed_users")` → `CHAT_BRIDGE_SLACK__ALLOWED_USERS`.
pub(super) fn env_name(section: &str, key: &str) -> String {
    format!(
        "{ENV_PREFIX}{}__{}",
        section.to_uppercase(),
        key.to_uppercase()
    )
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
pub(super) fn key_defaults() -> BTreeMap<(String, String), serde_json::Value> {
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
pub(super) fn unknown_variable(
    name: &str,
    keys: &BTreeMap<(String, String), serde_json::Value>,
) -> Option<String> {
    let rest = name.strip_prefix(ENV_PREFIX)?;
    if OTHER_VARIABLES.contains(&name) || name == DEFAULT_PROJECT_VARIABLE {
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
        .chain(std::iter::once(DEFAULT_PROJECT_VARIABLE.to_owned()))
        .min_by_key(|candidate| distance(&upper, candidate))
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
                for name in secret_keys() {
                    let in_file = name.split_once('.').is_some_and(|(section, key)| {
                        t.get(section).and_then(|d| d.get(key)).is_some()
                    });
                    if in_file {
                        return Err(ConfigError::SecretInFile(name));
                    }
                }
                let projects = t.get("projects").and_then(toml::Value::as_array);
                for (i, p) in projects.into_iter().flatten().enumerate() {
                    if p.get("daemon").and_then(|d| d.get("token")).is_some() {
                        return Err(ConfigError::Refused(vec![format!(
                            "projects[{i}].daemon.token is a secret and may not be in the config file: put the token in a file and set projects[{i}].daemon.token_file (its value is not shown)"
                        )]));
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
            if name == DEFAULT_PROJECT_VARIABLE {
                table.insert("default_project".into(), toml::Value::String(value));
                continue;
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
                // An optional list: unset by default, so its default does not say it is one.
                _ if (section.as_str(), key.as_str()) == ("daemon", "command") => env_value(&value),
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
            cfg.daemon.token = Some(SecretString::from(token.clone()));
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
            cfg.daemon.token = Some(SecretString::from(token.to_owned()));
            cfg.daemon.token_from_file = true;
        }
        cfg.read_project_tokens()?;
        cfg.validate()?;
        Ok(cfg)
    }
}
