//! Unit tests of the conversation state machine: a hand-moved clock and counted ids, no socket, no
//! database, no real time. Each test is named after the rule it proves.

mod approvals;
mod busy;
mod commands;
mod effects;
mod handle;
mod inbox;
mod late;
mod outage;
mod replay;
mod schedule;
mod speaker;
mod state;
mod tools;
mod turn;

use std::time::Duration;

use daemon_client::{
    DaemonEvent, LivenessConfig, Outcome, PermissionOption, PermissionRequest, RequestId,
    SessionId, ShellProgress, StopReason, ToolCallId, ToolInfo, ToolResult,
};
use tokio::time::Instant;

use super::approvals::Pending;
use super::state::State;
use super::turn::TurnState;
use crate::core::CoreConfig;
use crate::store::turns::Turn;

/// A clock the test moves by hand.
pub(super) struct Clock {
    now: Instant,
}

impl Clock {
    pub(super) fn new() -> Self {
        Self {
            now: Instant::now(),
        }
    }

    pub(super) fn now(&self) -> Instant {
        self.now
    }

    pub(super) fn advance(&mut self, d: Duration) -> Instant {
        self.now += d;
        self.now
    }
}

pub(super) fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Settings with the documented defaults' shape, small enough to read.
pub(super) fn cfg() -> CoreConfig {
    CoreConfig {
        liveness: LivenessConfig {
            idle: secs(120),
            wall: secs(3600),
            ..LivenessConfig::default()
        },
        progress_after: secs(15),
        progress_every: secs(30),
        progress_flush: secs(10),
        queue_cap: 2,
        permission_timeout: secs(600),
        ..CoreConfig::default()
    }
}

pub(super) fn session() -> SessionId {
    SessionId::parse("s1").expect("id")
}

pub(super) fn call(n: u32) -> ToolCallId {
    ToolCallId::parse(&format!("call-{n}")).expect("id")
}

pub(super) fn row(id: &str, requested_by: &str) -> Turn {
    Turn {
        id: id.to_owned(),
        conversation_id: "c1".to_owned(),
        seq: 1,
        prompt: "echo hi".to_owned(),
        requested_by: requested_by.to_owned(),
        status: "open".to_owned(),
        stop_reason: None,
        end_cause: None,
        answer: None,
        started_at: 0,
        ended_at: None,
        message_id: None,
    }
}

/// A conversation with session `s1` and a turn asked by `alice`, started at `clock.now()`.
pub(super) fn running(clock: &Clock, cfg: &CoreConfig) -> State {
    let mut s = State::new(Some(session()));
    s.session_ready = true;
    s.turn = Some(TurnState::new(
        row("t1", "alice"),
        cfg.liveness.clone(),
        clock.now(),
        false,
        1,
    ));
    s
}

pub(super) fn info(title: &str) -> ToolInfo {
    ToolInfo {
        title: Some(title.to_owned()),
        kind: Some("execute".to_owned()),
        ..ToolInfo::default()
    }
}

pub(super) fn started(n: u32, title: &str) -> DaemonEvent {
    DaemonEvent::ToolStarted {
        session: session(),
        call: call(n),
        info: info(title),
    }
}

pub(super) fn heartbeat(n: u32, progress: ShellProgress) -> DaemonEvent {
    DaemonEvent::ToolProgress {
        session: session(),
        call: call(n),
        progress,
        beats: 1,
    }
}

pub(super) fn output(n: u32) -> DaemonEvent {
    DaemonEvent::ToolOutput {
        session: session(),
        call: call(n),
        text: "line\n".to_owned(),
    }
}

pub(super) fn result(outcome: Outcome) -> ToolResult {
    ToolResult {
        outcome,
        summary: None,
        output: String::new(),
        exit_code: None,
        signal: None,
    }
}

pub(super) fn text(t: &str) -> DaemonEvent {
    DaemonEvent::AgentText {
        session: session(),
        text: t.to_owned(),
    }
}

pub(super) fn ended(stop: StopReason) -> DaemonEvent {
    DaemonEvent::TurnEnded {
        session: session(),
        stop_reason: stop,
    }
}

pub(super) fn option(id: &str, kind: &str) -> PermissionOption {
    PermissionOption {
        option_id: id.to_owned(),
        name: format!("{id} label"),
        kind: kind.to_owned(),
    }
}

/// The three options qwen offers.
/// Request `id`, asked by alice, waiting until `expires`.
pub(super) fn pending(id: &str, expires: Instant) -> Pending {
    Pending {
        db_id: id.to_owned(),
        request_id: RequestId::from(7),
        title: "rm -rf build".to_owned(),
        options: options(),
        requester: "alice".to_owned(),
        expires,
        detail: None,
    }
}

pub(super) fn options() -> Vec<PermissionOption> {
    vec![
        option("proceed_once", "allow_once"),
        option("proceed_always", "allow_always"),
        option("cancel", "reject_once"),
    ]
}

pub(super) fn request(n: i64) -> PermissionRequest {
    PermissionRequest {
        request_id: RequestId::from(n),
        session: session(),
        call: Some(call(1)),
        info: info("rm -rf build"),
        options: options(),
        input: None,
    }
}
