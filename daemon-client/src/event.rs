//! The closed set of things the daemon can tell the bridge: [`DaemonEvent`].
//!
//! Every inbound frame becomes exactly one event (F1–F6); connection changes are events too, so the
//! bridge has one `match` to write. Types here are owned and cheap to clone; they are built from the
//! borrowed wire types in [`crate::wire`] by [`crate::classify`].

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::ids::{RequestId, SessionId, ToolCallId};

/// One classified inbound frame or connection change.
#[derive(Debug, Clone, PartialEq)]
pub enum DaemonEvent {
    /// A chunk of the agent's answer.
    AgentText {
        /// Session the text belongs to.
        session: SessionId,
        /// The text, possibly a fragment of a longer answer.
        text: String,
    },
    /// A chunk of a person's prompt as the daemon holds it (`user_message_chunk`): a load's replay
    /// says with it which prompts reached the daemon (D6).
    UserText {
        /// Session the prompt belongs to.
        session: SessionId,
        /// The text.
        text: String,
    },
    /// A chunk of the agent's visible reasoning.
    Thought {
        /// Session the thought belongs to.
        session: SessionId,
        /// The text.
        text: String,
    },
    /// Token usage reported as an empty-text chunk with `_meta.usage` (F6).
    Usage {
        /// Session the usage belongs to.
        session: SessionId,
        /// The figures the daemon reported.
        usage: Usage,
    },
    /// A tool call began (`tool_call`).
    ToolStarted {
        /// Session of the call.
        session: SessionId,
        /// The call.
        call: ToolCallId,
        /// What the call looks like to a person.
        info: ToolInfo,
    },
    /// A non-terminal update that changes how the call looks (title, kind, input) without output.
    ToolUpdated {
        /// Session of the call.
        session: SessionId,
        /// The call.
        call: ToolCallId,
        /// The fields the update carried.
        info: ToolInfo,
    },
    /// A heartbeat: the tool is alive (F1). Never a chat message of its own.
    ToolProgress {
        /// Session of the call.
        session: SessionId,
        /// The call.
        call: ToolCallId,
        /// Parsed `_meta.shellProgress`, or empty when the heartbeat carried none; of the last
        /// one when several are folded into this event.
        progress: ShellProgress,
        /// How many heartbeat frames this event stands for: 1, or more when the connection read
        /// several of the call's heartbeats in one burst and folded them (F1).
        beats: u32,
    },
    /// Live output of a running tool (kind-less `in_progress` update with content).
    ToolOutput {
        /// Session of the call.
        session: SessionId,
        /// The call.
        call: ToolCallId,
        /// The new output text.
        text: String,
    },
    /// The tool call reached a terminal state (F3).
    ToolFinished {
        /// Session of the call.
        session: SessionId,
        /// The call.
        call: ToolCallId,
        /// How it ended and what it produced.
        result: ToolResult,
    },
    /// An update for a call that is already terminal; ignored and counted (F4).
    LateUpdate {
        /// Session of the call.
        session: SessionId,
        /// The call.
        call: ToolCallId,
    },
    /// The agent's plan.
    Plan {
        /// Session of the plan.
        session: SessionId,
        /// The plan's entries, in order.
        entries: Vec<PlanEntry>,
    },
    /// The daemon asks whether a tool call may run (`session/request_permission`).
    PermissionRequested(PermissionRequest),
    /// A prompt turn ended (the `session/prompt` response).
    TurnEnded {
        /// Session whose turn ended.
        session: SessionId,
        /// Why it ended.
        stop_reason: StopReason,
    },
    /// Anything well-formed we do not act on: unknown update kinds, unknown methods, echoes (F5).
    Other {
        /// Session, when the frame named one.
        session: Option<SessionId>,
        /// The JSON-RPC method, or `session/update` for update kinds.
        method: String,
        /// The `sessionUpdate` kind or vendor `kind`, when there was one.
        kind: Option<String>,
        /// The stop reason a vendor `turn_complete` names (`cancelled` when the daemon stopped the
        /// prompt itself, e.g. as the connection that sent it closed).
        stop_reason: Option<StopReason>,
    },
    /// A frame that could not be understood (F2). Logged, counted and skipped.
    Malformed {
        /// Session, when it could be read from the frame.
        session: Option<SessionId>,
        /// What was wrong, without the frame's content.
        reason: String,
    },
    /// A frame the daemon sent while replaying a session's history after `session/load` (L6): history,
    /// never live output. The consumer may still use a replayed update for a tool call it knows is
    /// running (a command that ended while the connection was down); everything else is ignored.
    Replayed {
        /// Session being replayed.
        session: SessionId,
        /// The frame as it would have been classified live.
        event: Box<DaemonEvent>,
    },
    /// The history a `session/load` replayed is over (L6): every replayed frame of `session` came
    /// before this event, every frame after it is live. Sent in frame order — after the load's
    /// answer (shell-agent, the ACP reference agents) or the daemon's `replay_complete` marker
    /// (qwen-code) — so a consumer can judge the whole replay, e.g. whether it showed a prompt (D6).
    ReplayEnded {
        /// Session whose replay ended.
        session: SessionId,
    },
    /// The connection to the daemon dropped; the client is reconnecting.
    Disconnected {
        /// Why, in words for the operator.
        reason: String,
    },
    /// The client reconnected and re-initialised; sessions with open turns were reloaded.
    Reconnected {
        /// Sessions `session/load` restored.
        resumed: Vec<SessionId>,
        /// Sessions the daemon no longer knows, with its error message.
        lost: Vec<(SessionId, String)>,
    },
    /// The client gave up: the daemon refused the credentials, or shutdown was requested.
    Closed {
        /// Why, in words for the operator.
        reason: String,
    },
}

