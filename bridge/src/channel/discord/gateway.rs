//! The Discord gateway connection: our own loop over one WebSocket (HELLO → IDENTIFY or RESUME →
//! READY/RESUMED → dispatches, heartbeats and their ACKs), supervised, with every wait bounded.
//!
//! serenity's shard runner is not used: after a close frame that carries no status code (a gateway
//! that stops, a proxy or load balancer) serenity 0.12.5 waits for a close reply in a loop that
//! never ends, spinning a core, and never returns on shutdown. This loop returns from every
//! connection on a close frame, on the end of the stream, on a missing heartbeat ACK, and on
//! `stop`, and each send, connect and handshake has a deadline.
//!
//! # What `connected` means
//! The channel is connected only between a READY or RESUMED dispatch and the next disconnect (a
//! close frame, the socket ending, a heartbeat not ACKed before the next one is due, a RESUME not
//! answered within [`Timing::establish`], or shutdown). Connecting, resuming and backing off are
//! "not connected". `/readyz` reads exactly this flag.
//!
//! # Reconnecting
//! A lost connection is resumed (RESUME with the session and the last sequence number, at the
//! session's `resume_gateway_url`); when Discord says the session is invalid (op 9 with `false`,
//! close codes 4007 and 4009) or a RESUME is not answered in time, a new session is identified.
//! Attempts are spaced by an exponential backoff from [`Timing::backoff_min`] to
//! [`Timing::backoff_max`] (with jitter), reset once a session is up again. Close codes that no
//! retry can fix (4004 a refused token, 4010–4013, 4014 disallowed intents) end the gateway with an
//! error in words for the operator.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use serenity::all::Http;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message as Frame;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_util::sync::CancellationToken;

use super::State;

/// The deadlines and backoff of the gateway loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// TCP + WebSocket handshake.
    pub connect: Duration,
    /// HELLO after the handshake.
    pub hello: Duration,
    /// READY after IDENTIFY.
    pub ready: Duration,
    /// RESUMED after RESUME (then the session is given up and a new one identified).
    pub establish: Duration,
    /// Any one frame we send (a stuck socket is a lost connection).
    pub send: Duration,
    /// Our close frame on shutdown.
    pub close: Duration,
    /// The first wait before reconnecting.
    pub backoff_min: Duration,
    /// The longest wait between attempts.
    pub backoff_max: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(10),
            hello: Duration::from_secs(10),
            ready: Duration::from_secs(15),
            establish: Duration::from_secs(5),
            send: Duration::from_secs(5),
            close: Duration::from_secs(1),
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(30),
        }
    }
}

/// A dispatch the bridge acts on, parsed.
#[derive(Debug)]
pub(super) enum Event {
    /// READY: who we are.
    Ready {
        user: serenity::all::UserId,
        application: Option<serenity::all::ApplicationId>,
    },
    /// MESSAGE_CREATE.
    Message(Box<serenity::model::channel::Message>),
    /// INTERACTION_CREATE.
    Interaction(Box<serenity::all::Interaction>),
}

/// A gateway session that can be resumed.
#[derive(Debug, Clone)]
struct Session {
    id: String,
    resume_url: String,
}

/// How one connection ended.
#[derive(Debug)]
enum End {
    /// `stop` was cancelled.
    Stop,
    /// Lost; reconnect after the backoff. `established`: READY or RESUMED was seen on it.
    Lost { established: bool },
    /// A close code no retry can fix.
    Fatal(anyhow::Error),
}

