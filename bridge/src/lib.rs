//! chat-bridge: relays a coding-agent daemon into Slack, Discord and console threads.
//!
//! # Layout
//! - [`startup`]: the one start path — `Application::build(config)`, then `run_until_stopped()`.
//! - [`platform`]: the `Platform` trait and the registry of platforms (console, Slack, Discord).
//! - [`config`]: configuration in layers (defaults, file, environment, flags).
//! - [`channel`]: the `Channel` trait, platform-neutral messages, and each platform's folder.
//! - [`core`]: routing, the inbox, access, rendering (R-rules).
//! - [`conversation`]: one conversation as a pure state machine plus the runner that does its I/O.
//! - [`outbox_worker`]: ordered delivery with retry, backoff and dead letters (D1).
//! - [`store`]: persistence on PostgreSQL and SQLite — schema, migrations, one module per table.
//! - [`app`]: the bridge around one channel (store, daemon, core, outbox, HTTP) and its bounded
//!   shutdown.
//! - [`schedules`]: the active replica's scheduler for the threads' `/every` and `/at` prompts.
//! - [`worktree`]: a checkout per thread — git worktrees, run as subprocesses.
//! - [`checkouts`]: the active replica's sweep that removes idle threads' worktrees.
//! - [`clock`]: wall-clock time, injected where tests need to control it.
//! - [`history_cli`]: `chat-bridge history`.
//! - [`http`]: `/healthz`, `/readyz`, `/metrics` and the history API.
//! - [`ui`]: the read-only history pages under `/ui/` (off unless `http.ui = true`).
//! - [`metrics`]: the Prometheus recorder and every metric family, registered at start-up.

pub mod app;
pub mod channel;
pub mod checkouts;
pub mod clock;
pub mod config;
pub mod conversation;
pub mod core;
pub mod history_cli;
pub mod http;
pub mod log_budget;
pub mod metrics;
pub mod outbox_worker;
pub mod platform;
pub mod replica;
pub mod schedules;
pub mod startup;
pub mod store;
pub mod ui;
pub mod worktree;
