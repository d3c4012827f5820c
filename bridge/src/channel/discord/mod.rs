//! Discord: serenity's gateway client in, its REST client out. A mention in an allowed channel
//! creates a public thread from that message where the conversation lives; tool messages are edited
//! in place into coloured result embeds; approvals are buttons whose `custom_id` carries the request
//! id, acknowledged at once (a deferred update) and answered by editing the message.
//!
//! # Layout
//! - [`events`]: dispatches → inbound messages, with the ignore and access rules (pure).
//! - [`render`]: platform-neutral messages → content, embeds and components within Discord's limits.
//! - [`config`]: the `[discord]` section; [`start`]: Discord as a platform (checks, start-up).
//! - [`gateway`]: the gateway connection (our own loop: heartbeats, RESUME, bounded waits) and
//!   what `connected` means.
//! - this module: the [`Discord`] channel (REST, serenity's client) and the event handler that
//!   creates threads and acknowledges clicks.
//!
//! # Rate limits
//! Against `https://discord.com` serenity's own limiter paces every REST call (it waits out 429s
//! itself). serenity does not route its limiter through `HttpBuilder::proxy`, so with another
//! `discord.api_base_url` (a rate-limiting proxy, or the tests' fake) the limiter is off and a 429
//! reaches the outbox as [`DeliveryError::RateLimited`], which waits and delivers once.

pub mod config;
pub mod events;
pub mod gateway;
pub mod render;
pub mod start;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::json;
use serenity::all::{ChannelId, GatewayIntents, Http, HttpBuilder, Interaction, MessageId};
use serenity::model::channel::{Message as DiscordMessage, ReactionType};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::channel::{
    Arrival, BoxFuture, Capabilities, Channel, DeliveryError, Inbound, Message, Target, Tone,
};
use events::{Access, Decision};

/// Discord's REST base.
pub const DEFAULT_BASE_URL: &str = "https://discord.com";

/// The intents the bridge needs (MESSAGE_CONTENT is privileged: switch it on in the developer
/// portal).
#[must_use]
pub fn intents() -> GatewayIntents {
    GatewayIntents::GUILDS
        | GatewayIntents::GUILD_MESSAGES
        | GatewayIntents::MESSAGE_CONTENT
        | GatewayIntents::DIRECT_MESSAGES
}

/// Discord's "a thread has already been created for this message".
const THREAD_ALREADY_CREATED: isize = 160_004;
/// Discord's "cannot execute action on this channel type" (the message is already in a thread).
const WRONG_CHANNEL_TYPE: isize = 50_024;
/// Interaction tokens are good for 15 minutes; we stop using them a little earlier.
const CLICK_TOKEN_TTL: Duration = Duration::from_secs(14 * 60);
/// A typing indicator lasts 10 seconds; it is renewed a little sooner.
const TYPING_EVERY: Duration = Duration::from_secs(8);
/// The longest a typing indicator is kept up without news.
const TYPING_MAX: Duration = Duration::from_secs(30 * 60);

/// The REST client: serenity's, with its limiter against Discord itself; through `base_url` as a
/// proxy (limiter off, see the module docs) otherwise.
#[must_use]
pub fn http(token: &str, base_url: &str) -> Http {
    let base = base_url.trim_end_matches('/');
    let builder = HttpBuilder::new(token);
    if base == DEFAULT_BASE_URL {
        builder.build()
    } else {
        builder.proxy(base).ratelimiter_disabled(true).build()
    }
}

/// State the gateway handler and the channel share.
#[derive(Debug, Default)]
struct State {
    /// Thread id → the channel it was created in (reactions on the mention go there).
    parents: Mutex<HashMap<String, String>>,
    /// (channel, user) → the token of their latest click, for an ephemeral follow-up.
    clicks: Mutex<HashMap<(String, String), (String, Instant)>>,
    /// Channel → the task keeping its typing indicator up.
    typing: Mutex<HashMap<String, CancellationToken>>,
    /// The gateway session is up (READY or RESUMED seen, not disconnected since).
    connected: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The Discord channel: messages in threads through the REST API, rendered as content and embeds.
#[derive(Clone)]
pub struct Discord {
    http: Arc<Http>,
    state: Arc<State>,
    /// Downloads attachments from Discord's CDN (and the API's own origin when it is a proxy).
    files: Option<(reqwest::Client, crate::channel::fetch::Origins)>,
}

impl std::fmt::Debug for Discord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("Discord").finish_non_exhaustive()
    }
}

