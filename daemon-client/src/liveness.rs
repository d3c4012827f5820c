//! Per-turn liveness (the L-rules), driven by the bridge with an injected clock.
//!
//! The lesson behind this module: the timer that binds must be the one heartbeats feed. Every frame
//! of the session (heartbeats included) re-arms the idle limit (L1); while a tool runs, the binding
//! idle limit is the larger of the turn's and the tool's own (L2); the wall limit is never re-armed;
//! the first cause of a turn's end is kept (L3). Nothing here sleeps: the caller asks for
//! [`Liveness::deadline`], sleeps until then on whatever clock it uses (tokio's, paused in tests),
//! and calls [`Liveness::poll`].

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::event::DaemonEvent;
use crate::ids::ToolCallId;

/// Limits for one turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LivenessConfig {
    /// Longest silence allowed between frames of the session (default 120 s).
    pub idle: Duration,
    /// Longest a turn may take in all (default 60 min); never re-armed.
    pub wall: Duration,
    /// Added to a tool's own timeout to form its idle exemption (default 30 s).
    pub tool_grace: Duration,
    /// Per tool-kind idle limits (`execute` → 20 min) that replace timeout + grace for that kind.
    pub kind_overrides: HashMap<String, Duration>,
}

impl Default for LivenessConfig {
    fn default() -> Self {
        Self {
            idle: Duration::from_secs(120),
            wall: Duration::from_secs(60 * 60),
            tool_grace: Duration::from_secs(30),
            kind_overrides: HashMap::new(),
        }
    }
}

/// Which limit fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StallKind {
    /// No frame for the binding idle limit.
    Idle,
    /// The turn ran past its wall limit.
    Wall,
}

/// A limit fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stall {
    /// Which limit.
    pub kind: StallKind,
    /// The limit that was exceeded (the binding idle limit, or the wall limit).
    pub limit: Duration,
    /// How long the session had been silent when it fired.
    pub silent_for: Duration,
    /// How long the turn had been open when it fired.
    pub elapsed: Duration,
}

/// Why a turn ended early, first cause kept (L3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndCause {
    /// A liveness limit fired first.
    Stalled(StallKind),
    /// Somebody cancelled first.
    Cancelled,
}

#[derive(Debug, Clone, Default)]
struct RunningTool {
    kind: Option<String>,
    timeout: Option<Duration>,
}

/// Liveness state of one open turn.
#[derive(Debug, Clone)]
pub struct Liveness {
    cfg: LivenessConfig,
    started: Instant,
    last_frame: Instant,
    idle_fired: bool,
    wall_fired: bool,
    tools: HashMap<ToolCallId, RunningTool>,
    first_cause: Option<EndCause>,
}

impl Liveness {
    /// Starts the clocks of a turn opened at `now`.
    #[must_use]
    pub fn new(cfg: LivenessConfig, now: Instant) -> Self {
        Self {
            cfg,
            started: now,
            last_frame: now,
            idle_fired: false,
            wall_fired: false,
            tools: HashMap::new(),
            first_cause: None,
        }
    }

    /// Feeds one event of this turn's session, received at `now`. Every frame re-arms the idle
    /// limit (L1); tool events adjust the binding limit (L2).
    pub fn observe(&mut self, event: &DaemonEvent, now: Instant) {
        match event {
            DaemonEvent::Disconnected { .. }
            | DaemonEvent::Reconnected { .. }
            | DaemonEvent::Closed { .. } => {
                return;
            }
            DaemonEvent::ToolStarted { call, info, .. }
            | DaemonEvent::ToolUpdated { call, info, .. } => {
                let tool = self.tools.entry(call.clone()).or_default();
                if info.kind.is_some() {
                    tool.kind.clone_from(&info.kind);
                }
                if info.timeout.is_some() {
                    tool.timeout = info.timeout;
                }
            }
            DaemonEvent::ToolProgress { call, progress, .. } => {
                let tool = self.tools.entry(call.clone()).or_default();
                if let Some(ms) = progress.timeout_ms {
                    tool.timeout = Some(Duration::from_millis(ms));
                }
            }
            DaemonEvent::PermissionRequested(req) => {
                // qwen states the command's timeout in the request, before any heartbeat does.
                if let (Some(call), Some(timeout)) = (&req.call, req.info.timeout) {
                    self.tools.entry(call.clone()).or_default().timeout = Some(timeout);
                }
            }
            DaemonEvent::ToolOutput { call, .. } => {
                self.tools.entry(call.clone()).or_default();
            }
            DaemonEvent::ToolFinished { call, .. } => {
                self.tools.remove(call);
            }
            DaemonEvent::TurnEnded { .. } => self.tools.clear(),
            _ => {}
        }
        self.last_frame = now;
        // After the wall limit the turn is over as far as notices go: no idle notice follows it.
        self.idle_fired = self.wall_fired;
    }

