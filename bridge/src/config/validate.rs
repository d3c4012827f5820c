//! What start-up and `check-config` refuse, in one place (S1, S3, A1 and the platform's own checks).

use std::net::SocketAddr;

use secrecy::{ExposeSecret, SecretString};

use super::secret::is_blank;
use super::{Config, ConfigError, SlackMode, mask_url};
use crate::platform::Platform;

/// The shortest Slack signing secret accepted (Slack issues 32 hex characters).
pub const MIN_SIGNING_SECRET_LEN: usize = 16;

/// Whether start-up will be able to read `url` as connection options.
fn database_url_parses(url: &str) -> bool {
    use std::str::FromStr;
    if url.to_ascii_lowercase().starts_with("sqlite:") {
        sqlx::sqlite::SqliteConnectOptions::from_str(url).is_ok()
    } else {
        sqlx::postgres::PgConnectOptions::from_str(url).is_ok()
    }
}

/// Whether two listen addresses would take the same port on an overlapping address.
fn same_port(a: &str, b: &str) -> bool {
    match (a.parse::<SocketAddr>(), b.parse::<SocketAddr>()) {
        (Ok(a), Ok(b)) => {
            a.port() == b.port()
                && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
        }
        _ => false,
    }
}

pub(super) fn is_listen_address(s: &str) -> bool {
    if s.parse::<SocketAddr>().is_ok() {
        return true;
    }
    match s.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
                && port.parse::<u16>().is_ok()
        }
        None => false,
    }
}

