//! One conversation: a state machine over its events, and the one runner that touches the store
//! and the daemon.
//!
//! A message, a daemon event, a click, the prompt call's completion or a timer reaches the
//! conversation's runner, in order. The runner hands it to [`state::State::handle`] as an
//! [`Event`] — the decision is pure, with `now` given — and carries out the [`Effect`]s it returns:
//! it reads what they need, writes each state change and its chat actions in one transaction (D1),
//! and calls the daemon.
//!
//! # Layout (one module per rule family)
//! - [`state`]: the conversation's state and its decisions on daemon events, timers and the
//!   daemon connection (F1, F4, L1–L3, L5, L7).
//! - [`event`]: the [`Event`]s, and the words — [`TurnStatus`], [`ToolOutcome`], [`Mark`] — mapped
//!   to the store's in one place.
//! - [`commands`]: what a message means (`/new`, `/cancel`, `/status`, `/history`, `/help`,
//!   `/invite`, `/uninvite`, a numbered answer, a prompt).
//! - [`context`]: mention etiquette — what was said in a thread without mentioning the bot, as
//!   context for its next prompt.
//! - [`busy`]: steer or queue — a prompt that arrives while a turn runs (`turns.while_busy`).
//! - [`turn`]: a turn, its queue, its end and first cause (T2), the stall and status texts.
//! - [`tools`]: running tool calls and the progress line (L5, F1).
//! - [`approvals`]: permission requests, options offered, expiry (R6, A3).
//! - [`effects`]: each [`Effect`]; the chat actions and their outbox rows (D1).
//! - [`files`]: files people attach: images for the agent, files saved for it, refusals and why.
//! - [`inbox`]: which inbox entries a commit marks handled (D2, S4).
//! - [`late`]: work that arrives later — updates with no turn open, posted rate-limited.
//! - [`replay`]: frames a `session/load` replays — history, never live output (L6); a resumed
//!   turn's own prompt and what followed it (D6).
//! - [`schedule`]: what `/every` and `/at` mean, and when a schedule runs next.
//! - [`speaker`]: who said what — the `[name]` a prompt carries to the agent, names looked up once.
//! - `runner`: the loop and every read, write and daemon call.

pub mod approvals;
pub mod busy;
pub mod commands;
pub mod context;
pub mod effects;
pub mod event;
pub mod files;
pub mod inbox;
pub mod late;
pub mod replay;
pub(crate) mod runner;
pub mod schedule;
pub mod speaker;
pub mod state;
pub mod tools;
pub mod turn;

#[cfg(test)]
mod tests;

pub use effects::Effect;
pub use event::{Event, Mark, ToolOutcome, TurnStatus};
