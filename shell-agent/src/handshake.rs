//! The `/acp` WebSocket handshake every listener of this crate shares (the shell agent's and
//! `agent-host`'s): the bearer token first — without it nothing about the server, not even its
//! paths, answers — then the path, within a time limit so a client that opens the port and never
//! finishes its handshake cannot hold a connection (S1).

use std::time::Duration;

use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

/// How long a client may take to complete the handshake, unless the listener says otherwise.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts one client on `/acp` carrying `Authorization: Bearer <expected>`, with frames and
/// messages capped at `max_frame` bytes. Refusals answer 401 (token) or 404 (path); the error
/// returned says why, for the listener's log, and never holds the token.
pub async fn accept_acp(
    tcp: TcpStream,
    expected: &str,
    max_frame: usize,
    within: Duration,
) -> Result<WebSocketStream<TcpStream>, String> {
    // Updates are small frames written as they happen: with Nagle's algorithm on, one could wait for
    // the client's delayed ACK (40 ms on Linux) behind another (the P2 bench saw exactly that).
    let _ = tcp.set_nodelay(true);
    let expected = expected.to_owned();
    // The handshake callback's signature is tungstenite's; its error type is large by design.
    #[allow(clippy::result_large_err)]
    let check = move |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        let refuse = |status: http::StatusCode, why: &str| {
            let mut e = ErrorResponse::new(Some(why.to_owned()));
            *e.status_mut() = status;
            e
        };
        let auth = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if !crate::auth::bearer_matches(auth, &expected) {
            return Err(refuse(
                http::StatusCode::UNAUTHORIZED,
                "missing or wrong bearer token",
            ));
        }
        if req.uri().path() != "/acp" {
            return Err(refuse(
                http::StatusCode::NOT_FOUND,
                "the ACP endpoint is /acp",
            ));
        }
        Ok(resp)
    };
    let config = WebSocketConfig::default()
        .max_message_size(Some(max_frame))
        .max_frame_size(Some(max_frame));
    let handshake = tokio_tungstenite::accept_hdr_async_with_config(tcp, check, Some(config));
    tokio::time::timeout(within, handshake)
        .await
        .map_err(|_| "no WebSocket handshake in time".to_owned())?
        .map_err(|e| e.to_string())
}
