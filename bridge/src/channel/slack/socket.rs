//! The Socket Mode connection: `apps.connections.open` for a fresh URL, then every envelope is handed
//! on and acknowledged by its `envelope_id` once the bridge has recorded it in its inbox — before any
//! agent work, within milliseconds — so a crash between Slack's delivery and the record leaves the
//! envelope unacknowledged and Slack delivers it again. Envelopes with nothing to record (hello,
//! ignored events) are acknowledged at once. A `disconnect` (refresh, link disabled, warning), a closed
//! socket or an error opens a new connection; Slack redelivers anything that was not acknowledged, so
//! nothing is lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use super::api::{SlackToken, WebApi};
use super::events::{self, Access, Decision};
use crate::channel::Arrival;

/// Runs Socket Mode until `stop`, sending inbound messages to `sink`.
pub async fn run(
    api: WebApi,
    app_token: SlackToken,
    me: String,
    access: Access,
    sink: mpsc::Sender<Arrival>,
    stop: CancellationToken,
    connected: Arc<AtomicBool>,
) {
    let mut attempt = 0u32;
    connected.store(false, Ordering::SeqCst);
    loop {
        if stop.is_cancelled() {
            return;
        }
        let ended = connection(&api, &app_token, &me, &access, &sink, &stop, &connected).await;
        connected.store(false, Ordering::SeqCst);
        match ended {
            Ok(reason) => {
                tracing::info!(%reason, "Slack Socket Mode connection ended; reconnecting");
                attempt = 0;
            }
            Err(e) => {
                attempt = attempt.saturating_add(1);
                tracing::warn!(error = %e, attempt, "Slack Socket Mode connection failed");
            }
        }
        let delay = daemon_client::client::backoff_delay(
            Duration::from_millis(200),
            Duration::from_secs(30),
            attempt,
        );
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

async fn connection(
    api: &WebApi,
    app_token: &SlackToken,
    me: &str,
    access: &Access,
    sink: &mpsc::Sender<Arrival>,
    stop: &CancellationToken,
    connected: &AtomicBool,
) -> Result<String, String> {
    let url = api
        .connections_open(app_token)
        .await
        .map_err(|e| e.to_string())?;
    // No Nagle: acknowledgements are small frames Slack wants within 3 s, each on its own.
    let (mut ws, _) = tokio_tungstenite::connect_async_with_config(url.as_str(), None, true)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    // Acknowledgements of recorded envelopes, sent from this loop (the socket's only writer). They
    // belong to this connection: one whose record finishes after a reconnect is not acknowledged,
    // and Slack's redelivery is deduplicated.
    let (ack_tx, mut acks) = mpsc::unbounded_channel::<String>();
    loop {
        let frame = tokio::select! {
            () = stop.cancelled() => {
                let _ = ws.close(None).await;
                return Ok("shutting down".into());
            }
            Some(id) = acks.recv() => {
                ws.send(ack(&id)).await.map_err(|e| format!("ack: {e}"))?;
                continue;
            }
            f = ws.next() => f,
        };
        let text = match frame {
            Some(Ok(Message::Text(t))) => t,
            Some(Ok(Message::Close(_))) | None => return Ok("closed by Slack".into()),
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(format!("socket: {e}")),
        };
        let Ok(envelope) = serde_json::from_str::<Value>(&text) else {
            tracing::warn!("unreadable Socket Mode frame skipped");
            continue;
        };
        let id = events::ack_id(&envelope).map(str::to_owned);
        match events::decide(&envelope, me, access) {
            Decision::Inbound(m) => {
                let (arrival, recorded) = Arrival::acknowledged(m);
                if sink.send(arrival).await.is_err() {
                    return Ok("shutting down".into());
                }
                if let Some(id) = id {
                    // Slack expects the acknowledgement within 3 s; the record takes milliseconds.
                    // Not recorded (the database is down, or the bridge stops first): never
                    // acknowledged, so Slack delivers it again.
                    let ack_tx = ack_tx.clone();
                    tokio::spawn(async move {
                        if recorded.await.is_ok() {
                            let _ = ack_tx.send(id);
                        }
                    });
                }
                continue;
            }
            decision => {
                // Counted before the acknowledgement, so whoever sees the ack sees the count.
                if let Decision::Refused(why) = decision {
                    crate::metrics::access_refused("slack");
                    tracing::debug!(why, "Slack envelope refused");
                }
                if let Some(id) = id {
                    ws.send(ack(&id)).await.map_err(|e| format!("ack: {e}"))?;
                }
                match decision {
                    Decision::Hello => {
                        connected.store(true, Ordering::SeqCst);
                        tracing::info!("Slack Socket Mode connected");
                    }
                    Decision::Disconnect(reason) => return Ok(format!("disconnect: {reason}")),
                    Decision::Ignore(why) => tracing::debug!(why, "Slack envelope ignored"),
                    Decision::Refused(_) | Decision::Inbound(_) => {}
                }
            }
        }
    }
}

fn ack(envelope_id: &str) -> Message {
    Message::text(json!({ "envelope_id": envelope_id }).to_string())
}
