//! A turn: its state while it runs (liveness, tools, the answer so far), the queue of prompts
//! waiting behind it, how it ends (first cause, T2; the person's mark) and what the thread is told
//! when it stalls (L3) or is asked about (`/status`). Pure, with `now` given.

use std::collections::VecDeque;
use std::time::Duration;

use daemon_client::liveness::human_duration;
use daemon_client::{Liveness, LivenessConfig, SessionId, Stall, StallKind, StopReason};
use tokio::time::Instant;

use super::event::{Mark, ToolOutcome, TurnStatus, end_cause_word};
use super::inbox::EventKey;
use super::tools::Tools;
use crate::store::turns::Turn;

/// The running turn.
#[derive(Debug)]
pub struct TurnState {
    /// Its stored row.
    pub row: Turn,
    /// L1–L3 for this turn.
    pub liveness: Liveness,
    /// Tool calls still running.
    pub tools: Tools,
    /// The agent's text since the last tool call (R5).
    pub answer: String,
    /// Taken back after a restart (D3): its end may never be seen.
    pub resumed: bool,
    /// Which prompt call belongs to it (a late completion of an older one is ignored).
    pub prompt_seq: u64,
    /// The person's message that asked for this turn (for the mark).
    pub user_message: Option<String>,
    /// How its finished tool calls ended.
    pub outcomes: Vec<ToolOutcome>,
    /// An approval in it was rejected or expired.
    pub rejected: bool,
    /// `/cancel` (or `on_stall = cancel`) was sent: if the daemon has not ended the turn by then, the
    /// bridge ends it — a prompt whose answer died with a connection would otherwise hold the thread
    /// for good.
    pub cancel_by: Option<Instant>,
    /// The connection came back while this turn was open: unless a live frame of its session
    /// arrives by then, the daemon is not running it any more (it restarted) and the bridge ends
    /// it as interrupted — an orphaned prompt would otherwise hold the thread until a limit fires.
    pub orphan_by: Option<Instant>,
    /// For a turn taken back after a restart: whose prompt the load's replay is at — `None` until it
    /// names one (a daemon that replays no prompts), `Some(true)` from this turn's own prompt on
    /// (D6: it reached the daemon; what follows is this turn's), `Some(false)` in an older turn's.
    pub replay_at_own: Option<bool>,
    /// The last prompt the load's replay showed, as the daemon keeps it (D6: for a turn whose own
    /// prompt it does not show, which prompt the daemon was last asked).
    pub replay_last_prompt: Option<String>,
    /// The load's replay ends, so far, in a turn's end: nothing ran in the session after it.
    pub replay_settled: bool,
    /// For a turn taken back after a restart: the (session-scoped) ids of the calls stored for the
    /// conversation's earlier turns. A replayed frame of one of them shows that the prompt the
    /// replay is at is an older one with the same text as this turn's, not its own (D6).
    pub earlier_calls: std::collections::HashSet<String>,
    /// The draft the answer streams into (R5), while text arrives.
    pub draft: Option<Draft>,
    /// Drafts this turn has had (one per stretch of text between tool calls).
    pub drafts: usize,
    /// Other people's messages merged into this turn's prompt (`collect`): they get its mark too.
    pub merged_messages: Vec<String>,
    /// Its message's files are still downloading: no prompt has been sent yet, so a cancel ends
    /// the turn here (stopping the downloads) and the daemon hears nothing.
    pub downloading: Option<Unsent>,
}

/// A turn whose files are still downloading: not in the store yet (its row is recorded, and its
/// inbox entries marked handled, when the prompt is sent), so a restart meanwhile takes its message
/// again from the inbox — downloading its files again — instead of waiting on a prompt the agent
/// never got (D3, D6).
#[derive(Debug)]
pub struct Unsent {
    /// Stops the downloads.
    pub stop: tokio_util::sync::CancellationToken,
    /// The inbox entries of its message and those merged into it.
    pub events: Vec<EventKey>,
    /// What the history keeps as its prompt (typed).
    pub text: String,
    /// Who asked.
    pub user: String,
}

/// A draft message the agent's text streams into, edited at most every `render.stream_every`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Draft {
    /// Its number within the turn (its message key).
    pub seq: usize,
    /// When it was last shown.
    pub shown_at: Option<Instant>,
    /// Text arrived since it was last shown: show it then.
    pub due: Option<Instant>,
}