impl DaemonEvent {
    /// The session this event belongs to, if any.
    #[must_use]
    pub fn session(&self) -> Option<&SessionId> {
        match self {
            Self::AgentText { session, .. }
            | Self::Thought { session, .. }
            | Self::UserText { session, .. }
            | Self::Usage { session, .. }
            | Self::ToolStarted { session, .. }
            | Self::ToolUpdated { session, .. }
            | Self::ToolProgress { session, .. }
            | Self::ToolOutput { session, .. }
            | Self::ToolFinished { session, .. }
            | Self::LateUpdate { session, .. }
            | Self::Plan { session, .. }
            | Self::TurnEnded { session, .. }
            | Self::Replayed { session, .. }
            | Self::ReplayEnded { session } => Some(session),
            Self::PermissionRequested(p) => Some(&p.session),
            Self::Other { session, .. } | Self::Malformed { session, .. } => session.as_ref(),
            Self::Disconnected { .. } | Self::Reconnected { .. } | Self::Closed { .. } => None,
        }
    }

    /// Every value [`DaemonEvent::name`] can return, for metrics registered before the first event.
    pub const NAMES: &'static [&'static str] = &[
        "agent_text",
        "thought",
        "usage",
        "tool_started",
        "tool_updated",
        "tool_progress",
        "tool_output",
        "tool_finished",
        "late_update",
        "plan",
        "permission_requested",
        "turn_ended",
        "other",
        "malformed",
        "replayed",
        "replay_ended",
        "disconnected",
        "reconnected",
        "closed",
    ];

    /// A short, stable name for metrics and logs (never user text).
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::AgentText { .. } => "agent_text",
            Self::Thought { .. } => "thought",
            Self::UserText { .. } => "user_text",
            Self::Usage { .. } => "usage",
            Self::ToolStarted { .. } => "tool_started",
            Self::ToolUpdated { .. } => "tool_updated",
            Self::ToolProgress { .. } => "tool_progress",
            Self::ToolOutput { .. } => "tool_output",
            Self::ToolFinished { .. } => "tool_finished",
            Self::LateUpdate { .. } => "late_update",
            Self::Plan { .. } => "plan",
            Self::PermissionRequested(_) => "permission_requested",
            Self::TurnEnded { .. } => "turn_ended",
            Self::Other { .. } => "other",
            Self::Malformed { .. } => "malformed",
            Self::Replayed { .. } => "replayed",
            Self::ReplayEnded { .. } => "replay_ended",
            Self::Disconnected { .. } => "disconnected",
            Self::Reconnected { .. } => "reconnected",
            Self::Closed { .. } => "closed",
        }
    }
}

/// How a tool call looks to a person, as far as the frame told us.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolInfo {
    /// `title`, else `_meta.toolName`, else `"tool"` (F2). `None` on updates that carried neither.
    pub title: Option<String>,
    /// ACP tool kind (`execute`, `edit`, …), when given.
    pub kind: Option<String>,
    /// `_meta.toolName` (qwen: `run_shell_command`).
    pub tool_name: Option<String>,
    /// The tool's own timeout, from `rawInput.timeout` (ms), when given.
    pub timeout: Option<Duration>,
}

