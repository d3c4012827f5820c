//! The WebSocket transport: the only module that touches tungstenite and rustls.
//!
//! Opens `ws://` or `wss://` with `Authorization: Bearer`, a frame-size limit, and maps handshake
//! failures to [`Error`] variants a caller can act on (a 401 is fatal, a refused TCP connect is not).

use std::fmt;
use std::sync::Once;
use std::time::Duration;

use http::HeaderValue;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, tungstenite};

use crate::error::Error;

/// An open connection to the daemon.
pub(crate) type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A bearer token: never printed by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// Wraps a secret.
    #[must_use]
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into())
    }

    /// The secret, for the one place that sends it.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Installs ring as rustls' one crypto provider, once per process.
///
/// Mixing providers makes `ClientConfig::builder()` panic at the first `wss://`; the workspace builds
/// rustls with ring only, and this makes the choice explicit before any TLS is set up.
pub fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // An error only means another part of the process installed one first; that one is used.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Connects and completes the WebSocket handshake.
pub(crate) async fn connect(
    url: &str,
    token: Option<&Token>,
    max_frame_size: usize,
    timeout: Duration,
) -> Result<Ws, Error> {
    install_crypto_provider();
    let bad_url = |reason: String| Error::BadUrl {
        url: crate::mask::mask_url(url),
        reason,
    };
    if !(url.starts_with("ws://") || url.starts_with("wss://")) {
        return Err(bad_url("it must start with ws:// or wss://".into()));
    }
    let mut request = url
        .into_client_request()
        .map_err(|e| bad_url(e.to_string()))?;
    if let Some(token) = token {
        let value = HeaderValue::from_str(&format!("Bearer {}", token.expose()))
            .map_err(|_| bad_url("the token contains characters not allowed in a header".into()))?;
        request
            .headers_mut()
            .insert(http::header::AUTHORIZATION, value);
    }
    let config = WebSocketConfig::default()
        .max_message_size(Some(max_frame_size))
        .max_frame_size(Some(max_frame_size));
    let handshake = tokio_tungstenite::connect_async_with_config(request, Some(config), true);
    match tokio::time::timeout(timeout, handshake).await {
        Err(_) => Err(Error::Unreachable {
            url: crate::mask::mask_url(url),
            reason: format!("no handshake within {timeout:?}"),
        }),
        Ok(Ok((ws, _response))) => Ok(ws),
        Ok(Err(tungstenite::Error::Http(response))) => {
            let status = response.status().as_u16();
            if status == 401 || status == 403 {
                Err(Error::Unauthorized {
                    url: crate::mask::mask_url(url),
                    status,
                    key: "daemon".into(),
                })
            } else {
                Err(Error::Unreachable {
                    url: crate::mask::mask_url(url),
                    reason: format!("HTTP {status} during the handshake"),
                })
            }
        }
        Ok(Err(tungstenite::Error::Url(e))) => Err(bad_url(e.to_string())),
        Ok(Err(e)) => Err(Error::Unreachable {
            url: crate::mask::mask_url(url),
            reason: e.to_string(),
        }),
    }
}

/// One open connection to an agent, whichever way it is reached: the seam below JSON-RPC. The
/// client's connection loop speaks only to this, so correlation, classification, liveness and
/// reconnect are one code path for every transport.
pub(crate) enum Link {
    /// A WebSocket to a daemon's `/acp`.
    Ws(Box<Ws>),
    /// A child process speaking newline-delimited JSON-RPC on stdio.
    Stdio(Box<crate::stdio::StdioLink>),
}

/// One inbound event of a [`Link`].
pub(crate) enum Incoming {
    /// A WebSocket text or binary frame.
    Message(tungstenite::Message),
    /// One line from a child's stdout.
    Line(Vec<u8>),
    /// Nothing for the layers above (a ping, a skipped oversized line).
    Nothing,
    /// The answer to our ping.
    Pong,
    /// The link ended; why.
    Ended(String),
    /// The daemon sent a frame over the size limit (`max_frame_size`); why. The connection cannot
    /// be read past it: it is closed with 1009, "message too big", so the daemon's side sees why.
    TooBig(String),
}