    /// The session is silent because the bridge is waiting, not the daemon (a person is deciding on
    /// an approval the daemon asked for): the idle limit starts again from `now`. The wall limit is
    /// never re-armed (L1).
    pub fn hold(&mut self, now: Instant) {
        if now > self.last_frame {
            self.last_frame = now;
        }
        self.idle_fired = self.wall_fired;
    }

    /// The idle limit that binds now: the turn's, or a running tool's exemption if larger (L2).
    #[must_use]
    pub fn binding_idle(&self) -> Duration {
        self.tools
            .values()
            .filter_map(|t| {
                t.kind
                    .as_ref()
                    .and_then(|k| self.cfg.kind_overrides.get(k).copied())
                    .or_else(|| t.timeout.map(|d| d.saturating_add(self.cfg.tool_grace)))
            })
            .fold(self.cfg.idle, Duration::max)
    }

    /// Number of tools this turn believes are running.
    #[must_use]
    pub fn running_tools(&self) -> usize {
        self.tools.len()
    }

    /// The next instant at which [`poll`](Self::poll) may report a stall; `None` once every limit
    /// has fired.
    #[must_use]
    pub fn deadline(&self) -> Option<Instant> {
        let idle = (!self.idle_fired).then(|| self.last_frame + self.binding_idle());
        let wall = (!self.wall_fired).then(|| self.started + self.cfg.wall);
        match (idle, wall) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Reports a limit that has passed by `now`, once per silence for idle and once for wall.
    pub fn poll(&mut self, now: Instant) -> Option<Stall> {
        let silent_for = now.saturating_duration_since(self.last_frame);
        let elapsed = now.saturating_duration_since(self.started);
        let stall = if !self.wall_fired && elapsed >= self.cfg.wall {
            self.wall_fired = true;
            self.idle_fired = true;
            Stall {
                kind: StallKind::Wall,
                limit: self.cfg.wall,
                silent_for,
                elapsed,
            }
        } else if !self.idle_fired && silent_for >= self.binding_idle() {
            self.idle_fired = true;
            Stall {
                kind: StallKind::Idle,
                limit: self.binding_idle(),
                silent_for,
                elapsed,
            }
        } else {
            return None;
        };
        self.first_cause
            .get_or_insert(EndCause::Stalled(stall.kind));
        Some(stall)
    }

    /// Records that the turn was cancelled; a stall recorded earlier stays the cause (L3).
    pub fn record_cancel(&mut self) {
        self.first_cause.get_or_insert(EndCause::Cancelled);
    }

    /// The first reason this turn ended early, if any.
    #[must_use]
    pub fn first_cause(&self) -> Option<EndCause> {
        self.first_cause
    }

    /// Whether a limit has fired during this turn.
    #[must_use]
    pub fn is_stalled(&self) -> bool {
        matches!(self.first_cause, Some(EndCause::Stalled(_)))
    }
}

/// Formats a duration the way the thread shows it: `2m 0s`, `45s`, `1h 3m`, `850ms`.
#[must_use]
pub fn human_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs == 0 {
        return format!("{}ms", d.as_millis());
    }
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    if h > 0 {
        format!("{h}h {m}m")
    } else if m > 0 {
        format!("{m}m {s}s")
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests;
