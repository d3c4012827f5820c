//! Permission requests waiting for a person (R6, A3): which options are offered, what a numbered
//! answer picks, when a request expires, and what a decision is called. Pure; who may answer is
//! [`crate::core::access`]'s decision, and the runner writes and sends.

use daemon_client::{PermissionOption, RequestId};
use std::collections::HashMap;
use tokio::time::Instant;

/// One request waiting for an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// Its stored id (the button value and message key carry it).
    pub db_id: String,
    /// The daemon's request id (the answer goes back with it).
    pub request_id: RequestId,
    /// What the agent wants to run.
    pub title: String,
    /// The options offered (after [`offered`]).
    pub options: Vec<PermissionOption>,
    /// Who asked for the turn (A3: not their own approver when four eyes are on).
    pub requester: String,
    /// When it expires unanswered (as rejected).
    pub expires: Instant,
    /// What will run: the call's parameters as shown to approvers (capped, redacted).
    pub detail: Option<String>,
}

impl Pending {
    /// The offered option ids (the only ones an answer may pick).
    #[must_use]
    pub fn option_ids(&self) -> Vec<&str> {
        self.options.iter().map(|o| o.option_id.as_str()).collect()
    }

    /// The name the person saw for `option` (the id itself when it was not offered).
    #[must_use]
    pub fn label(&self, option: &str) -> String {
        self.options
            .iter()
            .find(|o| o.option_id == option)
            .map_or_else(|| option.to_owned(), |o| o.name.clone())
    }

    /// The kind of `option` (`allow_once`, `reject_once`, …), when it was offered.
    #[must_use]
    pub fn kind(&self, option: &str) -> Option<&str> {
        self.options
            .iter()
            .find(|o| o.option_id == option)
            .map(|o| o.kind.as_str())
    }

    /// Whether picking `option` rejects the call.
    #[must_use]
    pub fn rejects(&self, option: &str) -> bool {
        self.options
            .iter()
            .find(|o| o.option_id == option)
            .is_some_and(|o| o.kind.starts_with("reject"))
    }
}

/// The options a request offers: with four eyes on every call (A3) an "always" would let the
/// requester's later calls run unseen, so it is not offered (and, not offered, a forged click is
/// refused).
#[must_use]
pub fn offered(
    mut options: Vec<PermissionOption>,
    require_second_person: bool,
) -> Vec<PermissionOption> {
    if require_second_person {
        options.retain(|o| o.kind != "allow_always");
    }
    options
}

/// What a number typed while one approval waits picks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Numbered {
    /// The request's id and the option id at that number.
    Option {
        /// Stored request id.
        request: String,
        /// Option id.
        option: String,
    },
    /// No option has that number (the number is still an answer, never a prompt).
    NoSuchOption,
}

/// The requests waiting in one conversation.
#[derive(Debug, Default)]
pub struct Approvals {
    pending: HashMap<String, Pending>,
}

impl Approvals {
    /// Nothing waits.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// How many wait.
    #[must_use]
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// A request that now waits (until its `expires`).
    pub fn ask(&mut self, p: Pending) {
        self.pending.insert(p.db_id.clone(), p);
    }

    /// The waiting request `id`.
    #[must_use]
    pub fn get(&self, id: &str) -> Option<&Pending> {
        self.pending.get(id)
    }

    /// The waiting requests' ids, in no particular order.
    #[must_use]
    pub fn ids(&self) -> Vec<String> {
        self.pending.keys().cloned().collect()
    }

    /// Questions taken out whose closing could not be written: waiting again, as they were.
    pub fn ask_again(&mut self, taken: Vec<Pending>) {
        for p in taken {
            self.ask(p);
        }
    }

    /// Takes every waiting request out (the turn that asked them ended).
    pub fn take_all(&mut self) -> Vec<Pending> {
        let mut out: Vec<Pending> = self.pending.drain().map(|(_, p)| p).collect();
        out.sort_by_key(|p| p.expires);
        out
    }

    /// Takes request `id` out (answered: the first decision wins).
    pub fn take(&mut self, id: &str) -> Option<Pending> {
        self.pending.remove(id)
    }

    /// What number `n` (from 1) picks when exactly one request waits; `None` otherwise.
    #[must_use]
    pub fn numbered(&self, n: usize) -> Option<Numbered> {
        if self.pending.len() != 1 {
            return None;
        }
        let p = self.pending.values().next()?;
        Some(match p.options.get(n.wrapping_sub(1)) {
            Some(o) => Numbered::Option {
                request: p.db_id.clone(),
                option: o.option_id.clone(),
            },
            None => Numbered::NoSuchOption,
        })
    }

    /// Takes out every request due at `now` (they expire as rejected), oldest deadline first.
    pub fn take_expired(&mut self, now: Instant) -> Vec<Pending> {
        let due: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, p)| p.expires <= now)
            .map(|(k, _)| k.clone())
            .collect();
        let mut out: Vec<Pending> = due.iter().filter_map(|k| self.pending.remove(k)).collect();
        out.sort_by_key(|p| p.expires);
        out
    }

    /// The earliest expiry.
    #[must_use]
    pub fn next_deadline(&self) -> Option<Instant> {
        self.pending.values().map(|p| p.expires).min()
    }
}

/// The line an answered request's message shows.
#[must_use]
pub fn decided_text(who: &str, label: &str) -> String {
    format!("{who} chose: {label}")
}

/// The heading an answered request's message shows instead of "approval needed": what was decided
/// and by whom (`who` as the platform names people).
#[must_use]
pub fn decided_heading(who: &str, kind: Option<&str>, label: &str) -> String {
    match kind {
        Some("allow_once") => format!("✅ Allowed once by {who}"),
        Some("allow_always") => format!("✅ Allowed always by {who}"),
        Some(k) if k.starts_with("reject") => format!("🚫 Rejected by {who}"),
        _ => format!("☑️ {label} — {who}"),
    }
}

/// The line an expired request's message shows.
pub const EXPIRED: &str = "expired unanswered — rejected";

/// The heading of an expired request's message.
pub const EXPIRED_HEADING: &str = "⌛ Expired — rejected";

/// The line a request asked before a restart shows.
pub const LAPSED: &str = "lapsed: the bridge restarted while this waited";

/// The line of a request whose turn ended before anyone answered (`/cancel`, a stall, an error).
pub const ENDED: &str = "no longer needed: the turn ended before anyone answered";

/// The heading of a request whose turn ended unanswered.
pub const ENDED_HEADING: &str = "⏹ Not needed";

/// The heading of a request asked before a restart.
pub const LAPSED_HEADING: &str = "⏹ Lapsed";

/// The line of a request left waiting when the console's input ended: nobody can answer it.
pub const INPUT_ENDED: &str =
    "not answered: the input ended, so nobody can answer — the command was not run";

/// The heading of a request left waiting when the console's input ended.
pub const INPUT_ENDED_HEADING: &str = "⏹ Not answered";
