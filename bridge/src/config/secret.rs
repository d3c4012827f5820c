//! Secrets in the configuration (S1, S2): tokens and the signing secret are
//! [`SecretString`]s — never printed by `Debug`, serialized as `<secret>`, read only as strings
//! (a value of another type is refused without repeating it), refused in the config file.

use anyhow::Context;
use secrecy::{ExposeSecret, SecretString};

use super::ENV_PREFIX;

/// The core's secret keys (those of no platform).
const CORE_SECRET_KEYS: [&str; 3] = [
    "daemon.token",
    "http.api_token",
    "http.ui_oidc_client_secret",
];

/// The keys whose values are secrets, `section.key`: the core's and each registered platform's
/// (from its section's own list). They are refused in the file, always read as strings from the
/// environment, checked for blankness (S1). `secret_keys_are_exactly_the_secret_typed_fields` keeps
/// this list equal to the fields read with [`optional`].
pub(super) fn secret_keys() -> Vec<String> {
    let platforms = super::Sections::default();
    CORE_SECRET_KEYS
        .iter()
        .map(|k| (*k).to_owned())
        .chain(platforms.iter().flat_map(|(name, section)| {
            section
                .secrets()
                .into_iter()
                .map(move |(key, _)| format!("{name}.{key}"))
        }))
        .collect()
}

pub(super) fn is_secret(section: &str, key: &str) -> bool {
    secret_keys()
        .iter()
        .any(|k| k.split_once('.') == Some((section, key)))
}

/// `discord.token` → `CHAT_BRIDGE_DISCORD__TOKEN`.
pub(super) fn secret_env_var(key: &str) -> String {
    format!("{ENV_PREFIX}{}", key.to_uppercase().replace('.', "__"))
}

/// Empty or only whitespace: set, but worth nothing (an empty HMAC key, an empty bearer).
#[must_use]
pub fn is_blank(secret: &SecretString) -> bool {
    secret.expose_secret().trim().is_empty()
}

/// A secret [`Config::validate`](super::Config::validate) guarantees is set for the platform
/// served; `var` names it in the error when it is not.
///
/// # Errors
/// It is not set.
pub fn required<'a>(
    secret: Option<&'a SecretString>,
    var: &str,
) -> anyhow::Result<&'a SecretString> {
    secret.with_context(|| format!("{var} is not set"))
}

/// Serde for an optional secret field: `#[serde(with = "crate::config::secret::optional")]`.
pub mod optional {
    use secrecy::SecretString;
    use serde::{Deserialize, Deserializer, Serializer};

    /// `<secret>` when set, `null` when not (so the key is still listed among the keys, S3).
    ///
    /// # Errors
    /// The serializer's.
    #[allow(clippy::ref_option)] // serde's `with` hands fields over by reference
    pub fn serialize<S: Serializer>(v: &Option<SecretString>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(_) => s.serialize_str("<secret>"),
            None => s.serialize_none(),
        }
    }

    /// A string, trimmed; any other type is an error that does not repeat the value.
    ///
    /// # Errors
    /// The value is not a string.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SecretString>, D::Error> {
        // Through a `toml::Value` so that a wrong type is reported without serde's default
        // "invalid type: integer `424242`", which would print the secret back.
        match Option::<toml::Value>::deserialize(d)? {
            None => Ok(None),
            // Surrounding whitespace is never part of a token or key: a trailing newline (a secret
            // made `--from-file`) would otherwise make every real signature fail to match.
            Some(toml::Value::String(s)) => Ok(Some(SecretString::from(s.trim().to_owned()))),
            Some(other) => Err(serde::de::Error::custom(format!(
                "a secret must be a string, not a {} (its value is not shown)",
                other.type_str()
            ))),
        }
    }
}
