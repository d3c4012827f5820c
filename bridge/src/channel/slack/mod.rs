//! Slack: the Web API over HTTPS (posting, editing, reactions, ephemeral replies), Block Kit rendering
//! within Slack's limits, and request-signature verification for the HTTP Events API mode.
//!
//! # Layout
//! - [`api`]: the Web API client; `ok:false` and 429 `Retry-After` become typed errors.
//! - [`blocks`]: platform-neutral messages → Block Kit, split to fit Slack's limits.
//! - [`signature`]: `v0` request signatures (HMAC-SHA256, constant-time, 5-minute window).

pub mod api;
pub mod blocks;
pub mod signature;