/// Live progress from a heartbeat's `_meta.shellProgress`; every field optional.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShellProgress {
    /// Time since the command started, in ms.
    #[serde(default)]
    pub elapsed_ms: Option<u64>,
    /// Time since the command last printed, in ms.
    #[serde(default)]
    pub last_output_age_ms: Option<u64>,
    /// Lines printed so far.
    #[serde(default)]
    pub total_lines: Option<u64>,
    /// Bytes printed so far.
    #[serde(default)]
    pub total_bytes: Option<u64>,
    /// The command's timeout, in ms.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// The terminal outcome of a tool call (F3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// `status: completed`.
    Completed,
    /// `status: failed` for any reason other than the two below.
    Failed,
    /// `status: failed` with `rawOutput.outcome == "timed_out"` or an `execution_timeout` error.
    TimedOut,
    /// `status: failed` with `rawOutput.outcome == "cancelled"`.
    Cancelled,
}

impl Outcome {
    /// Stable lower-case name (`completed`, `failed`, `timed_out`, `cancelled`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::TimedOut => "timed_out",
            Self::Cancelled => "cancelled",
        }
    }
}

/// What a finished tool call produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    /// How it ended.
    pub outcome: Outcome,
    /// The short summary: the first content text, if any.
    pub summary: Option<String>,
    /// The output: `rawOutput.output`, else the content text.
    pub output: String,
    /// Exit code, when reported.
    pub exit_code: Option<i64>,
    /// Signal number, when reported.
    pub signal: Option<i64>,
}

/// One entry of the agent's plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanEntry {
    /// What the step is.
    #[serde(default)]
    pub content: String,
    /// `pending`, `in_progress`, `completed`.
    #[serde(default)]
    pub status: String,
    /// `high`, `medium`, `low`.
    #[serde(default)]
    pub priority: String,
}

/// Token usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Prompt tokens.
    #[serde(default)]
    pub input_tokens: Option<u64>,
    /// Completion tokens.
    #[serde(default)]
    pub output_tokens: Option<u64>,
    /// Both.
    #[serde(default)]
    pub total_tokens: Option<u64>,
}

/// A `session/request_permission` request awaiting an answer.
#[derive(Debug, Clone, PartialEq)]
pub struct PermissionRequest {
    /// The JSON-RPC id the answer must carry.
    pub request_id: RequestId,
    /// Session asking.
    pub session: SessionId,
    /// The tool call in question, when the request named one.
    pub call: Option<ToolCallId>,
    /// How the call looks.
    pub info: ToolInfo,
    /// The choices offered, in the daemon's order.
    pub options: Vec<PermissionOption>,
    /// The tool call's parameters (`rawInput`, e.g. qwen's `{command, timeout, description}`),
    /// when the request carried them as JSON.
    pub input: Option<serde_json::Value>,
}

/// One choice of a permission request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionOption {
    /// What to send back.
    pub option_id: String,
    /// Words for the button.
    #[serde(default)]
    pub name: String,
    /// `allow_once`, `allow_always`, `reject_once`, `reject_always`.
    #[serde(default)]
    pub kind: String,
}

/// The answer to a permission request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermissionOutcome {
    /// One of the offered options was chosen.
    Selected(String),
    /// Nobody chose (expired, turn cancelled).
    Cancelled,
}

/// Why a prompt turn ended (`stopReason`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StopReason {
    /// The agent finished.
    EndTurn,
    /// The turn was cancelled.
    Cancelled,
    /// Token limit.
    MaxTokens,
    /// Turn request limit.
    MaxTurnRequests,
    /// The agent refused.
    Refusal,
    /// A reason this version does not know.
    Other(String),
}

impl StopReason {
    /// Parses the wire string.
    #[must_use]
    pub fn from_wire(s: &str) -> Self {
        match s {
            "end_turn" => Self::EndTurn,
            "cancelled" => Self::Cancelled,
            "max_tokens" => Self::MaxTokens,
            "max_turn_requests" => Self::MaxTurnRequests,
            "refusal" => Self::Refusal,
            other => Self::Other(other.to_owned()),
        }
    }

    /// The wire string.
    #[must_use]
    pub fn as_str(&self) -> &str {
        match self {
            Self::EndTurn => "end_turn",
            Self::Cancelled => "cancelled",
            Self::MaxTokens => "max_tokens",
            Self::MaxTurnRequests => "max_turn_requests",
            Self::Refusal => "refusal",
            Self::Other(s) => s,
        }
    }
}
