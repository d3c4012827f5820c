//! The Slack Web API over HTTPS: every call is a POST with the bot token (JSON; form-encoded for
//! reading methods); the answer's `ok:false` becomes [`SlackError::Api`] with Slack's error code, a 429 becomes [`SlackError::RateLimited`] with
//! the `Retry-After` it asked for, and network or 5xx failures [`SlackError::Transport`]. The outbox
//! turns these into retry decisions via [`SlackError::into_delivery`].

use std::fmt;
use std::time::Duration;

use serde_json::{Value, json};

use super::blocks::Payload;
use crate::channel::DeliveryError;

/// The metadata event type of the bridge's messages (their idempotency key is its payload).
pub const METADATA_EVENT: &str = "chat_bridge_message";

/// Slack's default API base.
pub const DEFAULT_BASE_URL: &str = "https://slack.com/api";

/// A Slack token: never printed by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct SlackToken(String);

impl SlackToken {
    /// Wraps a secret.
    #[must_use]
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into())
    }
}

impl fmt::Debug for SlackToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SlackToken(<redacted>)")
    }
}

/// What went wrong calling Slack.
#[derive(Debug, thiserror::Error)]
pub enum SlackError {
    /// Slack asked us to wait.
    #[error("Slack rate-limited {method} for {retry_after:?}")]
    RateLimited {
        /// The method.
        method: &'static str,
        /// How long Slack asked us to wait.
        retry_after: Duration,
    },
    /// Slack answered `ok: false`.
    #[error("Slack refused {method}: {error}")]
    Api {
        /// The method.
        method: &'static str,
        /// Slack's error code (`channel_not_found`, `invalid_auth`, …).
        error: String,
    },
    /// We refused to go on: trying again cannot help (an upload URL off Slack's file host).
    #[error("calling Slack {method} was refused: {reason}")]
    Refused {
        /// The method.
        method: &'static str,
        /// Why.
        reason: String,
    },
    /// The request did not get a usable answer.
    #[error("calling Slack {method} failed: {reason}")]
    Transport {
        /// The method.
        method: &'static str,
        /// Why (no token, no body content).
        reason: String,
    },
}

/// Slack error codes that will not go away by retrying.
const PERMANENT: &[&str] = &[
    "channel_not_found",
    "not_in_channel",
    "is_archived",
    "msg_too_long",
    "invalid_blocks",
    "invalid_blocks_format",
    "no_text",
    "message_not_found",
    "cant_update_message",
    "edit_window_closed",
    "not_authed",
    "invalid_auth",
    "account_inactive",
    "token_revoked",
    "missing_scope",
    "restricted_action",
    "user_not_in_channel",
];

impl SlackError {
    /// The outbox's view: wait, retry, or give up.
    #[must_use]
    pub fn into_delivery(self) -> DeliveryError {
        match self {
            Self::RateLimited { retry_after, .. } => DeliveryError::RateLimited(retry_after),
            Self::Api { ref error, .. } if PERMANENT.contains(&error.as_str()) => {
                DeliveryError::Permanent(self.to_string())
            }
            Self::Refused { .. } => DeliveryError::Permanent(self.to_string()),
            Self::Api { .. } | Self::Transport { .. } => DeliveryError::Temporary(self.to_string()),
        }
    }
}

/// What `auth.test` says about us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Our user id (to ignore our own messages and spot mentions).
    pub user_id: String,
    /// Our bot id.
    pub bot_id: Option<String>,
    /// The workspace.
    pub team_id: String,
}

/// A Web API client.
#[derive(Debug, Clone)]
pub struct WebApi {
    http: reqwest::Client,
    base: String,
    token: SlackToken,
}