impl TurnState {
    /// A turn that starts (or is taken back) at `now`.
    #[must_use]
    pub fn new(
        row: Turn,
        liveness: LivenessConfig,
        now: Instant,
        resumed: bool,
        prompt_seq: u64,
    ) -> Self {
        let user_message = row.message_id.clone();
        Self {
            row,
            liveness: Liveness::new(liveness, now),
            tools: Tools::new(),
            answer: String::new(),
            resumed,
            prompt_seq,
            user_message,
            outcomes: Vec::new(),
            rejected: false,
            cancel_by: None,
            orphan_by: None,
            replay_at_own: None,
            replay_last_prompt: None,
            replay_settled: false,
            earlier_calls: std::collections::HashSet::new(),
            draft: None,
            drafts: 0,
            merged_messages: Vec::new(),
            downloading: None,
        }
    }

    /// Text arrived at `now`: the draft to show now (its number and the text so far), if its
    /// last edit is at least `every` ago; otherwise the edit is due then.
    pub fn stream(&mut self, now: Instant, every: Duration) -> Option<(usize, String)> {
        if self.resumed || self.answer.trim().is_empty() {
            return None;
        }
        let drafts = &mut self.drafts;
        let d = self.draft.get_or_insert_with(|| {
            *drafts += 1;
            Draft {
                seq: *drafts,
                shown_at: None,
                due: None,
            }
        });
        match d.shown_at {
            Some(at) if now < at + every => {
                d.due.get_or_insert(at + every);
                None
            }
            _ => {
                d.shown_at = Some(now);
                d.due = None;
                Some((d.seq, self.answer.clone()))
            }
        }
    }

    /// The draft edit that is due at `now`, if any.
    pub fn draft_due(&mut self, now: Instant) -> Option<(usize, String)> {
        let d = self.draft.as_mut()?;
        if d.due.is_some_and(|at| at <= now) {
            d.due = None;
            d.shown_at = Some(now);
            return Some((d.seq, self.answer.clone()));
        }
        None
    }

    /// A cancel sent at `now`: its cause unless one came first (T2); the daemon has `grace` to end
    /// the turn before the bridge does.
    pub fn record_cancel(&mut self, now: Instant, grace: Duration) {
        self.liveness.record_cancel();
        self.cancel_by.get_or_insert(now + grace);
    }

    /// How it ends: `forced` by the bridge, else its first cause, else the daemon's `stop`.
    #[must_use]
    pub fn ending(&self, stop: Option<&StopReason>, forced: Option<TurnStatus>) -> Ending {
        let cause = self.liveness.first_cause();
        let status = TurnStatus::decide(forced, cause, stop);
        Ending {
            status,
            end_cause: cause.map(end_cause_word),
            mark: Mark::of_turn(status, &self.outcomes, self.rejected),
        }
    }
}

/// How a turn ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ending {
    /// The stored status.
    pub status: TurnStatus,
    /// The stored first cause.
    pub end_cause: Option<&'static str>,
    /// The person's message's mark.
    pub mark: Mark,
}

/// A prompt waiting behind the running turn; its inbox entry is marked when its turn starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    /// Who sent it.
    pub user: String,
    /// The prompt.
    pub text: String,
    /// The platform's id of their message (for its marks).
    pub message_id: Option<String>,
    /// Its inbox entry.
    pub event: Option<EventKey>,
    /// Files attached to it (used or explained when its turn starts).
    pub files: Vec<crate::channel::Attachment>,
    /// Sent to steer: the note the agent reads first (see [`super::busy`]).
    pub note: Option<String>,
    /// Messages that arrived later and were merged into it (`collect`, see [`super::busy`]).
    pub merged: Vec<Queued>,
}

/// Prompts waiting behind the running turn, first in first out, at most `cap`.
#[derive(Debug, Default)]
pub struct Queue {
    items: VecDeque<Queued>,
}

impl Queue {
    /// Adds `q` unless `cap` prompts wait already; then `Err` with how many wait.
    ///
    /// # Errors
    /// The queue is full.
    pub fn admit(&mut self, q: Queued, cap: usize) -> Result<(), usize> {
        if self.items.len() >= cap {
            return Err(self.items.len());
        }
        self.items.push_back(q);
        Ok(())
    }

    /// Puts `q` first in line again (a turn that could not start for it).
    pub fn push_front(&mut self, q: Queued) {
        self.items.push_front(q);
    }

    /// Adds a steering `q` ahead of every prompt that does not steer (after those that do, so
    /// steered messages keep their order), unless `cap` prompts wait already.
    ///
    /// # Errors
    /// The queue is full.
    pub fn admit_ahead(&mut self, q: Queued, cap: usize) -> Result<(), usize> {
        if self.items.len() >= cap {
            return Err(self.items.len());
        }
        let at = self.items.iter().take_while(|w| w.steers()).count();
        self.items.insert(at, q);
        Ok(())
    }

