//! Issue 16: the registry is the only list of platforms. Each platform's section, secrets and
//! checks come from its own folder through [`crate::platform::REGISTRY`]; nothing in the loader or
//! the chart names a platform the registry does not.

use super::super::load::key_defaults;
use super::super::secret::{is_secret, secret_keys};
use super::*;
use crate::platform::{REGISTRY, sections};

#[test]
fn every_registered_section_parses_and_its_keys_and_secrets_come_from_it() {
    let keys = key_defaults();
    let defaults = Sections::default();
    let mut seen = 0;
    for spec in sections() {
        seen += 1;
        // Its defaults round-trip through its own parser (secrets, serialized as `<secret>`, left out).
        let (_, section) = defaults
            .iter()
            .find(|(n, _)| *n == spec.name)
            .expect("its defaults");
        let mut json = section.to_json();
        let secret_names: Vec<&str> = section.secrets().iter().map(|(k, _)| *k).collect();
        let fields = json.as_object_mut().expect("a table");
        fields.retain(|k, v| !secret_names.contains(&k.as_str()) && !v.is_null());
        let text = toml::to_string(&serde_json::json!({ spec.name: fields })).expect("toml");
        let table: toml::Table = toml::from_str(&text).expect("parse");
        let cfg = Config::try_from(table).unwrap_or_else(|e| panic!("[{}]: {e}", spec.name));
        assert_eq!(
            cfg.platforms
                .iter()
                .find(|(n, _)| *n == spec.name)
                .map(|(_, s)| s.to_json()),
            Some(section.to_json()),
            "[{}] parses back to its defaults",
            spec.name
        );
        // Every key of it is a configuration key (so its S3 variable exists) ...
        for key in section.to_json().as_object().expect("a table").keys() {
            assert!(
                keys.contains_key(&(spec.name.to_owned(), key.clone())),
                "{}.{key} is a key",
                spec.name
            );
        }
        // ... and its secrets are refused in the file, checked and listed for S1.
        for key in secret_names {
            assert!(is_secret(spec.name, key), "{}.{key} is a secret", spec.name);
            assert!(secret_keys().contains(&format!("{}.{key}", spec.name)));
        }
    }
    // Derived, not counted by hand: a new platform's section needs no edit here.
    assert_eq!(seen, REGISTRY.iter().filter_map(|p| p.section()).count());
    for known in ["console", "slack", "discord"] {
        assert!(
            sections().any(|s| s.name == known),
            "[{known}] is a section"
        );
    }
}

/// The chart refuses a secret written into `config` (it belongs in the Secret): its
/// `chat-bridge.secretKeys` list is exactly the registry's secrets and the core's.
#[test]
fn the_charts_secret_list_is_exactly_the_registered_secrets() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../helm/chat-bridge/templates/_helpers.tpl"
    );
    let helpers = std::fs::read_to_string(path).expect("_helpers.tpl");
    let line = helpers
        .lines()
        .skip_while(|l| !l.contains("define \"chat-bridge.secretKeys\""))
        .nth(1)
        .expect("the chat-bridge.secretKeys list");
    let mut listed: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
    let mut known = secret_keys();
    listed.sort();
    known.sort();
    assert_eq!(
        listed, known,
        "helm/chat-bridge/templates/_helpers.tpl chat-bridge.secretKeys"
    );
}

#[test]
fn an_unknown_section_is_refused_naming_every_section_there_is() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("cb.toml");
    std::fs::write(&path, "[irc]\nserver = \"irc.example\"\n").expect("write");
    let err = Config::load(Some(&path), env(&[]), &Flags::default())
        .expect_err("no irc platform")
        .to_string();
    assert!(
        err.contains("[irc] is not a configuration section"),
        "{err}"
    );
    for section in ["database", "daemon", "service", "slack", "discord"] {
        assert!(err.contains(section), "{section} listed: {err}");
    }
    // And a variable for it is an S3 error, not ignored.
    let err = load(&[("CHAT_BRIDGE_IRC__SERVER", "irc.example")])
        .expect_err("no irc platform")
        .to_string();
    assert!(err.contains("CHAT_BRIDGE_IRC__SERVER"), "{err}");
}

#[test]
fn a_bad_value_in_a_platform_section_names_its_key() {
    let err = load(&[("CHAT_BRIDGE_DISCORD__ALLOW_DMS", "\"sometimes\"")])
        .expect_err("not a boolean")
        .to_string();
    assert!(err.contains("discord.allow_dms"), "{err}");
}

/// The chart's `service.platform` enum: every registered platform a release can serve (all but
/// those whose input ends, the console), and a `config.<section>` for each platform section.
#[test]
fn the_chart_schema_lists_exactly_the_registered_platforms() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../helm/chat-bridge/values.schema.json"
    );
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("schema")).expect("json");
    let config = &schema["properties"]["config"]["properties"];
    let listed: Vec<&str> = config["service"]["properties"]["platform"]["enum"]
        .as_array()
        .expect("an enum")
        .iter()
        .filter_map(serde_json::Value::as_str)
        .collect();
    let served: Vec<&str> = REGISTRY
        .iter()
        .filter(|p| !p.input_ends())
        .map(|p| p.name())
        .collect();
    assert_eq!(listed, served, "values.schema.json service.platform enum");
    for p in REGISTRY.iter().filter(|p| !p.input_ends()) {
        if let Some(spec) = p.section() {
            assert!(
                config[spec.name].is_object(),
                "values.schema.json has config.{}",
                spec.name
            );
        }
    }
}
