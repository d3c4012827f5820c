//! `shell-agent`: the built-in ACP daemon. Each prompt is one shell command, run in a real PTY in
//! the session's working directory, reported as one tool call.
//!
//! It exists so chat-bridge runs on a fresh machine with no agent installed, and so tests have a
//! daemon whose timing they control. It produces the frames the bridge consumes with the same shapes
//! as qwen-code: kind-less `in_progress` heartbeats with `_meta.shellProgress` (H2), and timeouts as
//! `status: failed` with `rawOutput.outcome = "timed_out"` and the partial output (T1).
//!
//! # Layout
//! - [`auth`]: bearer tokens: RFC 7235 scheme matching, constant-time comparison.
//! - [`handshake`]: the `/acp` WebSocket handshake both listeners share (token, path, time limit).
//! - [`host`]: `agent-host` — any stdio ACP agent served over WebSocket `/acp`.
//! - [`server`]: WebSocket `/acp` with a bearer token; JSON-RPC dispatch; the prompt turn.
//! - `session`: sessions outlive connections; history for `session/load`.
//! - [`runner`]: one command in a PTY — output, heartbeats, timeout, cancel (H2, T1–T3).
//! - `output`: bounded output between the PTY thread and the async side (T4).
//! - [`duration`]: `500ms` / `10s` / `2m` parsing and formatting.

pub mod auth;
pub mod duration;
pub mod handshake;
pub mod host;
mod output;
pub mod runner;
pub mod server;
mod session;

pub use duration::{format_duration, parse_duration};
pub use host::{AgentHost, HostError};
pub use server::{AgentConfig, ShellAgent, StartError};

/// The name the agent gives in `initialize`'s `agentInfo`: a bridge that sees it knows the prompt
/// text is run as a command (no speaker labels or notes).
pub const AGENT_NAME: &str = "chat-bridge shell-agent";