    /// Merges `q` into the last waiting prompt (`collect`); gives it back when none waits.
    pub fn merge(&mut self, q: Queued) -> Option<Queued> {
        match self.items.back_mut() {
            Some(last) => {
                last.merged.push(q);
                None
            }
            None => Some(q),
        }
    }

    /// The next prompt.
    pub fn pop(&mut self) -> Option<Queued> {
        self.items.pop_front()
    }

    /// Drops every waiting prompt (`/cancel`), returning them.
    pub fn drain(&mut self) -> Vec<Queued> {
        self.items.drain(..).collect()
    }

    /// How many wait.
    #[must_use]
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Nothing waits.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// The notice a full queue gets, naming the `refused` message by its start (several refused in a
/// row each say which); `unreachable`: nothing runs, the queue holds messages waiting for the agent
/// to come back (L7).
#[must_use]
pub fn queue_full_text(waiting: usize, refused: &str, unreachable: bool) -> String {
    let messages = plural(waiting, "message", "messages");
    let first_line = refused.trim().lines().next().unwrap_or_default();
    let mut named = crate::channel::text::truncate_chars(first_line, REFUSED_SHOWN);
    if named.len() < refused.trim().len() && !named.ends_with('…') {
        named.push('…');
    }
    if unreachable {
        return format!(
            "The agent is unreachable and {waiting} {messages} are already queued; “{named}” was not queued. Send it again once the agent is back, or `/cancel` what is queued."
        );
    }
    format!(
        "The queue is full ({waiting} {messages} waiting for the running turn); “{named}” was not queued. Wait for the turn to finish, or `/cancel` it."
    )
}

/// How many characters of a refused message its notice shows.
const REFUSED_SHOWN: usize = 60;

/// `n` and the noun that fits it.
#[must_use]
pub fn plural(n: usize, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 { one } else { many }
}

/// `/status` while the daemon connection is down says so (L7): what is queued runs when it is back.
#[must_use]
pub fn status_with_outage(mut text: String, daemon_down: bool) -> String {
    if daemon_down {
        text.push_str(
            "
The agent is unreachable; queued messages run when it is back.",
        );
    }
    text
}

/// L3: what the thread is told when a limit fires; a turn taken back after a restart whose end was
/// never seen is closed as interrupted instead (`true`).
#[must_use]
pub fn stall_text(stall: &Stall, resumed: bool) -> (String, bool) {
    if resumed {
        return (
            format!(
                "No word from the agent for {} after the bridge restarted; this turn's end was not seen, so it is marked interrupted and was not re-run. {}",
                human_duration(stall.silent_for),
                super::state::FRESH_SESSION_TEXT
            ),
            true,
        );
    }
    let text = match stall.kind {
        StallKind::Idle => format!(
            "No word from the agent for {} — the turn is still open; `/cancel` stops it.",
            human_duration(stall.silent_for)
        ),
        StallKind::Wall => format!(
            "This turn has run for {}, its time limit — `/cancel` stops it.",
            human_duration(stall.elapsed)
        ),
    };
    (text, false)
}

/// `/status`: idle with the session, or the running turn (`running_for`), its tools and the queue.
#[must_use]
pub fn status_text(
    turn: Option<&TurnState>,
    session: Option<&SessionId>,
    queued: usize,
    running_for: Duration,
    now: Instant,
) -> String {
    let Some(t) = turn else {
        let mut s = format!(
            "Idle. Session: {}.",
            session.map_or("none yet".to_owned(), ToString::to_string)
        );
        // Held during an outage (L7): nothing runs, yet messages wait.
        if queued > 0 {
            let noun = plural(queued, "message", "messages");
            s.push_str(&format!(
                "
{queued} {noun} queued."
            ));
        }
        return s;
    };
    let mut s = format!(
        "A turn is running ({} so far).",
        human_duration(running_for)
    );
    for tool in t.tools.values() {
        let age = tool.last_output.map_or("no output yet".to_owned(), |o| {
            format!(
                "last output {} ago",
                human_duration(now.saturating_duration_since(o))
            )
        });
        s.push_str(&format!(
            "\n• {} — running for {}, {age}",
            tool.title,
            human_duration(now.saturating_duration_since(tool.started))
        ));
    }
    if queued > 0 {
        let noun = if queued == 1 { "message" } else { "messages" };
        s.push_str(&format!("\n{queued} {noun} queued."));
    }
    s
}
