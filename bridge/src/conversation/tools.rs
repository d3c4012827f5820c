//! The tool calls of the running turn and their progress line (L5): when a line is due, what it
//! says, and when heartbeat counts are handed to the store. Heartbeats never create a message of
//! their own (F1): they feed the counts and the line's output age. Pure, with `now` given.

use std::collections::HashMap;
use std::time::Duration;

use daemon_client::{ShellProgress, ToolCallId};
use tokio::time::Instant;

/// One running tool call.
#[derive(Debug, Clone)]
pub struct ToolState {
    /// Its title (the command, for a shell).
    pub title: String,
    /// When the bridge saw it start.
    pub started: Instant,
    /// When it last printed something.
    pub last_output: Option<Instant>,
    /// When the progress line was last shown.
    pub progress_shown: Option<Instant>,
    /// Heartbeats not yet handed to the store.
    pub unflushed: i64,
    /// The latest progress a heartbeat carried.
    pub progress: Option<ShellProgress>,
    /// Heartbeats seen in all (for the live view).
    pub heartbeats: u64,
    /// When the last one arrived.
    pub last_heartbeat: Option<Instant>,
    /// When the counts were last handed to the store.
    pub flushed: Instant,
    /// The stored id of the approval it waits for: it is not running yet, so it shows no
    /// "running for …" line (R6).
    pub awaiting_approval: Option<String>,
    /// Its stored id (`tool_calls.id`, the tool call's page), once the row is written.
    pub stored_id: Option<String>,
    /// Whether an edit of its message may still wait in the outbox (a new title, a progress
    /// line, or a call followed again after a restart): its result then replaces that edit;
    /// otherwise the result's edit is simply queued, without looking for one (P2).
    pub edits_queued: bool,
    /// Its result came in a replay (`session/load` after a restart): it ended while the bridge
    /// was away, at a time nobody here saw, so its result shows no duration.
    pub ended_unseen: bool,
}

impl ToolState {
    /// A call that started at `now`.
    #[must_use]
    pub fn new(title: String, now: Instant) -> Self {
        Self {
            title,
            started: now,
            last_output: None,
            progress_shown: None,
            unflushed: 0,
            progress: None,
            heartbeats: 0,
            last_heartbeat: None,
            flushed: now,
            awaiting_approval: None,
            stored_id: None,
            edits_queued: false,
            ended_unseen: false,
        }
    }

    /// How long it ran, now that its result came; `None` when it ended unseen (its result shows
    /// no duration).
    #[must_use]
    pub fn took(&self) -> Option<std::time::Duration> {
        (!self.ended_unseen).then(|| self.started.elapsed())
    }

    /// The latest progress, as stored.
    #[must_use]
    pub fn progress_json(&self) -> Option<String> {
        self.progress.and_then(|p| serde_json::to_string(&p).ok())
    }

    /// `beats` heartbeats (F1) at `now`, the last carrying `progress`: counted, the progress kept;
    /// nothing is shown for them.
    pub fn heartbeat(&mut self, progress: ShellProgress, beats: u32, now: Instant) {
        self.unflushed += i64::from(beats);
        self.heartbeats += u64::from(beats);
        self.last_heartbeat = Some(now);
        self.progress = Some(progress);
    }

    /// When its progress line is next due.
    #[must_use]
    pub fn line_due(&self, after: Duration, every: Duration) -> Instant {
        match self.progress_shown {
            Some(shown) => shown + every,
            None => self.started + after,
        }
    }

    /// L5: when a line is due at `now` — running past `after`, and not shown within `every` — marks
    /// it shown and returns (elapsed, last-output age) for it.
    pub fn progress_line(
        &mut self,
        now: Instant,
        after: Duration,
        every: Duration,
    ) -> Option<(Duration, Option<Duration>)> {
        if self.awaiting_approval.is_some() {
            return None;
        }
        let elapsed = now.saturating_duration_since(self.started);
        let due = elapsed >= after
            && self
                .progress_shown
                .is_none_or(|s| now.saturating_duration_since(s) >= every);
        if !due {
            return None;
        }
        self.progress_shown = Some(now);
        let age = self
            .progress
            .and_then(|p| p.last_output_age_ms.map(Duration::from_millis))
            .or_else(|| self.last_output.map(|o| now.saturating_duration_since(o)));
        Some((elapsed, age))
    }

    /// Whether its counts are due for the store at `now` (or `force`d, at the turn's end).
    #[must_use]
    pub fn flush_due(&self, now: Instant, every: Duration, force: bool) -> bool {
        self.unflushed > 0 && (force || now.saturating_duration_since(self.flushed) >= every)
    }

    /// Its counts were handed over at `now`.
    pub fn flushed_at(&mut self, now: Instant) {
        self.unflushed = 0;
        self.flushed = now;
    }
}

/// The running tool calls of a turn.
pub type Tools = HashMap<ToolCallId, ToolState>;

/// The earliest progress-line deadline among `tools`.
#[must_use]
pub fn next_line_due(tools: &Tools, after: Duration, every: Duration) -> Option<Instant> {
    tools
        .values()
        .filter(|t| t.awaiting_approval.is_none())
        .map(|t| t.line_due(after, every))
        .min()
}