/// The gateway loop's state across connections.
pub(super) struct Connection {
    pub(super) http: Arc<Http>,
    pub(super) state: Arc<State>,
    pub(super) url: String,
    pub(super) timing: Timing,
    pub(super) events: tokio::sync::mpsc::UnboundedSender<Event>,
    session: Option<Session>,
    seq: Option<u64>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("Connection")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// `url` with the version and encoding Discord wants.
fn with_query(url: &str) -> String {
    let base = url.split('?').next().unwrap_or(url).trim_end_matches('/');
    format!("{base}/?v=10&encoding=json")
}

/// A duration scaled by a random factor in [0.5, 1.0] (spreads reconnects and the first beat).
fn jitter(d: Duration) -> Duration {
    d.mul_f64(rand::random_range(0.5..=1.0))
}

/// The words for a close code that ends the gateway for good, if it is one.
fn fatal_close(code: u16) -> Option<anyhow::Error> {
    let why = match code {
        4004 => "Discord refused the bot token; check CHAT_BRIDGE_DISCORD__TOKEN".to_owned(),
        4014 => "Discord refused the MESSAGE_CONTENT intent: switch on \"Message Content Intent\" for the bot in the developer portal".to_owned(),
        4010..=4013 => format!(
            "the Discord gateway refused the connection for good (close code {code}: invalid shard, sharding required, API version or intents)"
        ),
        _ => return None,
    };
    Some(anyhow::anyhow!(why))
}

impl Connection {
    pub(super) fn new(
        http: Arc<Http>,
        state: Arc<State>,
        url: String,
        timing: Timing,
        events: tokio::sync::mpsc::UnboundedSender<Event>,
    ) -> Self {
        Self {
            http,
            state,
            url,
            timing,
            events,
            session: None,
            seq: None,
        }
    }

    fn set_connected(&self, up: bool) {
        let was = self.state.connected.swap(up, Ordering::SeqCst);
        if was && !up {
            tracing::warn!("Discord gateway disconnected; reconnecting");
        }
    }

    /// Connects, and reconnects with backoff, until `stop` or a fatal close code.
    ///
    /// # Errors
    /// A close code no retry can fix, in words for the operator.
    pub(super) async fn run(mut self, stop: CancellationToken) -> anyhow::Result<()> {
        daemon_client::install_crypto_provider();
        let mut backoff = self.timing.backoff_min;
        loop {
            let end = self.connection(&stop).await;
            self.set_connected(false);
            match end {
                End::Stop => return Ok(()),
                End::Fatal(e) => return Err(e),
                End::Lost { established } => {
                    if established {
                        backoff = self.timing.backoff_min;
                    }
                    let wait = jitter(backoff);
                    tracing::info!(
                        wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                        resume = self.session.is_some(),
                        "Discord gateway: reconnecting after a pause"
                    );
                    tokio::select! {
                        () = stop.cancelled() => return Ok(()),
                        () = tokio::time::sleep(wait) => {}
                    }
                    backoff = (backoff * 2).min(self.timing.backoff_max);
                }
            }
        }
    }

