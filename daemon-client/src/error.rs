//! Errors at the daemon-client boundary, named for what the caller does next.

use std::time::Duration;

/// What went wrong talking to the daemon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Fatal until the configuration changes: the daemon refused the bearer token.
    /// Once the daemon was reached, the client keeps retrying instead (L7).
    #[error(
        "the daemon at {url} refused our credentials (HTTP {status}); check {}",
        token_keys(key)
    )]
    Unauthorized {
        /// The URL, credentials masked (never carries the token).
        url: String,
        /// 401 or 403.
        status: u16,
        /// The configuration key of the daemon (`daemon`, `projects[name].daemon`).
        key: String,
    },
    /// Retry later: after a reconnect the daemon serves another workspace than the sessions open
    /// in; the connection is not used (L7).
    #[error("the daemon now serves the workspace {} but {key}.cwd is {}: held messages wait until it serves {} again (or set {key}.cwd and restart)", workspace.display(), expected.display(), expected.display())]
    WorkspaceChanged {
        /// The configuration key of the daemon (`daemon`, `projects[name].daemon`).
        key: String,
        /// What the daemon reported at `initialize`.
        workspace: std::path::PathBuf,
        /// The sessions' directory (`cwd`, else what the daemon served when first reached).
        expected: std::path::PathBuf,
    },
    /// Fatal until the configuration changes: the URL cannot be used.
    #[error("the daemon URL {url:?} is not usable: {reason}")]
    BadUrl {
        /// The URL as configured, credentials masked.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Retry later: the daemon could not be reached.
    #[error("cannot reach the daemon at {url}: {reason}")]
    Unreachable {
        /// The URL, credentials masked.
        url: String,
        /// The transport's words.
        reason: String,
    },
    /// Retry: the connection dropped while the call was in flight. The client is reconnecting.
    #[error("the connection to the daemon was lost")]
    ConnectionLost,
    /// Retry or give up: the daemon did not answer in time.
    #[error("the daemon did not answer {method} within {timeout:?}")]
    Timeout {
        /// The JSON-RPC method.
        method: &'static str,
        /// The limit that passed.
        timeout: Duration,
    },
    /// The daemon answered with a JSON-RPC error; usually bad input (unknown session, bad params).
    #[error("the daemon answered {method} with error {code}: {message}")]
    Rpc {
        /// The JSON-RPC method.
        method: &'static str,
        /// The JSON-RPC error code.
        code: i64,
        /// The daemon's message.
        message: String,
    },
    /// The daemon's answer did not have the documented shape.
    #[error("the daemon's answer to {method} was not understood: {reason}")]
    BadResponse {
        /// The JSON-RPC method.
        method: &'static str,
        /// What was wrong (no frame content).
        reason: String,
    },
    /// After a reconnect the daemon no longer knew the session of an open turn.
    #[error("the daemon lost session {session} while the connection was down: {message}")]
    SessionLost {
        /// The session.
        session: String,
        /// The daemon's message.
        message: String,
    },
    /// Retry later: the agent's command could not be started (not installed, not executable).
    #[error("cannot start the agent {command}: {reason}")]
    Spawn {
        /// `stdio:<program>`.
        command: String,
        /// The operating system's words.
        reason: String,
    },
    /// The agent process exited while the call was in flight and took its turn with it; the client
    /// is starting it again.
    #[error("{reason}; it was restarted")]
    AgentExited {
        /// How it ended (exit status or signal).
        reason: String,
    },
    /// The client was closed (shutdown, or a fatal connection error).
    #[error("the daemon client is closed")]
    Closed,
}

/// The keys holding the token of the daemon at `key`: a project's comes only from `token_file`.
fn token_keys(key: &str) -> String {
    if key.starts_with("projects[") {
        format!("{key}.token_file")
    } else {
        format!("{key}.token (CHAT_BRIDGE_DAEMON__TOKEN) or {key}.token_file")
    }
}

impl Error {
    /// Whether trying again later can succeed without a configuration change.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Unreachable { .. }
                | Self::ConnectionLost
                | Self::Timeout { .. }
                | Self::Spawn { .. }
                | Self::AgentExited { .. }
                | Self::WorkspaceChanged { .. }
        )
    }
}