impl Config {
    /// Every secret with the variable that sets it.
    pub(super) fn secrets(&self) -> [(&'static str, Option<&SecretString>); 6] {
        [
            ("CHAT_BRIDGE_DAEMON__TOKEN", self.daemon.token.as_ref()),
            (
                "CHAT_BRIDGE_SLACK__BOT_TOKEN",
                self.slack.bot_token.as_ref(),
            ),
            (
                "CHAT_BRIDGE_SLACK__APP_TOKEN",
                self.slack.app_token.as_ref(),
            ),
            (
                "CHAT_BRIDGE_SLACK__SIGNING_SECRET",
                self.slack.signing_secret.as_ref(),
            ),
            ("CHAT_BRIDGE_DISCORD__TOKEN", self.discord.token.as_ref()),
            ("CHAT_BRIDGE_HTTP__API_TOKEN", self.http.api_token.as_ref()),
        ]
    }

    /// Everything start-up and `check-config` refuse, in one place; returns the platform to serve.
    ///
    /// # Errors
    /// [`ConfigError::Refused`] listing every problem found, each naming its key or variable and
    /// what to set — never a secret's value, and URLs with their credentials masked.
    pub fn validate(&self) -> Result<&'static dyn Platform, ConfigError> {
        let mut problems = Vec::new();
        // S1: set but empty is worse than unset (an empty HMAC key verifies anyone's signature).
        for (var, secret) in self.secrets() {
            if secret.is_some_and(is_blank) {
                problems.push(format!(
                    "{var} is set but empty (S1): a blank secret would let anyone in; set the real value or unset {var}"
                ));
            }
        }
        if let Some(secret) = &self.slack.signing_secret
            && !is_blank(secret)
            && secret.expose_secret().len() < MIN_SIGNING_SECRET_LEN
        {
            problems.push(format!(
                "CHAT_BRIDGE_SLACK__SIGNING_SECRET is shorter than {MIN_SIGNING_SECRET_LEN} bytes (S1): use the app's signing secret from Slack's Basic Information page"
            ));
        }
        let db = self.database.url.to_ascii_lowercase();
        if !(db.starts_with("postgres://")
            || db.starts_with("postgresql://")
            || db.starts_with("sqlite:"))
        {
            // Not echoed: a URL with a mistyped scheme (`postgres:/u:pw@h/db`) is not masked reliably.
            problems.push(
                "database.url must start with postgres://, postgresql:// or sqlite: (its value is not shown: it may hold a password)".into(),
            );
        } else if !database_url_parses(&self.database.url) {
            problems.push(format!(
                "database.url {} cannot be parsed as a database URL: check the host and the port, and percent-encode a password that holds / @ : ? or # (%2F %40 %3A %3F %23)",
                mask_url(&self.database.url)
            ));
        }
        if let Some(url) = &self.daemon.url {
            let lower = url.to_ascii_lowercase();
            let host = lower
                .strip_prefix("ws://")
                .or_else(|| lower.strip_prefix("wss://"));
            if host.is_none_or(str::is_empty) {
                problems.push(format!(
                    "daemon.url must be the daemon's ws:// or wss:// URL (…/acp), not {:?}",
                    mask_url(url)
                ));
            }
        }
        if let Some(listen) = &self.http.listen
            && !is_listen_address(listen)
        {
            problems.push(format!(
                "http.listen must be an address with a port (0.0.0.0:8080), not {listen:?}"
            ));
        }
        if self.http.ui {
            if self.http.listen.is_none() {
                problems.push(
                    "http.ui = true needs http.listen: the pages are served on the HTTP listener"
                        .into(),
                );
            }
            if self.http.api_token.is_none() && self.http.ui_auth_header.is_none() {
                problems.push(
                    "http.ui = true needs a way to sign in: set CHAT_BRIDGE_HTTP__API_TOKEN (the /ui/login token) or http.ui_auth_header (a trusted auth proxy)".into(),
                );
            }
            if self.http.ui_session_minutes == 0 {
                problems.push("http.ui_session_minutes must be at least 1".into());
            }
        }
        if let Some(h) = &self.http.ui_auth_header
            && axum::http::HeaderName::from_bytes(h.as_bytes()).is_err()
        {
            problems.push(format!(
                "http.ui_auth_header must be a header name (X-Forwarded-Email), not {h:?}"
            ));
        }
        if let Some(u) = &self.http.ui_url
            && !(u.starts_with("https://") || u.starts_with("http://"))
        {
            problems.push(format!(
                "http.ui_url must be the http(s):// address people reach the UI at, not {u:?}"
            ));
        }
        if self.slack.mode == SlackMode::Http
            && let Some(listen) = &self.http.listen
            && same_port(listen, &self.slack.listen)
        {
            problems.push(format!(
                "http.listen ({listen}) and slack.listen ({}) use the same port: give the Slack events listener its own",
                self.slack.listen
            ));
        }
        for (key, list) in [
            ("slack.allowed_users", &self.slack.allowed_users),
            ("slack.allowed_channels", &self.slack.allowed_channels),
            ("discord.allowed_users", &self.discord.allowed_users),
            ("discord.allowed_roles", &self.discord.allowed_roles),
            ("discord.allowed_channels", &self.discord.allowed_channels),
            ("approvals.approvers", &self.approvals.approvers),
        ] {
            if let Some(i) = list.iter().position(|v| v.trim().is_empty()) {
                problems.push(format!(
                    "{key}[{i}] is blank (A1): an empty id admits no one you meant and may admit an event without a user; list real ids"
                ));
            }
        }
        if !is_listen_address(&self.slack.listen) {
            problems.push(format!(
                "slack.listen must be an address with a port (0.0.0.0:3000), not {:?}",
                self.slack.listen
            ));
        }
        for (i, pattern) in self.redact.patterns.iter().enumerate() {
            if let Err(e) = regex::Regex::new(pattern) {
                problems.push(format!(
                    "redact.patterns[{i}] is not a valid regular expression: {}",
                    e.to_string().replace('\n', " ")
                ));
            }
        }
        if self.service.outbox_workers == 0 {
            problems.push("service.outbox_workers must be at least 1".into());
        }
        let platform = match crate::platform::select(self) {
            Ok(p) => {
                p.check(self, &mut problems);
                Some(p)
            }
            Err(e) => {
                problems.push(e);
                None
            }
        };
        match platform {
            Some(p) if problems.is_empty() => Ok(p),
            _ => Err(ConfigError::Refused(problems)),
        }
    }
}