    /// One connection, from the handshake to its end.
    #[allow(clippy::too_many_lines)]
    async fn connection(&mut self, stop: &CancellationToken) -> End {
        let url = with_query(
            self.session
                .as_ref()
                .map_or(self.url.as_str(), |s| s.resume_url.as_str()),
        );
        let ws = tokio::select! {
            () = stop.cancelled() => return End::Stop,
            r = tokio::time::timeout(self.timing.connect, tokio_tungstenite::connect_async(url.as_str())) => match r {
                Ok(Ok((ws, _))) => ws,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "could not connect to the Discord gateway");
                    return End::Lost { established: false };
                }
                Err(_) => {
                    tracing::warn!("connecting to the Discord gateway timed out");
                    return End::Lost { established: false };
                }
            },
        };
        let (mut sink, mut stream) = ws.split();
        let timing = self.timing;
        let mut established = false;
        macro_rules! send {
            ($v:expr) => {
                match tokio::time::timeout(timing.send, sink.send(Frame::text($v.to_string())))
                    .await
                {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "Discord gateway: send failed");
                        return End::Lost { established };
                    }
                    Err(_) => {
                        tracing::warn!("Discord gateway: a send did not complete in time");
                        return End::Lost { established };
                    }
                }
            };
        }
        // HELLO.
        let hello = tokio::select! {
            () = stop.cancelled() => return End::Stop,
            r = tokio::time::timeout(timing.hello, stream.next()) => r,
        };
        let interval = match hello {
            Ok(Some(Ok(Frame::Text(t)))) => serde_json::from_str::<Value>(&t)
                .ok()
                .filter(|v| v["op"] == 10)
                .and_then(|v| v["d"]["heartbeat_interval"].as_u64())
                .filter(|ms| *ms > 0),
            _ => None,
        };
        let Some(interval) = interval.map(Duration::from_millis) else {
            tracing::warn!("the Discord gateway did not say HELLO in time");
            return End::Lost { established: false };
        };
        // IDENTIFY, or RESUME the session we had.
        let token = self.http.token().to_owned();
        let wait = if self.session.is_some() {
            timing.establish
        } else {
            timing.ready
        };
        if let Some(session) = &self.session {
            tracing::info!("Discord gateway: resuming the session");
            send!(
                json!({"op": 6, "d": {"token": token, "session_id": session.id, "seq": self.seq}})
            );
        } else {
            self.seq = None;
            send!(json!({"op": 2, "d": {
                "token": token,
                "intents": super::intents().bits(),
                "properties": {"os": std::env::consts::OS, "browser": "chat-bridge", "device": "chat-bridge"},
            }}));
        }
        let mut establish_by = Some(Instant::now() + wait);
        let mut next_beat = Instant::now() + jitter(interval);
        let mut acked = true;
        loop {
            let deadline = establish_by.unwrap_or_else(|| Instant::now() + interval * 4);
            tokio::select! {
                () = stop.cancelled() => {
                    let close = Frame::Close(Some(CloseFrame { code: CloseCode::Normal, reason: "shutting down".into() }));
                    let _ = tokio::time::timeout(timing.close, sink.send(close)).await;
                    return End::Stop;
                }
                () = tokio::time::sleep_until(next_beat) => {
                    if !acked {
                        tracing::warn!("Discord gateway: no heartbeat ACK; the connection is dead");
                        return End::Lost { established };
                    }
                    send!(json!({"op": 1, "d": self.seq}));
                    acked = false;
                    next_beat = Instant::now() + interval;
                }
                () = tokio::time::sleep_until(deadline), if establish_by.is_some() => {
                    if self.session.take().is_some() {
                        tracing::warn!("Discord gateway: RESUME not answered in time; starting a new session");
                    } else {
                        tracing::warn!("Discord gateway: no READY in time after IDENTIFY");
                    }
                    return End::Lost { established };
                }
                frame = stream.next() => {
                    let text = match frame {
                        Some(Ok(Frame::Text(t))) => t,
                        Some(Ok(Frame::Close(close))) => {
                            let code = close.as_ref().map(|c| u16::from(c.code));
                            tracing::warn!(code = ?code, "the Discord gateway closed the connection");
                            if let Some(code) = code {
                                if let Some(e) = fatal_close(code) {
                                    return End::Fatal(e);
                                }
                                if matches!(code, 4007 | 4009) {
                                    self.session = None;
                                }
                            }
                            return End::Lost { established };
                        }
                        Some(Ok(_)) => continue,
                        Some(Err(e)) => {
                            tracing::warn!(error = %e, "the Discord gateway connection failed");
                            return End::Lost { established };
                        }
                        None => {
                            tracing::warn!("the Discord gateway connection ended");
                            return End::Lost { established };
                        }
                    };
                    let Ok(v) = serde_json::from_str::<Value>(&text) else {
                        tracing::debug!("Discord gateway: a frame that is not JSON ignored");
                        continue;
                    };
                    match v["op"].as_u64() {
                        Some(0) => {
                            if let Some(s) = v["s"].as_u64() {
                                self.seq = Some(s);
                            }
                            match v["t"].as_str() {
                                Some("READY") => {
                                    self.on_ready(&v["d"]);
                                    establish_by = None;
                                    established = true;
                                }
                                Some("RESUMED") => {
                                    self.set_connected(true);
                                    tracing::info!("Discord gateway session resumed");
                                    establish_by = None;
                                    established = true;
                                }
                                Some(t) => self.on_dispatch(t, v["d"].clone()),
                                None => {}
                            }
                        }
                        // The gateway asks for a beat now.
                        Some(1) => send!(json!({"op": 1, "d": self.seq})),
                        Some(7) => {
                            tracing::info!("Discord gateway asked us to reconnect");
                            return End::Lost { established };
                        }
                        Some(9) => {
                            if v["d"] != true {
                                self.session = None;
                            }
                            tracing::info!("Discord gateway: invalid session");
                            return End::Lost { established };
                        }
                        Some(11) => acked = true,
                        _ => {}
                    }
                }
            }
        }
    }

    fn on_ready(&mut self, d: &Value) {
        let session = d["session_id"].as_str().map(|id| Session {
            id: id.to_owned(),
            resume_url: d["resume_gateway_url"]
                .as_str()
                .map_or_else(|| self.url.clone(), str::to_owned),
        });
        self.session = session;
        let user = d["user"]["id"]
            .as_str()
            .and_then(|s| s.parse::<u64>().ok())
            .filter(|n| *n != 0)
            .map(serenity::all::UserId::new);
        let application = d["application"]["id"]
            .as_str()
            .and_then(|s| s.parse::<u64>().ok())
            .filter(|n| *n != 0)
            .map(serenity::all::ApplicationId::new);
        match user {
            Some(user) => {
                let _ = self.events.send(Event::Ready { user, application });
                self.set_connected(true);
                tracing::info!(user = %user, "connected to the Discord gateway");
            }
            None => tracing::warn!("Discord READY without our user id; ignored"),
        }
    }

    fn on_dispatch(&self, t: &str, d: Value) {
        tracing::debug!(event = t, seq = ?self.seq, "Discord dispatch");
        let event = match t {
            "MESSAGE_CREATE" => serde_json::from_value(d).map(|m| Event::Message(Box::new(m))),
            "INTERACTION_CREATE" => {
                serde_json::from_value(d).map(|i| Event::Interaction(Box::new(i)))
            }
            _ => return,
        };
        match event {
            Ok(event) => {
                let _ = self.events.send(event);
            }
            Err(e) => {
                tracing::warn!(event = t, error = %e, "a Discord dispatch we could not read; ignored")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateway_url_gets_version_and_encoding_once() {
        for (url, want) in [
            (
                "wss://gateway.discord.gg",
                "wss://gateway.discord.gg/?v=10&encoding=json",
            ),
            (
                "wss://gateway.discord.gg/",
                "wss://gateway.discord.gg/?v=10&encoding=json",
            ),
            (
                "ws://127.0.0.1:9/gateway",
                "ws://127.0.0.1:9/gateway/?v=10&encoding=json",
            ),
            (
                "ws://127.0.0.1:9/gateway?v=9",
                "ws://127.0.0.1:9/gateway/?v=10&encoding=json",
            ),
        ] {
            assert_eq!(with_query(url), want, "{url}");
        }
    }

    #[test]
    fn only_the_close_codes_no_retry_can_fix_are_fatal() {
        for code in [4004, 4010, 4011, 4012, 4013, 4014] {
            assert!(fatal_close(code).is_some(), "{code}");
        }
        for code in [
            1000, 1001, 1006, 4000, 4001, 4002, 4003, 4005, 4007, 4008, 4009,
        ] {
            assert!(fatal_close(code).is_none(), "{code}");
        }
        let words = format!("{}", fatal_close(4004).expect("fatal"));
        assert!(words.contains("CHAT_BRIDGE_DISCORD__TOKEN"), "{words}");
    }
}
