//! One view of a tool run, built from the events any daemon produced, and the assertions every
//! daemon's run must satisfy. The fixture replays, the real qwen daemon and shell-agent all go
//! through [`ToolRun`], so "the same DaemonEvent kinds" is checked by the same code.

use daemon_client::{DaemonEvent, Outcome, StopReason, ToolResult};

/// What happened to the tool calls of one turn.
#[derive(Debug, Default, Clone)]
pub struct ToolRun {
    /// The event names in order, for messages.
    pub names: Vec<&'static str>,
    /// `ToolStarted` events.
    pub started: usize,
    /// Heartbeat events (`ToolProgress`) with their `elapsedMs` (the last one's, when the client
    /// folded several read in one burst).
    pub progress_elapsed: Vec<Option<u64>>,
    /// Heartbeat frames, folded ones counted one by one.
    pub heartbeats: u64,
    /// Live output chunks.
    pub outputs: Vec<String>,
    /// Terminal results.
    pub finished: Vec<ToolResult>,
    /// Events after the first terminal result that claim the tool is still running.
    pub running_after_done: usize,
    /// Late updates ignored (F4).
    pub late: usize,
    /// Malformed frames.
    pub malformed: usize,
    /// Permission requests.
    pub permissions: usize,
    /// How the turn ended.
    pub stop_reason: Option<StopReason>,
}

impl ToolRun {
    /// Summarises `events`.
    #[must_use]
    pub fn of(events: &[DaemonEvent]) -> Self {
        let mut run = Self::default();
        for e in events {
            run.names.push(e.name());
            match e {
                DaemonEvent::ToolStarted { .. } => run.started += 1,
                DaemonEvent::ToolProgress {
                    progress, beats, ..
                } => {
                    run.progress_elapsed.push(progress.elapsed_ms);
                    run.heartbeats += u64::from(*beats);
                    run.running_after_done += usize::from(!run.finished.is_empty());
                }
                DaemonEvent::ToolOutput { text, .. } => {
                    run.outputs.push(text.clone());
                    run.running_after_done += usize::from(!run.finished.is_empty());
                }
                DaemonEvent::ToolFinished { result, .. } => run.finished.push(result.clone()),
                DaemonEvent::LateUpdate { .. } => run.late += 1,
                DaemonEvent::Malformed { .. } => run.malformed += 1,
                DaemonEvent::PermissionRequested(_) => run.permissions += 1,
                DaemonEvent::TurnEnded { stop_reason, .. } => {
                    run.stop_reason = Some(stop_reason.clone())
                }
                _ => {}
            }
        }
        run
    }

    /// The one terminal result.
    ///
    /// # Panics
    /// When there is not exactly one.
    #[must_use]
    pub fn result(&self) -> &ToolResult {
        assert_eq!(
            self.finished.len(),
            1,
            "exactly one terminal result expected: {:?}",
            self.names
        );
        &self.finished[0]
    }

    /// Invariants of every run: no malformed frame, nothing "running" after "done", one start.
    ///
    /// # Panics
    /// On the first broken invariant.
    pub fn assert_well_formed(&self) {
        assert_eq!(self.malformed, 0, "no malformed frames: {:?}", self.names);
        assert_eq!(
            self.running_after_done, 0,
            "nothing running after done (F4/H3): {:?}",
            self.names
        );
        assert_eq!(self.started, 1, "one tool call: {:?}", self.names);
    }

    /// A silent command that outlived at least `heartbeats` intervals and completed with `output`.
    ///
    /// # Panics
    /// When the run does not look like that.
    pub fn assert_silent_completed(&self, heartbeats: usize, output: &str) {
        self.assert_well_formed();
        assert!(
            self.heartbeats >= heartbeats as u64,
            "at least {heartbeats} heartbeats: {:?}",
            self.names
        );
        assert_elapsed_increasing(&self.progress_elapsed);
        let r = self.result();
        assert_eq!(r.outcome, Outcome::Completed, "{r:?}");
        assert_eq!(r.output.trim(), output, "{r:?}");
        assert_eq!(self.stop_reason, Some(StopReason::EndTurn));
    }

    /// A timeout, with the partial output (or none).
    ///
    /// # Panics
    /// When the run does not look like that.
    pub fn assert_timed_out(&self, partial: Option<&str>) {
        self.assert_well_formed();
        let r = self.result();
        assert_eq!(r.outcome, Outcome::TimedOut, "{r:?}");
        assert!(
            r.summary
                .as_deref()
                .is_some_and(|s| s.contains("timed out")),
            "summary says timed out: {r:?}"
        );
        match partial {
            Some(p) => assert_eq!(r.output.trim(), p, "partial output kept: {r:?}"),
            None => assert!(r.output.trim().is_empty(), "no output: {r:?}"),
        }
    }

    /// A cancelled command and a turn that ended `cancelled`.
    ///
    /// # Panics
    /// When the run does not look like that.
    pub fn assert_cancelled(&self) {
        self.assert_well_formed();
        assert_eq!(
            self.result().outcome,
            Outcome::Cancelled,
            "{:?}",
            self.finished
        );
        assert_eq!(self.stop_reason, Some(StopReason::Cancelled));
    }
}

fn assert_elapsed_increasing(elapsed: &[Option<u64>]) {
    let known: Vec<u64> = elapsed.iter().flatten().copied().collect();
    assert!(
        known.windows(2).all(|w| w[0] < w[1]),
        "elapsedMs increases: {known:?}"
    );
}
