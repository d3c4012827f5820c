//! The small platform trait the core talks to, and the platform-neutral messages that cross it.
//!
//! The core never sees a platform type: it produces [`ChatAction`]s (posts and in-place edits of
//! logical messages) and consumes [`Inbound`] messages. Each adapter turns actions into its own
//! format within its [`Capabilities`], and reports rate limits as [`DeliveryError::RateLimited`] so the
//! outbox can honour them.

pub mod fetch;
pub mod several;
pub mod text;

/// Declares each platform's folder and registers it, in one line per platform: the only line
/// outside its folder that adding a platform touches ([`crate::platform::REGISTRY`] is this list).
macro_rules! platforms {
    ($($folder:ident => $platform:path),* $(,)?) => {
        $(pub mod $folder;)*

        /// Every platform this build serves, in this order (see [`crate::platform::REGISTRY`]).
        pub static PLATFORMS: &[&dyn crate::platform::Platform] = &[$(&$platform),*];
    };
}

platforms! {
    console => console::ConsolePlatform,
    slack => slack::start::SlackPlatform,
    discord => discord::start::DiscordPlatform,
}

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A boxed future, for the object-safe trait.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a platform can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Longest message text.
    pub max_message_len: usize,
    /// How much of an answer one message carries; longer answers go over several messages (split
    /// at paragraph and code-fence boundaries), or as a file past `render.upload_over`.
    pub answer_len: usize,
    /// How much of a tool's output a result message shows (the tail; the rest stays in the store).
    pub output_cap: usize,
    /// Messages can be edited in place.
    pub can_edit: bool,
    /// Messages can carry buttons.
    pub has_buttons: bool,
    /// Conversations live in threads.
    pub has_threads: bool,
    /// Reactions can be added to messages.
    pub has_reactions: bool,
    /// The platform sends its events to this process over HTTP (Slack's Events API): only the
    /// active replica listens, so a standby tells the load balancer it takes no traffic.
    pub takes_requests: bool,
}

/// Where a conversation lives on its platform (opaque strings to the core).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Target {
    /// Slack team, Discord guild, `local` for the console.
    pub workspace: String,
    /// Channel id.
    pub channel: String,
    /// Thread id.
    pub thread: String,
}

/// How a message should look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tone {
    /// Plain.
    Neutral,
    /// A tool that is running.
    Running,
    /// Completed.
    Success,
    /// Failed or timed out (Slack danger colour, Discord red, console `ERROR`).
    Error,
    /// A notice that needs attention (stall, full queue).
    Warning,
}

/// A button (approvals).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Button {
    /// What a click sends back (carries the request id).
    pub value: String,
    /// The label.
    pub label: String,
    /// Styled as the primary (allow) or danger (reject) choice.
    pub style: Option<String>,
}

/// A platform-neutral message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Look.
    pub tone: Tone,
    /// The first line (icon, title, duration).
    pub title: String,
    /// Body text, already redacted.
    #[serde(default)]
    pub body: Option<String>,
    /// Output to show in a code block, already capped and redacted.
    #[serde(default)]
    pub code: Option<String>,
    /// A small last line (pointer to the full output, who decided).
    #[serde(default)]
    pub footer: Option<String>,
    /// Buttons.
    #[serde(default)]
    pub buttons: Vec<Button>,
    /// The body is the agent's CommonMark: Slack converts it to mrkdwn, Discord shows it as it is,
    /// the console prints it readably. Otherwise it is plain text.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub markdown: bool,
    /// A file the message carries (an answer too long for messages, whole); the body is then its
    /// preview.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<OutFile>,
}

/// A text file a message carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutFile {
    /// Its name (`answer.md`).
    pub name: String,
    /// Its content.
    pub content: String,
}

impl Message {
    /// A plain message.
    #[must_use]
    pub fn text(tone: Tone, title: impl Into<String>) -> Self {
        Self {
            tone,
            title: title.into(),
            body: None,
            code: None,
            footer: None,
            buttons: Vec::new(),
            markdown: false,
            file: None,
        }
    }
}

