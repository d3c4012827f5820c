//! The platforms' own sections of the configuration (`[slack]`, `[discord]`, …), held by type and
//! read through the [registry](crate::platform::REGISTRY): the loader knows no platform by name.

use std::any::Any;
use std::fmt;

use secrecy::SecretString;
use serde::{Serialize, Serializer};

use crate::platform::{PlatformConfig, sections};

/// One platform's section, its type erased (every [`PlatformConfig`] is one).
pub trait Section: Any + fmt::Debug + Send + Sync {
    /// `self` as [`Any`], to get the platform's own type back.
    fn as_any(&self) -> &dyn Any;
    /// `self` as mutable [`Any`].
    fn as_any_mut(&mut self) -> &mut dyn Any;
    /// A copy.
    fn clone_box(&self) -> Box<dyn Section>;
    /// Its keys and values as JSON, secrets as `<secret>` (for the S3 key list).
    fn to_json(&self) -> serde_json::Value;
    /// Its secrets by key, set or not.
    fn secrets(&self) -> Vec<(&'static str, Option<&SecretString>)>;
    /// Its own checks ([`PlatformConfig::check_section`]).
    fn check(&self, cfg: &super::Config, problems: &mut Vec<String>);
}

impl<T: PlatformConfig> Section for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn clone_box(&self) -> Box<dyn Section> {
        Box::new(self.clone())
    }
    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
    fn secrets(&self) -> Vec<(&'static str, Option<&SecretString>)> {
        PlatformConfig::secrets(self)
    }
    fn check(&self, cfg: &super::Config, problems: &mut Vec<String>) {
        self.check_section(cfg, problems);
    }
}

/// Every registered platform's section by name, each present (its defaults until set).
#[derive(Debug)]
pub struct Sections(Vec<(&'static str, Box<dyn Section>)>);

impl Default for Sections {
    fn default() -> Self {
        Self(sections().map(|s| (s.name, (s.default)())).collect())
    }
}

impl Clone for Sections {
    fn clone(&self) -> Self {
        Self(self.0.iter().map(|(n, s)| (*n, s.clone_box())).collect())
    }
}

impl Serialize for Sections {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(n, sec)| (*n, sec.to_json())))
    }
}

impl Sections {
    /// The sections of `table` that belong to a platform, parsed by it (and taken out of
    /// `table`); the platforms whose section is absent get their defaults.
    ///
    /// # Errors
    /// The first section that does not parse, with the parser's words prefixed by its name.
    pub(super) fn take(table: &mut toml::Table) -> Result<Self, String> {
        let mut out = Vec::new();
        for spec in sections() {
            let section = match table.remove(spec.name) {
                Some(v) => (spec.parse)(spec.name, v).map_err(|e| e.to_string())?,
                None => (spec.default)(),
            };
            out.push((spec.name, section));
        }
        Ok(Self(out))
    }

    /// Each section by name.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &dyn Section)> {
        self.0.iter().map(|(n, s)| (*n, s.as_ref()))
    }

    /// The section of type `T`.
    ///
    /// # Panics
    /// `T` is no registered platform's section (a programming error: every registered section is
    /// present from [`Default`] on).
    #[must_use]
    pub fn get<T: PlatformConfig>(&self) -> &T {
        self.0
            .iter()
            .find_map(|(_, s)| s.as_any().downcast_ref::<T>())
            .expect("the section of a registered platform")
    }

    /// The section of type `T`, to change it (tests, flags).
    ///
    /// # Panics
    /// `T` is no registered platform's section.
    pub fn get_mut<T: PlatformConfig>(&mut self) -> &mut T {
        self.0
            .iter_mut()
            .find_map(|(_, s)| s.as_any_mut().downcast_mut::<T>())
            .expect("the section of a registered platform")
    }
}
