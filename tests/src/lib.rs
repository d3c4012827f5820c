//! Support for chat-bridge's end-to-end tests.
//!
//! # Layout
//! - [`scripted`]: a WebSocket daemon driven by a script, for replaying real captures and for frame
//!   sequences the real daemons cannot be made to produce (drops, silences, garbage).
//! - [`bridge`]: a test configuration for the bridge and `settle`.
//! - [`capture`]: reads `../shared/fixtures/acp-qwen-0.24.4/`.
//! - [`fake_slack`]: the Slack Web API, faked over real HTTP.
//! - [`fake_discord`]: Discord's REST API and gateway, faked over real HTTP and WebSocket.
//! - [`discord_twin`]: `discord-digital-twin` (npm, written by others), Discord's REST API and
//!   gateway, run and driven from the tests.
//! - [`db`]: a fresh PostgreSQL database (or SQLite file) per test, and `on_both!`.
//! - [`summary`]: `ToolRun`, the one assertion helper used against every daemon.
//! - [`pg_cluster`]: a throwaway PostgreSQL cluster of the test's own, to stop and start.
//! - [`proxy`]: a TCP proxy that can cut every connection through it (network faults).
//! - [`qwen`]: starts and stops the real qwen-code daemon from `../shared/peers/qwen/`.
//! - [`slack_emulate`]: a Slack Web API written by others (npm `emulate`), started on loopback.
//! - [`rich`]: a daemon that records prompts (images, files) and answers long or in Markdown.

pub mod bridge;
pub mod capture;
pub mod db;
pub mod discord_twin;
pub mod fake_discord;
pub mod fake_slack;
pub mod logs;
pub mod pg_cluster;
pub mod proxy;
pub mod qwen;
pub mod raw;
pub mod recorder;
pub mod rich;
pub mod scripted;
pub mod slack_emulate;
pub mod summary;

use std::path::PathBuf;

/// The `shared/` folder beside the repository (`CHAT_BRIDGE_SHARED_DIR` overrides).
#[must_use]
pub fn shared_dir() -> PathBuf {
    std::env::var_os("CHAT_BRIDGE_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared"))
}

/// A loopback port free at the moment of asking, for a server the test starts by address.
///
/// # Panics
/// When loopback cannot be bound.
#[must_use]
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// Installs a test log subscriber once (respects `RUST_LOG`).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
}

/// Answers every WebSocket handshake on `port` with 401 (a daemon redeployed with another token),
/// counting the attempts; the task serves until it is aborted.
pub async fn refusing_daemon(
    port: u16,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    tokio::task::JoinHandle<()>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("the port is free again");
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = count.clone();
    let task = tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = tcp.read(&mut buf).await;
            let _ = tcp
                .write_all(
                    b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await;
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    (count, task)
}