/// What the core asks a channel to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum ChatAction {
    /// Create the message for logical `key` (if it already exists, edit it instead).
    Post {
        /// The conversation's place.
        target: Target,
        /// Logical message key (`tool:<call>`, `answer:<turn>`, `notice:<n>`).
        key: String,
        /// The message.
        message: Message,
    },
    /// Edit the message for logical `key` in place (create it if it never was).
    Edit {
        /// The conversation's place.
        target: Target,
        /// Logical message key.
        key: String,
        /// The new content.
        message: Message,
        /// A progress-line edit: lower priority, droppable under rate pressure.
        #[serde(default)]
        progress: bool,
    },
    /// Adds or removes a reaction on a person's message (👀 on receipt, the outcome at the end).
    React {
        /// The conversation's place.
        target: Target,
        /// The platform's id of the person's message.
        message_id: String,
        /// The reaction's name (`eyes`, `white_check_mark`).
        name: String,
        /// Add (true) or remove (false).
        add: bool,
    },
    /// A reply only `user` sees (an outsider's click on an approval).
    Ephemeral {
        /// The conversation's place.
        target: Target,
        /// Who sees it.
        user: String,
        /// The text, already redacted.
        text: String,
    },
}

impl ChatAction {
    /// The logical message key, for actions that create or edit a message.
    #[must_use]
    pub fn key(&self) -> Option<&str> {
        match self {
            Self::Post { key, .. } | Self::Edit { key, .. } => Some(key),
            Self::Ephemeral { .. } | Self::React { .. } => None,
        }
    }
}

/// Why a delivery failed, for the outbox.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// The platform asked us to wait.
    #[error("rate limited for {0:?}")]
    RateLimited(Duration),
    /// Worth retrying (network, 5xx).
    #[error("temporary failure: {0}")]
    Temporary(String),
    /// Will not succeed on retry (channel gone, no permission); dead-letter it.
    #[error("permanent failure: {0}")]
    Permanent(String),
}

/// A platform adapter.
pub trait Channel: Send + Sync {
    /// `console`, `slack`, `discord`.
    fn platform(&self) -> &'static str;
    /// What it can do.
    fn capabilities(&self) -> Capabilities;
    /// Creates a message; returns the platform's message id.
    fn post<'a>(
        &'a self,
        target: &'a Target,
        message: &'a Message,
    ) -> BoxFuture<'a, Result<String, DeliveryError>>;
    /// Creates a message carrying `key`, an idempotency key unique to this logical message, so an
    /// attempt whose outcome a crash hid can be recognised ([`Channel::find_posted`]); platforms
    /// without such a key just post.
    fn post_keyed<'a>(
        &'a self,
        target: &'a Target,
        message: &'a Message,
        key: &'a str,
    ) -> BoxFuture<'a, Result<String, DeliveryError>> {
        let _ = key;
        self.post(target, message)
    }
    /// The message an earlier attempt posted with `key`, if the platform can tell. `Ok(None)`: it
    /// was not posted — or the platform cannot tell, and posting again may show it twice.
    fn find_posted<'a>(
        &'a self,
        target: &'a Target,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, DeliveryError>> {
        let _ = (target, key);
        Box::pin(async { Ok(None) })
    }
    /// Edits a message in place.
    fn edit<'a>(
        &'a self,
        target: &'a Target,
        id: &'a str,
        message: &'a Message,
    ) -> BoxFuture<'a, Result<(), DeliveryError>>;
    /// Downloads the files people attach (platforms whose messages carry files).
    fn fetcher(&self) -> Option<std::sync::Arc<dyn Fetch>> {
        None
    }
    /// Whether the platform connection is up (for `/readyz`); channels without a connection of
    /// their own are always up.
    fn connected(&self) -> bool {
        true
    }
    /// The channel of `platform` when this one stands for several ([`several::Several`]); `None`:
    /// this channel itself.
    fn route(&self, platform: &str) -> Option<&dyn Channel> {
        let _ = platform;
        None
    }
    /// The channel a thread of `platform` was opened in, where the platform gives a thread its own
    /// channel id (Discord): a channel bound to a project is the parent, not the thread. `None`: the
    /// channel is its own (or the parent is not known).
    fn parent_channel(&self, platform: &str, channel: &str) -> Option<String> {
        let _ = (platform, channel);
        None
    }
    /// Each platform behind this channel with whether it is connected, for `/readyz`.
    fn each_connected(&self) -> Vec<(&'static str, bool)> {
        vec![(self.platform(), self.connected())]
    }
    /// Adds or removes a reaction; platforms without reactions ignore it.
    fn react<'a>(
        &'a self,
        target: &'a Target,
        message_id: &'a str,
        name: &'a str,
        add: bool,
    ) -> BoxFuture<'a, Result<(), DeliveryError>> {
        let _ = (target, message_id, name, add);
        Box::pin(async { Ok(()) })
    }
    /// The name `user` shows in the platform (Slack `users.info`, Discord's user), for the speaker
    /// label a prompt carries to the agent. `Ok(None)`: the platform has no such lookup and the
    /// user id is the name (the console's is the local user name).
    fn display_name<'a>(
        &'a self,
        user: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, DeliveryError>> {
        let _ = user;
        Box::pin(async { Ok(None) })
    }
    /// A reply only `user` sees; platforms without ephemerals post it as a visible notice addressed
    /// to them.
    fn ephemeral<'a>(
        &'a self,
        target: &'a Target,
        user: &'a str,
        text: &'a str,
    ) -> BoxFuture<'a, Result<(), DeliveryError>> {
        Box::pin(async move {
            self.post(
                target,
                &Message::text(Tone::Warning, format!("{user}: {text}")),
            )
            .await
            .map(drop)
        })
    }
}

