//! What start-up and `check-config` refuse, in one place (S1, S3, A1 and the platform's own checks).

use std::net::SocketAddr;

use secrecy::SecretString;

use super::secret::{is_blank, secret_env_var};
use super::{Config, ConfigError, mask_url};
use crate::platform::Platform;

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
pub(crate) fn same_port(a: &str, b: &str) -> bool {
    match (a.parse::<SocketAddr>(), b.parse::<SocketAddr>()) {
        (Ok(a), Ok(b)) => {
            a.port() == b.port()
                && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
        }
        _ => false,
    }
}

pub(crate) fn is_listen_address(s: &str) -> bool {
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

/// A1: a blank id in the list `key` admits no one meant (and may admit an event without a user).
pub(crate) fn check_ids(key: &str, list: &[String], problems: &mut Vec<String>) {
    if let Some(i) = list.iter().position(|v| v.trim().is_empty()) {
        problems.push(format!(
            "{key}[{i}] is blank (A1): an empty id admits no one you meant and may admit an event without a user; list real ids"
        ));
    }
}

fn is_http_url(u: &str) -> bool {
    (u.starts_with("https://") || u.starts_with("http://")) && u.len() > "https://".len()
}

/// Whether `h` is a header clients send themselves (or a proxy sets for another purpose): as
/// `http.ui_auth_header` it would let anyone sign in as whatever they write there.
fn every_client_sends(h: &str) -> bool {
    let h = h.trim().to_ascii_lowercase();
    const EXACT: &[&str] = &[
        "host",
        "user-agent",
        "cookie",
        "accept",
        "connection",
        "origin",
        "referer",
        "authorization",
        "proxy-authorization",
        "x-forwarded-for",
        "x-forwarded-proto",
        "x-forwarded-host",
        "x-forwarded-port",
        "x-real-ip",
        "forwarded",
        "via",
        "te",
        "upgrade",
        "upgrade-insecure-requests",
        "cache-control",
        "pragma",
        "range",
        "dnt",
        "expect",
        "keep-alive",
        "transfer-encoding",
        "priority",
    ];
    const PREFIXES: &[&str] = &["accept-", "content-", "sec-", "if-", "access-control-"];
    EXACT.contains(&h.as_str()) || PREFIXES.iter().any(|p| h.starts_with(p))
}

/// Whether `u` (`http.ui_url`) is an origin: a scheme and a host, with no path (a trailing `/` is
/// fine), query or fragment — chat's links add `/ui/…` themselves.
fn is_origin(u: &str) -> bool {
    let Some(rest) = u
        .strip_prefix("https://")
        .or_else(|| u.strip_prefix("http://"))
    else {
        return false;
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    !rest.is_empty() && !rest.contains(['/', '?', '#', ' '])
}

impl Config {
    /// `[http.ui_oidc]`: complete, and closed unless an allow list opens it (S-OIDC1).
    fn check_ui_oidc(&self, o: &super::UiOidc, problems: &mut Vec<String>) {
        if !is_http_url(o.issuer.trim()) {
            problems.push(format!(
                "http.ui_oidc.issuer must be the provider's http(s):// issuer URL, not {:?}",
                o.issuer
            ));
        }
        if o.client_id.trim().is_empty() {
            problems.push(
                "http.ui_oidc.client_id must be set (the id registered with the provider)".into(),
            );
        }
        if self.http.ui_oidc_client_secret.is_none() {
            problems.push(format!(
                "[http.ui_oidc] needs the client secret: set {}",
                secret_env_var("http.ui_oidc_client_secret")
            ));
        }
        match &o.redirect_url {
            Some(u) if !is_http_url(u) => problems.push(format!(
                "http.ui_oidc.redirect_url must be an http(s):// URL ending in /ui/oidc/callback, not {u:?}"
            )),
            Some(_) => {}
            None if self.http.ui_url.is_none() => problems.push(
                "[http.ui_oidc] needs http.ui_oidc.redirect_url or http.ui_url (the callback is <ui_url>/ui/oidc/callback)".into(),
            ),
            None => {}
        }
        let blank = |l: &[String]| l.iter().all(|v| v.trim().is_empty());
        if blank(&o.allowed_emails) && blank(&o.allowed_domains) && blank(&o.allowed_groups) {
            problems.push(
                "[http.ui_oidc] lets nobody in: set http.ui_oidc.allowed_emails, allowed_domains or allowed_groups (everyone the provider knows is not a default)".into(),
            );
        }
        // Each entry must be what it says: an allow list has no wildcards, and an entry that
        // matches nobody (or is not what it looks like) is a mistake to point out, not to ignore.
        for d in &o.allowed_domains {
            let t = d.trim();
            let domain_chars = t
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
            if t.is_empty() || !domain_chars || t.starts_with('.') || t.ends_with('.') {
                problems.push(format!(
                    "http.ui_oidc.allowed_domains entries must be domain names (example.com: no @, no wildcard, not blank), not {d:?}"
                ));
            }
        }
        for e in &o.allowed_emails {
            let t = e.trim();
            let ok = t.split_once('@').is_some_and(|(local, domain)| {
                !local.is_empty()
                    && !domain.is_empty()
                    && !domain.contains('@')
                    && !t.contains(['*', '?', ' '])
            });
            if !ok {
                problems.push(format!(
                    "http.ui_oidc.allowed_emails entries must be whole email addresses (alice@example.com: no wildcard, not blank), not {e:?}; to let a whole domain in, use allowed_domains"
                ));
            }
        }
        for g in &o.allowed_groups {
            if g.trim().is_empty() || g.trim() == "*" {
                problems.push(format!(
                    "http.ui_oidc.allowed_groups entries must be group names (no wildcard, not blank), not {g:?}"
                ));
            }
        }
    }

    /// Every secret with the variable that sets it: the core's and each platform's.
    pub(crate) fn secrets(&self) -> Vec<(String, Option<&SecretString>)> {
        let core = [
            ("daemon.token", self.daemon.token.as_ref()),
            ("http.api_token", self.http.api_token.as_ref()),
            (
                "http.ui_oidc_client_secret",
                self.http.ui_oidc_client_secret.as_ref(),
            ),
        ]
        .map(|(key, v)| (secret_env_var(key), v));
        core.into_iter()
            .chain(self.project_secrets())
            .chain(self.platforms.iter().flat_map(|(name, section)| {
                section
                    .secrets()
                    .into_iter()
                    .map(move |(key, v)| (secret_env_var(&format!("{name}.{key}")), v))
            }))
            .collect()
    }

    /// Everything start-up and `check-config` refuse, in one place; returns the platforms to serve (at least one).
    ///
    /// # Errors
    /// [`ConfigError::Refused`] listing every problem found, each naming its key or variable and
    /// what to set — never a secret's value, and URLs with their credentials masked.
    pub fn validate(&self) -> Result<Vec<&'static dyn Platform>, ConfigError> {
        let mut problems = Vec::new();
        // S1: set but empty is worse than unset (an empty HMAC key verifies anyone's signature).
        for (var, secret) in self.secrets() {
            if secret.is_some_and(is_blank) {
                problems.push(format!(
                    "{var} is set but empty (S1): a blank secret would let anyone in; set the real value or unset {var}"
                ));
            }
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
        if !(1..=crate::store::MAX_POOL_CONNECTIONS).contains(&self.database.max_connections) {
            problems.push(format!(
                "database.max_connections must be between 1 and {}, not {} (the pool of PostgreSQL connections for the conversations' transactions; default {})",
                crate::store::MAX_POOL_CONNECTIONS,
                self.database.max_connections,
                crate::store::POOL_CONNECTIONS
            ));
        }
        if self.workspace.retain.is_zero() || self.workspace.sweep_every.is_zero() {
            problems.push(
                "workspace.retain and workspace.sweep_every must be longer than zero (retain: how long an idle thread keeps its worktree, e.g. 7d; sweep_every: how often that is checked, e.g. 1h)".into(),
            );
        }
        if self.schedules.check_every.is_zero() || self.schedules.min_interval.is_zero() {
            problems.push(
                "schedules.check_every and schedules.min_interval must be longer than zero (check_every: how often due schedules are looked for, e.g. 1s; min_interval: the shortest interval /every takes, e.g. 1m)".into(),
            );
        }
        if let Some(dir) = &self.workspace.dir
            && !dir
                .components()
                .any(|c| matches!(c, std::path::Component::Normal(_)))
        {
            problems.push(format!(
                "workspace.dir {:?} cannot hold the threads' worktrees: give a directory of their own (unset: <repository>/.chat-bridge/worktrees)",
                dir.display().to_string()
            ));
        }
        match (&self.daemon.url, &self.daemon.command) {
            (Some(_), Some(_)) => problems.push(
                "daemon.url and daemon.command are exclusive: set daemon.url for an agent reached over WebSocket, or daemon.command for one the bridge runs over stdio".into(),
            ),
            (None, Some(argv)) => {
                if argv.first().is_none_or(|p| p.trim().is_empty()) {
                    problems.push(
                        "daemon.command is empty: give the agent's program and its arguments, e.g. [\"qwen\", \"--acp\"]".into(),
                    );
                }
                if self.daemon.token.is_some() || self.daemon.token_file.is_some() {
                    problems.push(
                        "daemon.token and daemon.token_file are for daemon.url; an agent run with daemon.command needs none: unset them".into(),
                    );
                }
            }
            (_, None) if !self.daemon.env.is_empty() => problems.push(
                "daemon.env is the environment of a daemon.command agent; without daemon.command it has no effect: unset it".into(),
            ),
            _ => {}
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
            if self.http.api_token.is_none()
                && self.http.ui_auth_header.is_none()
                && self.http.ui_oidc.is_none()
            {
                problems.push(
                    "http.ui = true needs a way to sign in: set CHAT_BRIDGE_HTTP__API_TOKEN (the /ui/login token), [http.ui_oidc] (single sign-on) or http.ui_auth_header (a trusted auth proxy)".into(),
                );
            }
            if self.http.ui_session_minutes == 0 {
                problems.push("http.ui_session_minutes must be at least 1".into());
            }
            if self.http.ui_login_attempts == 0 {
                problems.push("http.ui_login_attempts must be at least 1".into());
            }
            if self.http.ui_login_window < std::time::Duration::from_secs(1) {
                problems.push("http.ui_login_window must be at least 1s".into());
            }
        }
        if let Some(o) = &self.http.ui_oidc {
            self.check_ui_oidc(o, &mut problems);
        }
        if let Some(h) = &self.http.ui_auth_header {
            if axum::http::HeaderName::from_bytes(h.as_bytes()).is_err() {
                problems.push(format!(
                    "http.ui_auth_header must be a header name (X-Forwarded-Email), not {h:?}"
                ));
            } else if every_client_sends(h) {
                problems.push(format!(
                    "http.ui_auth_header must be a header only the trusted auth proxy sets (X-Auth-Request-Email, X-Forwarded-Email), not {h:?}: clients send that one themselves, so anyone could sign in as whatever it says"
                ));
            }
        }
        if let Some(h) = &self.http.ui_client_ip_header
            && axum::http::HeaderName::from_bytes(h.trim().as_bytes()).is_err()
        {
            problems.push(format!(
                "http.ui_client_ip_header must be a header name (X-Forwarded-For), not {h:?}"
            ));
        }
        if let Some(u) = &self.http.ui_url {
            if !(u.starts_with("https://") || u.starts_with("http://")) {
                problems.push(format!(
                    "http.ui_url must be the http(s):// address people reach the UI at, not {u:?}"
                ));
            } else if !is_origin(u) {
                problems.push(format!(
                    "http.ui_url must be an origin only (https://bridge.example.com), without a path: links add /ui/… themselves; not {u:?}"
                ));
            }
        }
        check_ids(
            "approvals.approvers",
            &self.approvals.approvers,
            &mut problems,
        );
        for (_, section) in self.platforms.iter() {
            section.check(self, &mut problems);
        }
        for (i, pattern) in self.redact.patterns.iter().enumerate() {
            if let Err(e) = regex::Regex::new(pattern) {
                problems.push(format!(
                    "redact.patterns[{i}] is not a valid regular expression: {}",
                    e.to_string().replace('\n', " ")
                ));
            }
        }
        self.check_projects(&mut problems);
        if self.service.outbox_workers == 0 {
            problems.push("service.outbox_workers must be at least 1".into());
        }
        self.check_render_and_attachments(&mut problems);
        let platforms = match crate::platform::select(self) {
            Ok(ps) => {
                for p in &ps {
                    p.check(self, &mut problems);
                }
                self.check_bindings_served(&ps, &mut problems);
                ps
            }
            Err(e) => {
                problems.push(e);
                Vec::new()
            }
        };
        if problems.is_empty() {
            Ok(platforms)
        } else {
            Err(ConfigError::Refused(problems))
        }
    }

    /// With `[[projects]]`: every project's `daemon.cwd` is a directory, every channel bound is on a
    /// platform served (else it would never be answered), and without `default_project` every
    /// platform served has a channel bound (else nothing on it would be answered).
    fn check_bindings_served(
        &self,
        served: &[&'static dyn crate::platform::Platform],
        problems: &mut Vec<String>,
    ) {
        if self.projects.is_empty() {
            return;
        }
        let names: Vec<&str> = served.iter().map(|p| p.name()).collect();
        let mut bound = std::collections::BTreeSet::new();
        for (i, project) in self.projects.iter().enumerate() {
            if let Some(cwd) = &project.daemon.cwd
                && !cwd.is_dir()
            {
                problems.push(format!(
                    "projects[{i}].daemon.cwd {} is not a directory: the sessions of project {} work there",
                    cwd.display(),
                    project.name
                ));
            }
            for channel in &project.channels {
                let Ok(c) = super::projects::ChannelRef::parse(channel) else {
                    continue;
                };
                if !names.contains(&c.platform.as_str()) {
                    problems.push(format!(
                        "projects[{i}].channels binds {channel:?} but {} is not served (served: {}); add it to service.platforms{}",
                        c.platform,
                        names.join(", "),
                        if c.platform == "console" {
                            " or set console.enabled = true"
                        } else {
                            ""
                        }
                    ));
                }
                bound.insert(c.platform);
            }
        }
        if self.default_project.is_none() {
            for name in names.iter().filter(|n| !bound.contains(**n)) {
                problems.push(format!(
                    "{name} is served but no project binds a channel on it and default_project is not set: nothing on {name} would be answered"
                ));
            }
        }
    }
}

/// Bounds on `[render]` and `[attachments]`: what lies outside them is a mistake, never a setting.
const MIN_STREAM_EVERY: std::time::Duration = std::time::Duration::from_millis(100);
/// The smallest `render.upload_over`: below it the file would be no longer than its own preview.
const MIN_UPLOAD_OVER: usize = 2_000;
/// The largest image (it travels inline, base64, in one prompt frame).
const MAX_IMAGE_BYTES: u64 = 50 << 20;
/// The largest `max_images_total`, `max_file_bytes` and `max_embedded_bytes` (a file is held in
/// memory while it is downloaded and saved).
const MAX_FILES_BYTES: u64 = 100 << 20;

impl Config {
    /// `render.*` and `attachments.*` that cannot be meant: each problem names its key, the value
    /// and what is allowed.
    fn check_render_and_attachments(&self, problems: &mut Vec<String>) {
        let r = &self.render;
        if r.stream_every < MIN_STREAM_EVERY {
            problems.push(format!(
                "render.stream_every must be at least 100ms (drafts are edited at most ten times a second), not {}ms",
                r.stream_every.as_millis()
            ));
        }
        if r.upload_over < MIN_UPLOAD_OVER {
            problems.push(format!(
                "render.upload_over must be at least {MIN_UPLOAD_OVER} bytes (shorter answers are posted as messages; an uploaded one comes with a preview of {} characters), not {}",
                crate::core::render::PREVIEW_LEN,
                r.upload_over
            ));
        }
        let a = &self.attachments;
        let mb = |n: u64| crate::conversation::files::human_bytes(n);
        for (key, value, max) in [
            (
                "attachments.max_image_bytes",
                a.max_image_bytes,
                MAX_IMAGE_BYTES,
            ),
            (
                "attachments.max_images_total",
                a.max_images_total,
                MAX_FILES_BYTES,
            ),
            (
                "attachments.max_file_bytes",
                a.max_file_bytes,
                MAX_FILES_BYTES,
            ),
            (
                "attachments.max_embedded_bytes",
                a.max_embedded_bytes,
                MAX_FILES_BYTES,
            ),
        ] {
            if value > max {
                problems.push(format!(
                    "{key} must be at most {max} ({}), not {value}; set 0 to accept none",
                    mb(max)
                ));
            }
        }
    }
}
