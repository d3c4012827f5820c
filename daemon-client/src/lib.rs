//! `daemon-client`: the bridge's only way to talk to an agent daemon.
//!
//! ACP (the Agent Client Protocol) over a WebSocket, as JSON-RPC 2.0 text frames in both directions,
//! or over a child process's stdin/stdout, one JSON-RPC message per line.
//! The layers stack the way the protocol does, and each is testable without the one above:
//! the transport opens the socket, [`wire`] reads frames leniently, [`classify`] turns each frame
//! into exactly one [`DaemonEvent`] (the F-rules of DESIGN.md §2), and [`client`] correlates
//! requests, offers the typed calls and reconnects. [`liveness`] is the per-turn clock (the L-rules)
//! the bridge drives.
//!
//! # Layout
//! - [`ids`]: `SessionId`, `ToolCallId`, `RequestId` — parsed once at the edge.
//! - [`wire`]: borrowed serde types for the envelope and the ACP shapes we read.
//! - [`event`]: `DaemonEvent` and the owned types it carries.
//! - [`classify`]: bytes → `Inbound`, with the per-session F4 state.
//! - `transport`: tungstenite + rustls (ring), bearer auth, frame limits; `Link`, the seam every
//!   transport sits behind.
//! - [`stdio`]: a child agent's newline-delimited JSON-RPC on stdin/stdout, its process group.
//! - [`client`]: `DaemonClient` — JSON-RPC correlation, typed calls, ping/pong, reconnect.
//! - [`liveness`]: idle/wall limits per turn, heartbeat-fed, clock-injected.
//! - `fold`: the heartbeats of one read burst, folded per call before they are handed on.
//! - [`error`]: `Error`, named for what the caller does next.
//! - [`mask`]: URLs with their credentials masked, for logs and errors (S2).
//! - `scan`: the hand-written validating reader of the hot `session/update` frames.
//! - `shape`: the last heartbeat's shape, against which the next ones are checked before a read.

pub mod classify;
pub mod client;
pub mod error;
pub mod event;
mod fold;
pub mod ids;
pub mod liveness;
pub mod mask;
mod scan;
mod shape;
pub mod stdio;
mod transport;
mod warn_budget;
pub mod wire;

pub use classify::{Classifier, ClassifierStats, Inbound};
pub use client::{
    AgentInfo, ClientConfig, ClientStats, DaemonClient, EventStream, NewSession, PermissionPolicy,
    PromptBlock, WorkspaceMismatch,
};
pub use error::Error;
pub use event::{
    DaemonEvent, Outcome, PermissionOption, PermissionOutcome, PermissionRequest, PlanEntry,
    ShellProgress, StopReason, ToolInfo, ToolResult, Usage,
};
pub use ids::{RequestId, SessionId, ToolCallId};
pub use liveness::{EndCause, Liveness, LivenessConfig, Stall, StallKind};
pub use mask::mask_url;
pub use stdio::{AgentCommand, EmptyCommand};
pub use transport::{Token, install_crypto_provider};