/// The JSON-RPC frame an [`Incoming`] carries, as the classifier takes it.
pub(crate) enum Frame<'a> {
    /// A WebSocket text frame: UTF-8, which the transport checked.
    Text(&'a str),
    /// A binary frame or a line from a child: bytes the classifier checks.
    Bytes(&'a [u8]),
}

impl Incoming {
    /// The JSON-RPC frame this carries, if any.
    pub(crate) fn frame(&self) -> Option<Frame<'_>> {
        match self {
            Self::Message(tungstenite::Message::Text(t)) => Some(Frame::Text(t.as_str())),
            Self::Message(tungstenite::Message::Binary(b)) => Some(Frame::Bytes(b)),
            Self::Line(l) => Some(Frame::Bytes(l)),
            _ => None,
        }
    }
}

impl Link {
    /// Whether the link is pinged (L4). A child's liveness is its process: it ends with its stdout.
    pub(crate) fn pings(&self) -> bool {
        matches!(self, Self::Ws(_))
    }

    /// Whether losing this link loses the agent's running turns (a child that exited took them
    /// with it), rather than only our view of them (a daemon across a network keeps running).
    pub(crate) fn is_child(&self) -> bool {
        matches!(self, Self::Stdio(_))
    }

    pub(crate) async fn send(&mut self, text: String) -> Result<(), String> {
        match self {
            Self::Ws(ws) => {
                use futures_util::SinkExt;
                ws.send(tungstenite::Message::text(text))
                    .await
                    .map_err(|e| format!("send failed: {e}"))
            }
            Self::Stdio(child) => child.send(&text).await,
        }
    }

    pub(crate) async fn ping(&mut self) -> Result<(), String> {
        match self {
            Self::Ws(ws) => {
                use futures_util::SinkExt;
                ws.send(tungstenite::Message::Ping(Vec::new().into()))
                    .await
                    .map_err(|e| format!("ping failed: {e}"))
            }
            Self::Stdio(_) => Ok(()),
        }
    }

    /// The next inbound event; cancel-safe.
    pub(crate) async fn next(&mut self) -> Incoming {
        use tungstenite::Message;
        match self {
            Self::Ws(ws) => {
                use futures_util::StreamExt;
                match ws.next().await {
                    Some(Ok(m @ (Message::Text(_) | Message::Binary(_)))) => Incoming::Message(m),
                    Some(Ok(Message::Pong(_))) => Incoming::Pong,
                    Some(Ok(Message::Ping(_) | Message::Frame(_))) => Incoming::Nothing,
                    Some(Ok(Message::Close(frame))) => Incoming::Ended(match frame {
                        Some(f) => format!(
                            "the daemon closed the connection ({}: {})",
                            f.code, f.reason
                        ),
                        None => "the daemon closed the connection".into(),
                    }),
                    Some(Err(tungstenite::Error::Capacity(e))) => Incoming::TooBig(format!(
                        "the daemon sent a frame over the size limit ({e}); closed with 1009"
                    )),
                    Some(Err(e)) => Incoming::Ended(format!("connection error: {e}")),
                    None => Incoming::Ended("the connection ended".into()),
                }
            }
            Self::Stdio(child) => match child.recv().await {
                crate::stdio::Read::Line(l) if l.iter().all(u8::is_ascii_whitespace) => {
                    Incoming::Nothing
                }
                crate::stdio::Read::Line(l) => Incoming::Line(l),
                crate::stdio::Read::TooLong(n) => {
                    tracing::warn!(
                        bytes = n,
                        "a line from the agent longer than the frame limit was skipped"
                    );
                    Incoming::Nothing
                }
                crate::stdio::Read::Ended(why) => Incoming::Ended(why),
            },
        }
    }

    /// Ends a WebSocket link with 1009, "message too big" (a child's link as [`Link::close`]).
    pub(crate) async fn close_too_big(&mut self) {
        match self {
            Self::Ws(ws) => {
                use tungstenite::protocol::CloseFrame;
                use tungstenite::protocol::frame::coding::CloseCode;
                let _ = ws
                    .close(Some(CloseFrame {
                        code: CloseCode::Size,
                        reason: "a frame over the bridge's size limit".into(),
                    }))
                    .await;
            }
            Self::Stdio(child) => child.close().await,
        }
    }

    /// Ends the link: a WebSocket close, or the child and its process group ended and reaped.
    pub(crate) async fn close(&mut self) {
        match self {
            Self::Ws(ws) => {
                let _ = ws.close(None).await;
            }
            Self::Stdio(child) => child.close().await,
        }
    }
}