fn id<T: From<u64>>(raw: &str, what: &str) -> Result<T, DeliveryError> {
    raw.parse::<u64>()
        .ok()
        .filter(|n| *n != 0)
        .map(T::from)
        .ok_or_else(|| DeliveryError::Permanent(format!("{what} {raw:?} is not a Discord id")))
}

/// The Discord error code of a failed request, if it was one.
fn discord_code(e: &serenity::Error) -> Option<isize> {
    match e {
        serenity::Error::Http(serenity::http::HttpError::UnsuccessfulRequest(r)) => {
            Some(r.error.code)
        }
        _ => None,
    }
}

/// A serenity error → what the outbox does with it.
fn delivery_error(e: serenity::Error) -> DeliveryError {
    use serenity::http::HttpError;
    match e {
        serenity::Error::Http(HttpError::UnsuccessfulRequest(r)) => {
            let status = r.status_code.as_u16();
            let what = format!(
                "Discord answered {status} (code {}): {}",
                r.error.code, r.error.message
            );
            match status {
                // serenity keeps the body, not the Retry-After header; one second and try again.
                429 => DeliveryError::RateLimited(Duration::from_secs(1)),
                500..=599 | 408 => DeliveryError::Temporary(what),
                _ => DeliveryError::Permanent(what),
            }
        }
        serenity::Error::Http(HttpError::Request(e)) => {
            DeliveryError::Temporary(format!("Discord request failed: {e}"))
        }
        other => DeliveryError::Temporary(format!("Discord: {other}")),
    }
}

impl Discord {
    /// A channel posting through `http` (the gateway client's, so both share one limiter).
    #[must_use]
    fn with_state(http: Arc<Http>, state: Arc<State>) -> Self {
        let base = http
            .proxy
            .clone()
            .unwrap_or_else(|| DEFAULT_BASE_URL.into());
        let origins = crate::channel::fetch::Origins::new(
            &["cdn.discordapp.com", "media.discordapp.net"],
            &base,
        );
        let files = crate::channel::fetch::client(&origins)
            .ok()
            .map(|c| (c, origins));
        Self { http, state, files }
    }

    /// Where a person's message lives: the mention that started a thread is in its parent channel
    /// (the thread's id is that message's id).
    async fn channel_of(&self, target: &Target, message_id: &str) -> Result<String, DeliveryError> {
        if message_id != target.channel {
            return Ok(target.channel.clone());
        }
        if let Some(p) = lock(&self.state.parents).get(message_id) {
            return Ok(p.clone());
        }
        let channel = self
            .http
            .get_channel(id(&target.channel, "channel")?)
            .await
            .map_err(delivery_error)?;
        let parent = channel
            .guild()
            .and_then(|g| g.parent_id)
            .map_or_else(|| target.channel.clone(), |p| p.to_string());
        lock(&self.state.parents).insert(message_id.to_owned(), parent.clone());
        Ok(parent)
    }

    /// Creates a message. With a `key` it is the nonce Discord enforces: a repeated attempt (after a
    /// crash) gets the message already created instead of a second one.
    async fn send(
        &self,
        target: &Target,
        message: &Message,
        key: Option<&str>,
    ) -> Result<String, DeliveryError> {
        let channel: ChannelId = id(&target.channel, "channel")?;
        let mut body = render::render(message).to_json();
        if let Some(key) = key {
            body["nonce"] = json!(key);
            body["enforce_nonce"] = json!(true);
        }
        // A long answer goes whole as a file beside its preview.
        let files = message
            .file
            .iter()
            .map(|f| {
                serenity::all::CreateAttachment::bytes(
                    f.content.as_bytes().to_vec(),
                    f.name.clone(),
                )
            })
            .collect();
        let posted = self
            .http
            .send_message(channel, files, &body)
            .await
            .map_err(delivery_error)?;
        self.typing(&target.channel, false);
        Ok(posted.id.to_string())
    }

