//! chat-bridge: relays a coding-agent daemon into Slack, Discord and console threads.
//!
//! # Layout
//! - [`config`]: configuration in layers (defaults, file, environment, flags).
//! - [`channel`]: the `Channel` trait, platform-neutral messages, and the console channel.
//! - [`core`]: routing, the inbox, access, rendering (R-rules).
//! - [`conversation`]: one conversation as a pure state machine plus the runner that does its I/O.
//! - [`outbox_worker`]: ordered delivery with retry, backoff and dead letters (D1).
//! - [`store`]: persistence on PostgreSQL and SQLite — schema, migrations, one module per table.
//! - [`app`]: wiring it all together; the embedded default.
//! - [`history_cli`]: `chat-bridge history`.
//! - [`http`]: `/healthz`, `/readyz`, `/metrics` and the history API.
//! - [`metrics`]: the Prometheus recorder.

pub mod app;
pub mod channel;
pub mod config;
pub mod conversation;
pub mod core;
pub mod history_cli;
pub mod http;
pub mod metrics;
pub mod outbox_worker;
pub mod replica;
pub mod store;
