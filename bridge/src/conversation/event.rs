//! The words of a conversation: how a turn ended ([`TurnStatus`], [`EndCause`]'s stored form), how a
//! tool call ended ([`ToolOutcome`]), and the [`Mark`] the person's message gets for its turn. Each
//! maps to the store's (or the outbox's) word in exactly one place, here.

use std::fmt;
use std::str::FromStr;

use daemon_client::{DaemonEvent, EndCause, StallKind, StopReason};

use super::inbox::EventKey;
use super::turn::Queued;

/// A person's message in the thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Said {
    /// Who wrote it.
    pub user: String,
    /// What they wrote.
    pub text: String,
    /// The platform's id of their message (for its marks).
    pub message_id: Option<String>,
    /// Its inbox entry.
    pub event: Option<EventKey>,
    /// Files attached to it.
    pub files: Vec<crate::channel::Attachment>,
}

/// Something that happens to a conversation, handed to
/// [`State::handle`](super::state::State::handle) with the time it happened.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A person's message (the thread's members read beforehand when it asks for more than
    /// reading, A2).
    Message(Said),
    /// A daemon event of the conversation's session.
    Daemon(DaemonEvent),
    /// A deadline passed: a liveness limit, a progress line, an approval's expiry.
    Timer,
    /// A prompt to run, its author's role already checked (A2).
    Prompt(Queued),
    /// The daemon connection went down (`false`) or came back (`true`) (L7).
    Connection(bool),
    /// A turn could not start for this prompt because the agent was unreachable: it is held, first
    /// in line, until the agent is back (L7). Its inbox entry stays unhandled.
    Unreachable(Queued),
    /// The `session/prompt` call number `seq` returned.
    PromptDone {
        /// Which call (a late return of an older one is ignored).
        seq: u64,
        /// How it returned.
        end: PromptEnd,
    },
}

/// How a `session/prompt` call returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptEnd {
    /// With a stop reason: the turn ends on the event stream, after all its events.
    Answered,
    /// The daemon no longer has the session (it restarted while the connection was down).
    SessionLost(String),
    /// The agent process (a `daemon.command` child) exited and took the turn with it; it is being
    /// started again. The session stays: it is loaded again before the next prompt when the agent
    /// can load sessions, else a new one is opened.
    AgentExited(String),
    /// The bridge is stopping and closed the connection: the turn stays open for the next start (D3).
    Stopping,
    /// Any other failure, in words for the thread.
    Failed(String),
}

/// How a turn ended, as the `turns.status` column says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnStatus {
    /// The agent ended it on its own.
    Ended,
    /// Someone cancelled it first (`/cancel`, or the daemon reported a cancelled stop).
    Cancelled,
    /// A liveness limit fired first (L1, L2); a later cancel does not change it (T2).
    Stalled,
    /// The agent lost its session (a daemon restart, or the bridge's own restart).
    Interrupted,
    /// The prompt could not run at all.
    Failed,
}

impl TurnStatus {
    /// The stored word.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ended => "ended",
            Self::Cancelled => "cancelled",
            Self::Stalled => "stalled",
            Self::Interrupted => "interrupted",
            Self::Failed => "failed",
        }
    }

    /// How a turn ends: a status forced by the bridge wins; otherwise the turn's first cause
    /// (a stall before a cancel stays a stall, T2), then the daemon's stop reason.
    #[must_use]
    pub fn decide(
        forced: Option<Self>,
        first_cause: Option<EndCause>,
        stop: Option<&StopReason>,
    ) -> Self {
        match (forced, first_cause, stop) {
            (Some(s), _, _) => s,
            (None, Some(EndCause::Stalled(_)), _) => Self::Stalled,
            (None, Some(EndCause::Cancelled), _) | (None, None, Some(StopReason::Cancelled)) => {
                Self::Cancelled
            }
            _ => Self::Ended,
        }
    }
}

impl fmt::Display for TurnStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A turn's first cause as the `turns.end_cause` column says it.
#[must_use]
pub fn end_cause_word(cause: EndCause) -> &'static str {
    match cause {
        EndCause::Stalled(StallKind::Idle) => "stalled_idle",
        EndCause::Stalled(StallKind::Wall) => "stalled_wall",
        EndCause::Cancelled => "cancelled",
    }
}

