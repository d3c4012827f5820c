//! Work that arrives later: agent updates for the thread's session while no turn is open
//! (a background task finishing, a late answer, a follow-up) are posted in the thread instead of
//! being dropped. Pure: pieces are gathered here, and once the agent has been quiet for
//! [`LATE_QUIET`] they go out as one message — at most one per [`LATE_EVERY`], so a chatty
//! background job cannot flood the thread. Frames a `session/load` replays are history and never
//! reach this (L6).

use std::collections::HashMap;
use std::time::Duration;

use daemon_client::{DaemonEvent, Outcome, ToolCallId};
use tokio::time::Instant;

/// The agent is considered done with a burst after this much quiet.
pub const LATE_QUIET: Duration = Duration::from_secs(1);

/// At most one late message per this interval (the rest waits and goes in the next one).
pub const LATE_EVERY: Duration = Duration::from_secs(10);

/// The most late text kept for one message, in bytes; past it the oldest goes (the newest is
/// what the agent last said) with a note.
pub const LATE_CAP: usize = 8 * 1024;

/// Whether `e` is worth loading a conversation let go from memory for: only what [`Late::take`]
/// keeps (or needs to name a finished call).
#[must_use]
pub fn worth_waking(e: &DaemonEvent) -> bool {
    matches!(
        e,
        DaemonEvent::AgentText { .. }
            | DaemonEvent::ToolStarted { .. }
            | DaemonEvent::ToolFinished { .. }
    )
}

/// Names of background calls kept at most (to name them when they finish).
const TITLES_MAX: usize = 256;

/// Late pieces waiting to be posted.
#[derive(Debug, Default, Clone)]
pub struct Late {
    text: String,
    dropped: bool,
    titles: HashMap<ToolCallId, String>,
    last_piece: Option<Instant>,
    last_post: Option<Instant>,
}

impl Late {
    /// Takes a daemon event of the thread's session that arrived at `now` with no turn open:
    /// agent text and finished tool calls are kept for the thread; anything else (heartbeats,
    /// output of a running call, reasoning, usage) is not. Whether it was kept.
    pub fn take(&mut self, e: &DaemonEvent, now: Instant) -> bool {
        let piece = match e {
            DaemonEvent::AgentText { text, .. } => text.clone(),
            DaemonEvent::ToolStarted { call, info, .. } => {
                let title = info.title.clone().unwrap_or_else(|| "tool".to_owned());
                if self.titles.len() >= TITLES_MAX {
                    // Calls that never finish: their names are not kept for ever.
                    self.titles.clear();
                }
                self.titles.insert(call.clone(), title);
                return false;
            }
            DaemonEvent::ToolFinished { call, result, .. } => {
                let title = self
                    .titles
                    .remove(call)
                    .unwrap_or_else(|| "a tool call".to_owned());
                let mark = match result.outcome {
                    Outcome::Completed => "✅",
                    Outcome::Failed => "❌",
                    Outcome::TimedOut => "⏱",
                    Outcome::Cancelled => "⏹",
                };
                match result.summary.as_deref().map(str::trim) {
                    Some(summary) if !summary.is_empty() => {
                        format!("\n{mark} {title} — {summary}\n")
                    }
                    _ => format!("\n{mark} {title}\n"),
                }
            }
            _ => return false,
        };
        if piece.is_empty() {
            return false;
        }
        self.text.push_str(&piece);
        if self.text.len() > LATE_CAP {
            let mut cut = self.text.len() - LATE_CAP;
            while !self.text.is_char_boundary(cut) {
                cut += 1;
            }
            self.text.drain(..cut);
            self.dropped = true;
        }
        self.last_piece = Some(now);
        true
    }

    /// Nothing waits to be posted.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.text.trim().is_empty()
    }

    /// When the waiting pieces are due: after [`LATE_QUIET`] of quiet, and not sooner than
    /// [`LATE_EVERY`] after the last late message.
    #[must_use]
    pub fn deadline(&self) -> Option<Instant> {
        if self.is_empty() {
            return None;
        }
        let quiet = self.last_piece? + LATE_QUIET;
        Some(match self.last_post {
            Some(p) => quiet.max(p + LATE_EVERY),
            None => quiet,
        })
    }

    /// The message due at `now`, if one is: the pieces gathered, taken out.
    pub fn due(&mut self, now: Instant) -> Option<String> {
        if self.deadline().is_none_or(|d| d > now) {
            return None;
        }
        self.last_post = Some(now);
        self.take_now()
    }

    /// Whatever waits, taken out now, due or not (the bridge is stopping: it is written rather
    /// than lost).
    pub fn take_now(&mut self) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        self.last_piece = None;
        let mut text = std::mem::take(&mut self.text);
        if std::mem::take(&mut self.dropped) {
            text.insert_str(0, "… (earlier late output left out)\n");
        }
        Some(text.trim().to_owned())
    }
}
