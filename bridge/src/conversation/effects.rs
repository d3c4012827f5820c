//! The chat actions a conversation writes and how each maps onto an outbox row (D1): a post or an
//! edit coalesces by its message key (R1: one message per tool call, edited in place), a reaction
//! or an ephemeral reply is a row of its own. The runner writes the row in the same transaction as
//! the state change that caused it. Pure.

use daemon_client::{PermissionRequest, Stall, StopReason, ToolCallId, ToolInfo, ToolResult};

use super::approvals::Pending;
use super::commands::Command;
use super::event::{Mark, TurnStatus};
use super::inbox::EventKey;
use super::state::Line;
use super::turn::Queued;
use crate::channel::{ChatAction, Message, Target, Tone};
use crate::core::access::Refusal;
use crate::core::keys::MessageKey;
use crate::store::outbox::Kind;

/// What the runner does for a decision of [`State::handle`](super::state::State::handle): each
/// is one transaction (with its outbox rows), a daemon call, or both.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Post what the agent sent while no turn was open, and keep it in the transcript.
    PostLate(String),
    /// Refuse what a person asked: only they hear why, their message gets ⛔, nothing runs (A2, A3).
    Refuse {
        /// Who asked.
        user: String,
        /// Their message.
        message_id: Option<String>,
        /// Why not.
        refusal: Refusal,
    },
    /// A person answers a waiting approval (checked against the request, R6, A3).
    Answer {
        /// Who answers.
        user: String,
        /// The request's stored id.
        request: String,
        /// The option picked.
        option: String,
    },
    /// Run a command for `user`.
    Command {
        /// Who asked.
        user: String,
        /// What.
        command: Command,
    },
    /// Show the answer so far in draft `seq` (R5).
    Draft(usize, String),
    /// A prompt: 👀 on the person's message, then [`Event::Prompt`](super::event::Event::Prompt).
    Prompt(Queued),
    /// Hand due heartbeat counts to the progress writer (P2; never a message, F1).
    FlushCounts,
    /// Edit a tool's message into its progress line (L5).
    ShowLine(Line),
    /// Record a permission request and post it with its buttons (R6).
    AskPermission(PermissionRequest),
    /// Record a tool call and post its message — or follow it again if it is already stored (R1).
    AnnounceTool(ToolCallId, ToolInfo),
    /// A running call's title changed: store it and edit its message.
    RetitleTool {
        /// The call.
        call: ToolCallId,
        /// The new title.
        title: String,
        /// Its kind, when the update said.
        kind: Option<String>,
    },
    /// Record a call's result and edit its message into it (R2, R3).
    FinishTool(ToolCallId, ToolResult),
    /// End the turn the daemon ended: status, answer (R5), mark; then the next queued prompt.
    EndTurn(StopReason),
    /// An approval expired unanswered: edit its message, answer the daemon "cancelled".
    ExpireApproval(Pending),
    /// A liveness limit fired (L3): tell the thread; close a resumed turn as interrupted (D3);
    /// send `session/cancel` under `on_stall = cancel`.
    Stalled {
        /// Which limit, and the silence.
        stall: Stall,
        /// The turn was taken back after a restart.
        resumed: bool,
        /// `on_stall = cancel`.
        cancel: bool,
    },
    /// Close tool calls that will never finish (stored as interrupted): (session-scoped call id,
    /// title).
    InterruptTools(Vec<(String, String)>),
    /// Close tool calls whose cancel the agent never confirmed (stored as cancelled; their
    /// messages say the bridge stopped following them): (session-scoped call id, title).
    LetGoTools(Vec<(String, String)>),
    /// Tell the thread.
    Notice(Tone, String),
    /// End the turn with a status the bridge decided (interrupted, failed).
    EndTurnAs(TurnStatus),
    /// A turn taken back after a restart whose prompt never reached the daemon, whose last prompt
    /// was this: send the turn's prompt now if that one is provably the turn before (D6).
    SendAgain(String),
    /// Start a turn for this prompt.
    StartTurn(Queued),
    /// The prompt waits behind the running turn; its inbox entry is noted as waiting (S4).
    Queued(Option<EventKey>),
    /// A steering prompt went ahead of the queue: the running turn is cancelled.
    Steer(Option<EventKey>),
    /// A prompt was merged into the one waiting (`collect`).
    Collected(Option<EventKey>),
    /// The queue is full: say so, naming the message refused.
    QueueFull {
        /// How many wait.
        waiting: usize,
        /// The refused message's text (the notice quotes its start, so a sender of several
        /// messages knows which one to send again).
        refused: String,
        /// The refused message, where the platform names it: its 👀 is taken away and ❌ added,
        /// so the message itself says it will not run.
        message_id: Option<String>,
    },
    /// The agent is unreachable: the prompt waits in the queue until it is back (L7); its inbox
    /// entry is noted as waiting (S4), as for [`Effect::Queued`].
    Held(Option<EventKey>),
    /// Nothing runs and prompts wait (the agent is back, or it is time to try again): start the
    /// first of them.
    RunQueued,
}

/// Posts a message under `key`.
#[must_use]
pub fn post(target: &Target, key: &MessageKey, message: Message) -> ChatAction {
    ChatAction::Post {
        target: target.clone(),
        key: key.to_string(),
        message,
    }
}

/// Edits the message under `key` in place; a `progress` edit may be dropped under rate pressure.
#[must_use]
pub fn edit(target: &Target, key: &MessageKey, message: Message, progress: bool) -> ChatAction {
    ChatAction::Edit {
        target: target.clone(),
        key: key.to_string(),
        message,
        progress,
    }
}

/// Adds (or takes away) `mark` on the person's message `message_id`.
#[must_use]
pub fn react(target: &Target, message_id: &str, mark: Mark, add: bool) -> ChatAction {
    ChatAction::React {
        target: target.clone(),
        message_id: message_id.to_owned(),
        name: mark.as_str().to_owned(),
        add,
    }
}

/// A reply only `user` sees.
#[must_use]
pub fn ephemeral(target: &Target, user: &str, text: String) -> ChatAction {
    ChatAction::Ephemeral {
        target: target.clone(),
        user: user.to_owned(),
        text,
    }
}

/// The outbox row's kind and coalescing key for `action`.
#[must_use]
pub fn outbox_row(action: &ChatAction) -> (Kind, Option<&str>) {
    match action {
        ChatAction::Post { key, .. } => (Kind::Post, Some(key.as_str())),
        ChatAction::Edit { key, .. } => (Kind::Edit, Some(key.as_str())),
        ChatAction::Ephemeral { .. } | ChatAction::React { .. } => (Kind::Other, None),
    }
}

/// The actions that close a turn on the person's message: 👀 taken away, its outcome added.
#[must_use]
pub fn outcome_marks(target: &Target, message_id: &str, outcome: Mark) -> [ChatAction; 2] {
    [
        react(target, message_id, Mark::Received, false),
        react(target, message_id, outcome, true),
    ]
}