/// How a tool call ended, as the `tool_calls.status` column says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolOutcome {
    /// `completed` (F3).
    Completed,
    /// `failed` for any other reason.
    Failed,
    /// `failed` because its time limit ended it (T1).
    TimedOut,
    /// `failed` because it was cancelled.
    Cancelled,
    /// The agent lost the session while it ran; it will never finish.
    Interrupted,
}

impl ToolOutcome {
    /// The stored word.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::TimedOut => "timed_out",
            Self::Cancelled => "cancelled",
            Self::Interrupted => "interrupted",
        }
    }
}

impl From<daemon_client::Outcome> for ToolOutcome {
    fn from(o: daemon_client::Outcome) -> Self {
        match o {
            daemon_client::Outcome::Completed => Self::Completed,
            daemon_client::Outcome::Failed => Self::Failed,
            daemon_client::Outcome::TimedOut => Self::TimedOut,
            daemon_client::Outcome::Cancelled => Self::Cancelled,
        }
    }
}

/// The mark a person's message gets: taken, refused, or how its turn went. The core names the
/// outcome; each platform picks its emoji for it (Slack's reaction name, Discord's character).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mark {
    /// 👀 the message was taken (it may wait in the queue).
    Received,
    /// ✅ the turn ended and every tool call in it completed.
    Done,
    /// ❌ a tool call failed, or the turn could not run or was interrupted.
    Failed,
    /// ⏱ a tool call or the turn itself ran out of time.
    TimedOut,
    /// ⏹ cancelled, or an approval was rejected (or expired).
    Stopped,
    /// ⛔ the person may not do that here (A2, A3).
    Refused,
}

impl Mark {
    /// Every mark, for tables and tests.
    pub const ALL: [Self; 6] = [
        Self::Received,
        Self::Done,
        Self::Failed,
        Self::TimedOut,
        Self::Stopped,
        Self::Refused,
    ];

    /// The word the outbox stores (a reaction's `name`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Received => "received",
            Self::Done => "done",
            Self::Failed => "failed",
            Self::TimedOut => "timed_out",
            Self::Stopped => "stopped",
            Self::Refused => "refused",
        }
    }

    /// The outcome of a turn that ended with `status`, whose tool calls ended with `tools`;
    /// `rejected` when an approval in it was rejected or expired. ✅ only when every tool call
    /// completed; a person stopping something (⏹) outranks a timeout (⏱), which outranks a
    /// failure (❌).
    #[must_use]
    pub fn of_turn(status: TurnStatus, tools: &[ToolOutcome], rejected: bool) -> Self {
        match status {
            TurnStatus::Cancelled => Self::Stopped,
            TurnStatus::Stalled => Self::TimedOut,
            TurnStatus::Failed | TurnStatus::Interrupted => Self::Failed,
            TurnStatus::Ended => {
                let any = |o: ToolOutcome| tools.contains(&o);
                if rejected || any(ToolOutcome::Cancelled) {
                    Self::Stopped
                } else if any(ToolOutcome::TimedOut) {
                    Self::TimedOut
                } else if any(ToolOutcome::Failed) || any(ToolOutcome::Interrupted) {
                    Self::Failed
                } else {
                    Self::Done
                }
            }
        }
    }
}

impl fmt::Display for Mark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reaction name that is no mark.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a mark: {0:?}")]
pub struct UnknownMark(String);

impl FromStr for Mark {
    type Err = UnknownMark;

    /// The stored word, or the reaction name earlier versions stored (outbox rows written before an
    /// upgrade are still delivered with the right mark).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "received" | "eyes" => Self::Received,
            "done" | "white_check_mark" => Self::Done,
            "failed" | "x" => Self::Failed,
            "timed_out" | "warning" => Self::TimedOut,
            "stopped" | "black_square_for_stop" => Self::Stopped,
            "refused" | "no_entry_sign" => Self::Refused,
            _ => return Err(UnknownMark(s.to_owned())),
        })
    }
}