    /// Keeps a typing indicator up in `channel` while a tool runs (until the next non-running
    /// message there, or [`TYPING_MAX`]).
    fn typing(&self, channel: &str, running: bool) {
        let mut typing = lock(&self.state.typing);
        if !running {
            if let Some(t) = typing.remove(channel) {
                t.cancel();
            }
            return;
        }
        if typing.contains_key(channel) {
            return;
        }
        let Ok(channel_id) = id::<ChannelId>(channel, "channel") else {
            return;
        };
        let stop = CancellationToken::new();
        typing.insert(channel.to_owned(), stop.clone());
        let http = self.http.clone();
        let state = self.state.clone();
        let key = channel.to_owned();
        tokio::spawn(async move {
            let started = Instant::now();
            while started.elapsed() < TYPING_MAX {
                if let Err(e) = http.broadcast_typing(channel_id).await {
                    tracing::debug!(error = %e, "typing indicator refused");
                }
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(TYPING_EVERY) => {}
                }
            }
            lock(&state.typing).remove(&key);
        });
    }
}

impl crate::channel::Fetch for Discord {
    fn fetch<'a>(
        &'a self,
        file: &'a crate::channel::Attachment,
        max: u64,
    ) -> BoxFuture<'a, Result<Vec<u8>, crate::channel::FetchError>> {
        Box::pin(async move {
            use crate::channel::FetchError;
            let (http, origins) = self
                .files
                .as_ref()
                .ok_or_else(|| FetchError::Failed("no HTTP client".into()))?;
            let url = file
                .url
                .as_deref()
                .ok_or_else(|| FetchError::Failed("Discord gave no address for it".into()))?;
            // Attachment URLs are signed; no token goes with them.
            crate::channel::fetch::get(http, origins, url, None, max).await
        })
    }
}

impl Channel for Discord {
    fn platform(&self) -> &'static str {
        "discord"
    }

    fn connected(&self) -> bool {
        self.state.connected.load(Ordering::SeqCst)
    }

    fn fetcher(&self) -> Option<Arc<dyn crate::channel::Fetch>> {
        Some(Arc::new(self.clone()))
    }

    fn parent_channel(&self, _platform: &str, channel: &str) -> Option<String> {
        lock(&self.state.parents).get(channel).cloned()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            max_message_len: render::CONTENT_LIMIT,
            // What one message's embeds carry (6,000 characters in all, 4,096 per embed).
            answer_len: 5_500,
            // What fits beside a title and a footer in one message's 6,000 embed characters.
            output_cap: 5_000,
            can_edit: true,
            has_buttons: true,
            has_threads: true,
            has_reactions: true,
            takes_requests: false,
        }
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

    fn edit<'a>(
        &'a self,
        target: &'a Target,
        message_id: &'a str,
        message: &'a Message,
    ) -> BoxFuture<'a, Result<(), DeliveryError>> {
        Box::pin(async move {
            let channel: ChannelId = id(&target.channel, "channel")?;
            let mid: MessageId = id(message_id, "message")?;
            self.http
                .edit_message(channel, mid, &render::render(message).to_json(), Vec::new())
                .await
                .map_err(delivery_error)?;
            // An edit of a running tool's message is its progress line: the tool runs past
            // `progress_after`, so show that we are at it.
            self.typing(&target.channel, message.tone == Tone::Running);
            Ok(())
        })
    }

    fn display_name<'a>(
        &'a self,
        user: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, DeliveryError>> {
        Box::pin(async move {
            let uid: serenity::all::UserId = id(user, "user")?;
            let u = self.http.get_user(uid).await.map_err(delivery_error)?;
            // The global display name, else the account name.
            Ok(u.global_name
                .filter(|n| !n.trim().is_empty())
                .or(Some(u.name))
                .filter(|n| !n.trim().is_empty()))
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
            let channel: ChannelId = id(&self.channel_of(target, message_id).await?, "channel")?;
            let mid: MessageId = id(message_id, "message")?;
            let emoji = ReactionType::Unicode(events::emoji(name).to_owned());
            let result = if add {
                self.http.create_reaction(channel, mid, &emoji).await
            } else {
                self.http.delete_reaction_me(channel, mid, &emoji).await
            };
            result.map_err(delivery_error)
        })
    }

    fn ephemeral<'a>(
        &'a self,
        target: &'a Target,
        user: &'a str,
        text: &'a str,
    ) -> BoxFuture<'a, Result<(), DeliveryError>> {
        Box::pin(async move {
            let token = {
                let clicks = lock(&self.state.clicks);
                clicks
                    .get(&(target.channel.clone(), user.to_owned()))
                    .filter(|(_, at)| at.elapsed() < CLICK_TOKEN_TTL)
                    .map(|(t, _)| t.clone())
            };
            match token {
                // Only the clicker sees it: a follow-up to their click, flagged ephemeral.
                Some(token) => self
                    .http
                    .create_followup_message(
                        &token,
                        &json!({"content": text, "flags": 64, "allowed_mentions": {"parse": []}}),
                        Vec::new(),
                    )
                    .await
                    .map(drop)
                    .map_err(delivery_error),
                // No click to answer (it expired): say it in the thread, to them.
                None => {
                    let channel: ChannelId = id(&target.channel, "channel")?;
                    self.http
                        .send_message(
                            channel,
                            Vec::new(),
                            &json!({"content": format!("<@{user}> {text}"), "allowed_mentions": {"users": [user]}}),
                        )
                        .await
                        .map(drop)
                        .map_err(delivery_error)
                }
            }
        })
    }
}

