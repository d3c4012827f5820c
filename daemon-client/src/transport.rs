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