impl WebApi {
    /// A client for `base` (Slack's, or a test's fake) with the bot token.
    ///
    /// # Errors
    /// When the HTTP client cannot be built (no TLS provider).
    pub fn new(base: &str, token: SlackToken) -> Result<Self, SlackError> {
        daemon_client::install_crypto_provider();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| SlackError::Transport {
                method: "client",
                reason: e.to_string(),
            })?;
        Ok(Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
            token,
        })
    }

    /// Calls `method` with `body` and `token`; returns the answer's JSON when `ok`.
    async fn call_with(
        &self,
        method: &'static str,
        token: &SlackToken,
        body: &Value,
    ) -> Result<Value, SlackError> {
        let request = self
            .http
            .post(format!("{}/{method}", self.base))
            .bearer_auth(&token.0)
            .json(body);
        Self::answer(method, request).await
    }

    /// Reading methods (`conversations.replies`) take form-encoded arguments, not JSON.
    async fn call_form(
        &self,
        method: &'static str,
        form: &[(&str, &str)],
    ) -> Result<Value, SlackError> {
        let body = serde_urlencoded::to_string(form).map_err(|e| SlackError::Transport {
            method,
            reason: e.to_string(),
        })?;
        let request = self
            .http
            .post(format!("{}/{method}", self.base))
            .bearer_auth(&self.token.0)
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body);
        Self::answer(method, request).await
    }

    async fn answer(
        method: &'static str,
        request: reqwest::RequestBuilder,
    ) -> Result<Value, SlackError> {
        let transport = |reason: String| SlackError::Transport { method, reason };
        let resp = request
            .send()
            .await
            .map_err(|e| transport(e.without_url().to_string()))?;
        let status = resp.status();
        if status.as_u16() == 429 {
            let retry_after = resp
                .headers()
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(1);
            return Err(SlackError::RateLimited {
                method,
                retry_after: Duration::from_secs(retry_after.max(1)),
            });
        }
        if !status.is_success() {
            return Err(transport(format!("HTTP {status}")));
        }
        let v: Value = resp
            .json()
            .await
            .map_err(|e| transport(format!("unreadable answer: {}", e.without_url())))?;
        if v.get("ok").and_then(Value::as_bool) == Some(true) {
            Ok(v)
        } else {
            let error = v
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("unknown_error")
                .to_owned();
            Err(SlackError::Api { method, error })
        }
    }

    async fn call(&self, method: &'static str, body: &Value) -> Result<Value, SlackError> {
        self.call_with(method, &self.token, body).await
    }

    /// The origins Slack serves files from: `files.slack.com`, and the API's own origin (a proxy or
    /// a test double).
    #[must_use]
    pub fn file_origins(&self) -> crate::channel::fetch::Origins {
        crate::channel::fetch::Origins::new(&["files.slack.com"], &self.base)
    }

    /// The bytes of a file a person attached: its `url_private_download` (or, when the event
    /// carried none, the one `files.info` gives), with the bot token, from Slack's file host only.
    ///
    /// # Errors
    /// [`crate::channel::FetchError`]: not Slack's host, too large, or the download failed.
    pub async fn download(
        &self,
        http: &reqwest::Client,
        file: &crate::channel::Attachment,
        max: u64,
    ) -> Result<Vec<u8>, crate::channel::FetchError> {
        let url = match &file.url {
            Some(u) => u.clone(),
            None => {
                let v = self
                    .call_form("files.info", &[("file", &file.id)])
                    .await
                    .map_err(|e| crate::channel::FetchError::Failed(e.to_string()))?;
                let f = &v["file"];
                f["url_private_download"]
                    .as_str()
                    .or_else(|| f["url_private"].as_str())
                    .ok_or_else(|| {
                        crate::channel::FetchError::Failed("Slack gave no address for it".into())
                    })?
                    .to_owned()
            }
        };
        crate::channel::fetch::get(http, &self.file_origins(), &url, Some(&self.token.0), max).await
    }

    /// `auth.test`.
    ///
    /// # Errors
    /// [`SlackError`].
    pub async fn auth_test(&self) -> Result<Identity, SlackError> {
        let v = self.call("auth.test", &json!({})).await?;
        let get = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        Ok(Identity {
            user_id: get("user_id").unwrap_or_default(),
            bot_id: get("bot_id"),
            team_id: get("team_id").unwrap_or_default(),
        })
    }

    /// `chat.postMessage` as a thread reply; returns the message's `ts`.
    ///
    /// # Errors
    /// [`SlackError`].
    pub async fn post_message(
        &self,
        channel: &str,
        thread_ts: &str,
        payload: &Payload,
        key: Option<&str>,
    ) -> Result<String, SlackError> {
        let mut body = payload.to_json();
        body["channel"] = json!(channel);
        body["thread_ts"] = json!(thread_ts);
        body["unfurl_links"] = json!(false);
        if let Some(key) = key {
            // Message metadata: how a repeated attempt finds this message again.
            body["metadata"] = json!({"event_type": METADATA_EVENT, "event_payload": {"key": key}});
        }
        let v = self.call("chat.postMessage", &body).await?;
        v.get("ts")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or(SlackError::Transport {
                method: "chat.postMessage",
                reason: "no ts in the answer".into(),
            })
    }

    /// Uploads `content` as file `name` into thread `thread_ts` with `payload`'s blocks as its
    /// message, by Slack's external upload: `files.getUploadURLExternal`, the bytes to the upload URL
    /// (Slack's own file host only), `files.completeUploadExternal`. Returns the message's `ts` when
    /// Slack says it, else `file:<id>` (a file share cannot be edited).
    ///
    /// With a `key`, the share's first block carries it as its `block_id` (a file share takes no
    /// message metadata): [`WebApi::find_reply`] finds the share by it, so an upload whose outcome a
    /// crash hid is not shared a second time.
    ///
    /// # Errors
    /// [`SlackError`].
    pub async fn upload(
        &self,
        channel: &str,
        thread_ts: &str,
        name: &str,
        content: &[u8],
        payload: &Payload,
        key: Option<&str>,
    ) -> Result<String, SlackError> {
        let length = content.len().to_string();
        let v = self
            .call_form(
                "files.getUploadURLExternal",
                &[("filename", name), ("length", &length)],
            )
            .await?;
        let transport = |reason: &str| SlackError::Transport {
            method: "files.getUploadURLExternal",
            reason: reason.to_owned(),
        };
        let (Some(url), Some(id)) = (v["upload_url"].as_str(), v["file_id"].as_str()) else {
            return Err(transport("no upload_url or file_id in the answer"));
        };
        if !self.file_origins().allow(url) {
            // Our own refusal (SSRF): the same answer would be refused again.
            return Err(SlackError::Refused {
                method: "files.getUploadURLExternal",
                reason: "the upload URL is not on Slack's file host".into(),
            });
        }
        let resp = self
            .http
            .post(url)
            .header(http::header::CONTENT_TYPE, "application/octet-stream")
            .body(content.to_vec())
            .send()
            .await
            .map_err(|e| transport(&e.without_url().to_string()))?;
        let status = resp.status();
        if status.is_client_error()
            && status != http::StatusCode::REQUEST_TIMEOUT
            && status != http::StatusCode::TOO_MANY_REQUESTS
        {
            // The file host will not take these bytes (too large, refused): the same upload
            // would be refused again, so the message goes without its file at once.
            return Err(SlackError::Refused {
                method: "files.getUploadURLExternal",
                reason: format!("Slack's file host answered the upload with HTTP {status}"),
            });
        }
        if !status.is_success() {
            return Err(transport(&format!("upload answered HTTP {status}")));
        }
        let files = json!([{"id": id, "title": name}]).to_string();
        let mut blocks = payload.blocks.clone();
        if let (Some(key), Some(first)) = (key, blocks.first_mut())
            && let Some(first) = first.as_object_mut()
        {
            first.insert("block_id".into(), json!(key));
        }
        let blocks = Value::Array(blocks).to_string();
        let v = self
            .call_form(
                "files.completeUploadExternal",
                &[
                    ("files", &files),
                    ("channel_id", channel),
                    ("thread_ts", thread_ts),
                    ("blocks", &blocks),
                ],
            )
            .await?;
        // The share's ts, when Slack already knows it (it may share asynchronously).
        let shared = v["files"][0]["shares"]
            .as_object()
            .into_iter()
            .flat_map(|s| s.values())
            .filter_map(|by_channel| by_channel[channel][0]["ts"].as_str())
            .next()
            .map(str::to_owned);
        Ok(shared.unwrap_or_else(|| format!("file:{id}")))
    }

    /// The `ts` of the reply in thread `thread_ts` that was posted with idempotency `key`
    /// (`conversations.replies` with its metadata, or — a file share — a block whose `block_id` is
    /// the key; the newest 200 replies are searched).
    ///
    /// # Errors
    /// [`SlackError`].
    pub async fn find_reply(
        &self,
        channel: &str,
        thread_ts: &str,
        key: &str,
    ) -> Result<Option<String>, SlackError> {
        let v = self
            .call_form(
                "conversations.replies",
                &[
                    ("channel", channel),
                    ("ts", thread_ts),
                    ("include_all_metadata", "true"),
                    ("limit", "200"),
                ],
            )
            .await?;
        Ok(v["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| {
                (m["metadata"]["event_type"] == METADATA_EVENT
                    && m["metadata"]["event_payload"]["key"] == key)
                    || m["blocks"]
                        .as_array()
                        .is_some_and(|b| b.iter().any(|b| b["block_id"] == key))
            })
            .and_then(|m| m["ts"].as_str().map(str::to_owned)))
    }

    /// `users.info`: the name `user` shows — the profile's display name, else the real name, else
    /// the account name; `None` when the answer has none.
    ///
    /// # Errors
    /// [`SlackError`].
    pub async fn user_name(&self, user: &str) -> Result<Option<String>, SlackError> {
        let v = self.call_form("users.info", &[("user", user)]).await?;
        let u = &v["user"];
        Ok([
            &u["profile"]["display_name"],
            &u["profile"]["real_name"],
            &u["real_name"],
            &u["name"],
        ]
        .into_iter()
        .filter_map(Value::as_str)
        .map(str::trim)
        .find(|n| !n.is_empty())
        .map(str::to_owned))
    }

    /// `chat.update` of message `ts`.
    ///
    /// # Errors
    /// [`SlackError`].
    pub async fn update(
        &self,
        channel: &str,
        ts: &str,
        payload: &Payload,
    ) -> Result<(), SlackError> {
        let mut body = payload.to_json();
        body["channel"] = json!(channel);
        body["ts"] = json!(ts);
        self.call("chat.update", &body).await.map(drop)
    }

    /// `chat.postEphemeral`: a reply only `user` sees.
    ///
    /// # Errors
    /// [`SlackError`].
    pub async fn post_ephemeral(
        &self,
        channel: &str,
        user: &str,
        thread_ts: Option<&str>,
        text: &str,
    ) -> Result<(), SlackError> {
        let mut body = json!({"channel": channel, "user": user, "text": text});
        if let Some(t) = thread_ts {
            body["thread_ts"] = json!(t);
        }
        self.call("chat.postEphemeral", &body).await.map(drop)
    }

    /// `reactions.add`; adding one that is already there is not an error.
    ///
    /// # Errors
    /// [`SlackError`].
    pub async fn reactions_add(
        &self,
        channel: &str,
        ts: &str,
        name: &str,
    ) -> Result<(), SlackError> {
        self.reaction(channel, ts, name, true).await
    }

    /// `reactions.remove`; removing one that is not there is not an error.
    ///
    /// # Errors
    /// [`SlackError`].
    pub async fn reactions_remove(
        &self,
        channel: &str,
        ts: &str,
        name: &str,
    ) -> Result<(), SlackError> {
        self.reaction(channel, ts, name, false).await
    }

    /// Adds or removes a reaction; the state already being as asked is not an error.
    ///
    /// # Errors
    /// [`SlackError`].
    pub async fn reaction(
        &self,
        channel: &str,
        ts: &str,
        name: &str,
        add: bool,
    ) -> Result<(), SlackError> {
        let (method, harmless) = if add {
            ("reactions.add", "already_reacted")
        } else {
            ("reactions.remove", "no_reaction")
        };
        match self
            .call(
                method,
                &json!({"channel": channel, "timestamp": ts, "name": name}),
            )
            .await
        {
            Err(SlackError::Api { error, .. }) if error == harmless => Ok(()),
            other => other.map(drop),
        }
    }

    /// `apps.connections.open` with the app-level token: the Socket Mode WebSocket URL.
    ///
    /// # Errors
    /// [`SlackError`].
    pub async fn connections_open(&self, app_token: &SlackToken) -> Result<String, SlackError> {
        let v = self
            .call_with("apps.connections.open", app_token, &json!({}))
            .await?;
        v.get("url")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or(SlackError::Transport {
                method: "apps.connections.open",
                reason: "no url in the answer".into(),
            })
    }
}
