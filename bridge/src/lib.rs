//! chat-bridge: relays a coding-agent daemon into Slack, Discord and console threads.
//!
//! # Layout
//! - [`store`]: persistence on PostgreSQL and SQLite — schema, migrations, one module per table.

pub mod store;