/// The gateway event handler: turns dispatches into inbound messages for the core, one at a time
/// in the order they arrived (the gateway loop never waits for it).
struct Handler {
    http: Arc<Http>,
    state: Arc<State>,
    access: Access,
    /// Thread names come from prompts: redacted before they are cut (S2).
    redactor: crate::core::redact::Redactor,
    tx: mpsc::Sender<Arrival>,
    me: Option<serenity::all::UserId>,
}

impl Handler {
    async fn forward(&self, inbound: Inbound) {
        if self.tx.send(inbound.into()).await.is_err() {
            tracing::warn!("Discord event arrived while the bridge is stopping; dropped");
        }
    }

    /// Handles the dispatches until the gateway loop ends.
    async fn run(mut self, mut events: mpsc::UnboundedReceiver<gateway::Event>) {
        while let Some(event) = events.recv().await {
            match event {
                gateway::Event::Ready { user, application } => {
                    self.me = Some(user);
                    if let Some(app) = application {
                        self.http.set_application_id(app);
                    }
                }
                gateway::Event::Message(msg) => self.message(&msg).await,
                gateway::Event::Interaction(i) => self.interaction(*i).await,
            }
        }
    }

    /// Creates the thread a mention opens; `None` when it could not be (the person is told).
    async fn open_thread(
        &self,
        msg: &DiscordMessage,
        parent: &str,
        name: &str,
        mut inbound: Inbound,
    ) -> Option<Inbound> {
        let body = json!({"name": name, "auto_archive_duration": 1440});
        match self
            .http
            .create_thread_from_message(msg.channel_id, msg.id, &body, None)
            .await
        {
            Ok(thread) => {
                tracing::info!(thread = %thread.id, "Discord thread created for a mention");
            }
            // A mention replayed after RESUME: the thread is there; the core deduplicates the event.
            Err(e) if discord_code(&e) == Some(THREAD_ALREADY_CREATED) => {}
            // The mention is inside a thread already: the conversation lives in that thread.
            Err(e) if discord_code(&e) == Some(WRONG_CHANNEL_TYPE) => {
                inbound.target.channel = parent.to_owned();
                inbound.target.thread = parent.to_owned();
                return Some(inbound);
            }
            Err(e) => {
                tracing::warn!(error = %e, channel = %parent, "could not create a Discord thread for a mention");
                let text = format!(
                    "I could not start a thread for this ({}). I need the Create Public Threads and Send Messages in Threads permissions here.",
                    delivery_error(e)
                );
                let reply = json!({
                    "content": text,
                    "message_reference": {"message_id": msg.id.to_string(), "fail_if_not_exists": false},
                    "allowed_mentions": {"parse": []},
                });
                if let Err(e) = self
                    .http
                    .send_message(msg.channel_id, Vec::new(), &reply)
                    .await
                {
                    tracing::warn!(error = %e, "could not tell the person either");
                }
                return None;
            }
        }
        lock(&self.state.parents).insert(inbound.target.thread.clone(), parent.to_owned());
        Some(inbound)
    }