/// Why a file could not be fetched from its platform (the words go to the person).
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// Larger than allowed (checked while downloading, whatever the platform announced).
    #[error("too large (more than {})", crate::conversation::files::human_bytes(*.0))]
    TooLarge(u64),
    /// Its address is not the platform's own file host (SSRF: nothing else is ever fetched).
    #[error("its address is not this platform's file host")]
    ForeignHost,
    /// The download failed.
    #[error("it could not be downloaded ({0})")]
    Failed(String),
}

/// Downloads the files people attach, from the platform's own file hosts only.
pub trait Fetch: Send + Sync + std::fmt::Debug {
    /// The bytes of `file`, at most `max` of them.
    ///
    /// # Errors
    /// [`FetchError`]: too large, not the platform's host, or the download failed.
    fn fetch<'a>(
        &'a self,
        file: &'a Attachment,
        max: u64,
    ) -> BoxFuture<'a, Result<Vec<u8>, FetchError>>;
}

/// Something a person did in a channel. Serialised into the inbox (`inbound_events.payload`) until
/// it is handled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inbound {
    /// The platform's event id (deduplicated, D2).
    pub event_id: String,
    /// Which platform.
    pub platform: String,
    /// Where.
    pub target: Target,
    /// Who (platform user id).
    pub user: String,
    /// The platform's id of the person's message (for reactions), when it has one.
    pub message_id: Option<String>,
    /// Whether this may start a conversation (a mention, a DM, the console); otherwise it only
    /// continues a thread the bridge already owns.
    pub opens: bool,
    /// What.
    pub kind: InboundKind,
}

/// An inbound event on its way to the core, and whom to tell once it is safely recorded.
#[derive(Debug)]
pub struct Arrival {
    /// The event.
    pub inbound: Inbound,
    /// Answered once the event is in the inbox (or seen before, or refused for good); dropped
    /// unanswered when it could not be recorded, so a platform that redelivers unacknowledged
    /// events (Slack) delivers it again.
    pub recorded: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Arrival {
    /// An arrival whose platform acknowledges it once recorded: the receiver resolves then.
    #[must_use]
    pub fn acknowledged(inbound: Inbound) -> (Self, tokio::sync::oneshot::Receiver<()>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (
            Self {
                inbound,
                recorded: Some(tx),
            },
            rx,
        )
    }
}

impl From<Inbound> for Arrival {
    fn from(inbound: Inbound) -> Self {
        Self {
            inbound,
            recorded: None,
        }
    }
}

/// The kinds of inbound events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InboundKind {
    /// A message (a mention that starts a thread, or a reply in one).
    Message(String),
    /// A button click: the button's value.
    Action(String),
    /// A message with files attached (its text may be empty). Nothing a person sends vanishes:
    /// the text runs, and each file is either used or the person is told why it was not.
    Files {
        /// What they typed.
        text: String,
        /// The files, as the platform described them (nothing downloaded yet).
        files: Vec<Attachment>,
    },
}

impl InboundKind {
    /// The text of a message (with or without files); `None` for a click.
    #[must_use]
    pub fn text(&self) -> Option<&str> {
        match self {
            Self::Message(t) | Self::Files { text: t, .. } => Some(t),
            Self::Action(_) => None,
        }
    }
}

/// A file attached to a person's message, as the platform announced it. `url` is the platform's
/// own file host (Slack `url_private_download`, Discord's CDN); it is fetched only from there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// The platform's id of the file.
    pub id: String,
    /// Its name as shown to people (not trusted as a path).
    pub name: String,
    /// Its MIME type, when the platform says.
    #[serde(default)]
    pub mime: Option<String>,
    /// Its size in bytes, when the platform says.
    #[serde(default)]
    pub size: Option<u64>,
    /// Where the platform serves it.
    #[serde(default)]
    pub url: Option<String>,
}
