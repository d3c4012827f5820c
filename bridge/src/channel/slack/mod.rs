//! Slack: the Web API over HTTPS (posting, editing, reactions, ephemeral replies), Block Kit rendering
//! within Slack's limits, and request-signature verification for the HTTP Events API mode.
//!
//! # Layout
//! - [`api`]: the Web API client; `ok:false` and 429 `Retry-After` become typed errors.
//! - [`blocks`]: platform-neutral messages → Block Kit, split to fit Slack's limits.
//! - [`events`]: Socket Mode envelopes → inbound messages, with the ignore and access rules.
//! - [`format`]: Slack's message format both ways — inbound text decoded, outbound text escaped.
//! - [`markdown`]: the agent's CommonMark → mrkdwn (answers that render).
//! - [`http_mode`]: the HTTP Events API mode — signed requests only, `url_verification`.
//! - [`socket`]: Socket Mode — acknowledge every envelope at once, reconnect on disconnect.
//! - [`signature`]: `v0` request signatures (HMAC-SHA256, constant-time, 5-minute window).
//! - [`config`]: the `[slack]` section; [`start`]: Slack as a platform (checks, start-up).

pub mod api;
pub mod blocks;
pub mod config;
pub mod events;
pub mod format;
pub mod http_mode;
pub mod markdown;
pub mod signature;
pub mod socket;
pub mod start;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::channel::{
    Attachment, BoxFuture, Capabilities, Channel, DeliveryError, Fetch, FetchError, Message, Target,
};
use crate::conversation::Mark;

/// The Slack channel: thread replies through the Web API, rendered as Block Kit.
#[derive(Debug, Clone)]
pub struct Slack {
    api: api::WebApi,
    files: Option<reqwest::Client>,
    connected: Arc<AtomicBool>,
    takes_requests: bool,
}

impl Slack {
    /// A channel posting through `api`; connected until a Socket Mode connection says otherwise.
    #[must_use]
    pub fn new(api: api::WebApi) -> Self {
        let files = crate::channel::fetch::client(&api.file_origins()).ok();
        Self {
            api,
            files,
            connected: Arc::new(AtomicBool::new(true)),
            takes_requests: false,
        }
    }

    /// In the HTTP Events API mode Slack sends its events and clicks to this process.
    #[must_use]
    pub fn taking_requests(mut self) -> Self {
        self.takes_requests = true;
        self
    }

    /// A thread reply, with its idempotency key in the message metadata when it has one.
    async fn send(
        &self,
        target: &Target,
        message: &Message,
        key: Option<&str>,
    ) -> Result<String, DeliveryError> {
        if let Some(file) = &message.file {
            return self
                .api
                .upload(
                    &target.channel,
                    &target.thread,
                    &file.name,
                    file.content.as_bytes(),
                    &blocks::render(message),
                    key,
                )
                .await
                .map_err(api::SlackError::into_delivery);
        }
        self.api
            .post_message(
                &target.channel,
                &target.thread,
                &blocks::render(message),
                key,
            )
            .await
            .map_err(api::SlackError::into_delivery)
    }

    /// The flag Socket Mode keeps: up between `hello` and the connection's end.
    #[must_use]
    pub fn connection_flag(&self) -> Arc<AtomicBool> {
        self.connected.clone()
    }
}

impl Fetch for Slack {
    fn fetch<'a>(
        &'a self,
        file: &'a Attachment,
        max: u64,
    ) -> BoxFuture<'a, Result<Vec<u8>, FetchError>> {
        Box::pin(async move {
            let http = self
                .files
                .as_ref()
                .ok_or_else(|| FetchError::Failed("no HTTP client".into()))?;
            self.api.download(http, file, max).await
        })
    }
}

impl Channel for Slack {
    fn platform(&self) -> &'static str {
        "slack"
    }

    fn connected(&self) -> bool {
        self.connected.load(Ordering::SeqCst)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            max_message_len: blocks::MESSAGE_LIMIT,
            // Sections of 3,000 characters, within a message's 50 blocks and ~40,000 characters,
            // with room for what mrkdwn escaping adds.
            answer_len: 12_000,
            output_cap: 30_000,
            can_edit: true,
            has_buttons: true,
            has_threads: true,
            has_reactions: true,
            takes_requests: self.takes_requests,
        }
    }

    fn fetcher(&self) -> Option<Arc<dyn Fetch>> {
        Some(Arc::new(self.clone()))
    }

    fn post<'a>(
        &'a self,
        target: &'a Target,
        message: &'a Message,
    ) -> BoxFuture<'a, Result<String, DeliveryError>> {
        Box::pin(self.send(target, message, None))
    }

    fn post_keyed<'a>(
        &'a self,
        target: &'a Target,
        message: &'a Message,
        key: &'a str,
    ) -> BoxFuture<'a, Result<String, DeliveryError>> {
        Box::pin(self.send(target, message, Some(key)))
    }

    fn find_posted<'a>(
        &'a self,
        target: &'a Target,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, DeliveryError>> {
        Box::pin(async move {
            self.api
                .find_reply(&target.channel, &target.thread, key)
                .await
                .map_err(api::SlackError::into_delivery)
        })
    }

    fn edit<'a>(
        &'a self,
        target: &'a Target,
        id: &'a str,
        message: &'a Message,
    ) -> BoxFuture<'a, Result<(), DeliveryError>> {
        Box::pin(async move {
            if id.starts_with("file:") {
                // A file share is not a message Slack lets us edit.
                return Ok(());
            }
            self.api
                .update(&target.channel, id, &blocks::render(message))
                .await
                .map_err(api::SlackError::into_delivery)
        })
    }

    fn display_name<'a>(
        &'a self,
        user: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, DeliveryError>> {
        Box::pin(async move {
            self.api
                .user_name(user)
                .await
                .map_err(api::SlackError::into_delivery)
        })
    }

    fn ephemeral<'a>(
        &'a self,
        target: &'a Target,
        user: &'a str,
        text: &'a str,
    ) -> BoxFuture<'a, Result<(), DeliveryError>> {
        Box::pin(async move {
            self.api
                .post_ephemeral(
                    &target.channel,
                    user,
                    Some(&target.thread),
                    &format::mrkdwn(text),
                )
                .await
                .map_err(api::SlackError::into_delivery)
        })
    }

    fn react<'a>(
        &'a self,
        target: &'a Target,
        message_id: &'a str,
        name: &'a str,
        add: bool,
    ) -> BoxFuture<'a, Result<(), DeliveryError>> {
        Box::pin(async move {
            let name = match name.parse::<Mark>() {
                Ok(mark) => reaction_name(mark),
                Err(_) => name,
            };
            self.api
                .reaction(&target.channel, message_id, name, add)
                .await
                .map_err(api::SlackError::into_delivery)
        })
    }
}

/// The Slack reaction name for each mark (a reaction that is no mark passes through).
#[must_use]
pub fn reaction_name(mark: Mark) -> &'static str {
    match mark {
        Mark::Received => "eyes",
        Mark::Done => "white_check_mark",
        Mark::Failed => "x",
        Mark::TimedOut => "stopwatch",
        Mark::Stopped => "black_square_for_stop",
        Mark::Refused => "no_entry_sign",
    }
}