    async fn message(&self, msg: &DiscordMessage) {
        let Some(me) = self.me else {
            return;
        };
        match events::decide_message(msg, me, &self.access) {
            Decision::Open {
                parent,
                mut inbound,
                ..
            } if lock(&self.state.parents).contains_key(&parent) => {
                // A mention inside a thread the bridge knows: a message of that thread (no thread
                // is made of it; with `access.require_mention_in_threads` this is how a thread
                // speaks to the bot).
                inbound.target.channel.clone_from(&parent);
                inbound.target.thread = parent;
                self.forward(inbound).await;
            }
            Decision::Open {
                parent,
                name,
                inbound,
            } => {
                // Redacted whole, then cut to Discord's 100 characters: never half a secret.
                let name = match inbound.kind.text() {
                    Some(text) => events::thread_name(&self.redactor.redact(text)),
                    None => name,
                };
                if let Some(inbound) = self.open_thread(msg, &parent, &name, inbound).await {
                    self.forward(inbound).await;
                }
            }
            Decision::Inbound(inbound) => self.forward(inbound).await,
            Decision::Ignore(why) => tracing::debug!(why, "Discord message ignored"),
            Decision::Refused(why) => {
                crate::metrics::access_refused("discord");
                tracing::debug!(why, "Discord message refused");
            }
        }
    }

    async fn interaction(&self, interaction: Interaction) {
        let Interaction::Component(click) = interaction else {
            tracing::debug!("Discord interaction other than a button ignored");
            return;
        };
        // Acknowledge within Discord's 3 seconds: a deferred update; the outbox edits the message.
        if let Err(e) = self
            .http
            .create_interaction_response(click.id, &click.token, &json!({"type": 6}), Vec::new())
            .await
        {
            tracing::warn!(error = %e, "could not acknowledge a Discord button click");
        }
        match events::decide_click(&click) {
            Decision::Inbound(inbound) => {
                lock(&self.state.clicks).insert(
                    (inbound.target.channel.clone(), inbound.user.clone()),
                    (click.token.clone(), Instant::now()),
                );
                self.forward(inbound).await;
            }
            Decision::Open { .. } => {}
            Decision::Ignore(why) | Decision::Refused(why) => {
                tracing::debug!(why, "Discord click ignored");
            }
        }
    }
}

/// The gateway connection (see [`gateway`]) and the channel that posts through the same REST
/// client.
pub struct Gateway {
    connection: gateway::Connection,
    handler: Handler,
    events: mpsc::UnboundedReceiver<gateway::Event>,
    /// The channel for the outbox.
    pub channel: Discord,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").finish_non_exhaustive()
    }
}

impl Gateway {
    /// Asks REST for the gateway URL (`GET /gateway/bot`) and prepares the connection; inbound
    /// messages go to `tx`.
    ///
    /// # Errors
    /// The gateway URL could not be had (a refused token, Discord unreachable).
    pub async fn build(
        http: Http,
        access: Access,
        redactor: crate::core::redact::Redactor,
        tx: mpsc::Sender<Arrival>,
    ) -> serenity::Result<Self> {
        Self::build_with(http, access, redactor, tx, gateway::Timing::default()).await
    }

    /// [`Gateway::build`] with other deadlines and backoff (tests).
    ///
    /// # Errors
    /// As [`Gateway::build`].
    pub async fn build_with(
        http: Http,
        access: Access,
        redactor: crate::core::redact::Redactor,
        tx: mpsc::Sender<Arrival>,
        timing: gateway::Timing,
    ) -> serenity::Result<Self> {
        let http = Arc::new(http);
        let url = http.get_bot_gateway().await?.url;
        let state = Arc::new(State::default());
        let (events_tx, events) = mpsc::unbounded_channel();
        let handler = Handler {
            http: http.clone(),
            state: state.clone(),
            access,
            redactor,
            tx,
            me: None,
        };
        let connection =
            gateway::Connection::new(http.clone(), state.clone(), url, timing, events_tx);
        let channel = Discord::with_state(http, state);
        Ok(Self {
            connection,
            handler,
            events,
            channel,
        })
    }

    /// Runs the gateway connection, reconnecting as needed, until `stop` (then closes it) or a
    /// fatal close code (a refused token, disallowed intents). Returns within about a second of
    /// `stop`, whatever the peer does.
    ///
    /// # Errors
    /// The gateway's reason for giving up, in words for the operator.
    pub async fn run(self, stop: CancellationToken) -> anyhow::Result<()> {
        let handler = tokio::spawn(self.handler.run(self.events));
        let result = self.connection.run(stop).await;
        // Dispatches not yet handed to the core are dropped with the handler: the bridge is
        // stopping, or the gateway gave up.
        handler.abort();
        result
    }
}
