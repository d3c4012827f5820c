//! A fake Discord: the REST endpoints the bridge uses, as a real HTTP server on loopback that
//! records every request (method, path, `Authorization`, JSON body) and answers with real-shaped
//! objects — or a scripted error, or a 429 with `Retry-After` and Discord's rate-limit body; and the
//! gateway as a real WebSocket server speaking the real opcodes: HELLO (10), IDENTIFY (2), READY,
//! HEARTBEAT (1) / HEARTBEAT_ACK (11), RESUME (6) with the missed dispatches replayed then RESUMED,
//! INVALID_SESSION (9), and DISPATCH (0) of what the test pushes. It records every frame the bridge
//! sends. Threads created from a message take the message's id, as on Discord.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// The guild every test message is in.
pub const GUILD: &str = "111";
/// The text channel people mention the bot in.
pub const CHANNEL: &str = "222";
/// The bot's user and application id.
pub const BOT: &str = "900";
/// The bot token the tests configure.
pub const TOKEN: &str = "fake-discord-token";

/// One recorded REST request.
#[derive(Debug, Clone)]
pub struct Request {
    /// `POST`, `PATCH`, …
    pub method: String,
    /// The path after `/api/v10`, e.g. `/channels/222/messages`.
    pub path: String,
    /// The `Authorization` header.
    pub auth: String,
    /// The JSON body (`Null` when none).
    pub body: Value,
    /// When it arrived.
    pub at: std::time::Instant,
}

/// A scripted answer for the next request whose `METHOD /path` starts with a prefix.
#[derive(Debug, Clone)]
pub enum Reply {
    /// 429 with `Retry-After` and Discord's body.
    RateLimited(f64),
    /// An error status with Discord's JSON error `code`.
    Error(u16, u32, &'static str),
}

#[derive(Debug, Default)]
struct Gateway {
    /// The current session, once identified.
    session: Option<String>,
    /// Every dispatch of the session with its sequence number.
    log: Vec<(u64, Value)>,
    /// The connection should be closed (code 4000) before sending anything else.
    kick: bool,
}

#[derive(Debug, Default)]
struct Inner {
    requests: Mutex<Vec<Request>>,
    script: Mutex<Vec<(String, Reply)>>,
    next_id: AtomicU64,
    /// Message id → (channel id, message JSON).
    messages: Mutex<HashMap<String, (String, Value)>>,
    /// Thread ids → parent channel.
    threads: Mutex<HashMap<String, String>>,
    gateway_url: Mutex<String>,
    gateway: Mutex<Gateway>,
    pushed: tokio::sync::Notify,
    frames: Mutex<Vec<Value>>,
    connections: AtomicU64,
    heartbeat_ms: AtomicU64,
    sent_ids: Mutex<HashSet<String>>,
    /// Files served under `/attachments/…` (its CDN): uploaded by the bot or hosted by a test.
    files: Mutex<HashMap<String, Vec<u8>>>,
}

/// The running fake.
#[derive(Debug)]
pub struct FakeDiscord {
    /// Base URL to give the bridge as `discord.api_base_url`.
    pub base_url: String,
    inner: Arc<Inner>,
    task: JoinHandle<()>,
}

/// A user object.
#[must_use]
pub fn user(id: &str, name: &str, bot: bool) -> Value {
    json!({"id": id, "username": name, "discriminator": "0", "global_name": name, "avatar": null,
           "bot": bot, "public_flags": 0, "flags": 0})
}

/// A message object as the REST API and the gateway carry it.
#[must_use]
pub fn message(id: &str, channel: &str, author: &Value, content: &str) -> Value {
    json!({
        "id": id, "channel_id": channel, "author": author, "content": content,
        "timestamp": "2026-11-29T10:00:00.000000+00:00", "edited_timestamp": null,
        "tts": false, "mention_everyone": false, "mentions": [], "mention_roles": [],
        "attachments": [], "embeds": [], "components": [], "pinned": false, "type": 0, "flags": 0,
    })
}

fn member(roles: &[&str]) -> Value {
    json!({"roles": roles, "joined_at": "2026-01-01T00:00:00.000000+00:00", "deaf": false,
           "mute": false, "flags": 0, "pending": false, "nick": null, "premium_since": null})
}

/// A `MESSAGE_CREATE` from person `user` in `channel` (a guild channel or a thread).
#[must_use]
pub fn person_message(
    id: &str,
    channel: &str,
    user_id: &str,
    content: &str,
    mentions_bot: bool,
) -> Value {
    let mut m = message(
        id,
        channel,
        &user(user_id, &format!("user{user_id}"), false),
        content,
    );
    m["guild_id"] = json!(GUILD);
    m["member"] = member(&[]);
    if mentions_bot {
        m["mentions"] = json!([user(BOT, "chat-bridge", true)]);
    }
    m
}

fn thread_json(id: &str, parent: &str, name: &str) -> Value {
    json!({
        "id": id, "type": 11, "guild_id": GUILD, "parent_id": parent, "name": name, "owner_id": BOT,
        "last_message_id": null, "rate_limit_per_user": 0, "message_count": 0, "member_count": 1,
        "total_message_sent": 0, "flags": 0,
        "thread_metadata": {"archived": false, "auto_archive_duration": 1440,
                            "archive_timestamp": "2026-11-29T10:00:00.000000+00:00", "locked": false},
    })
}

fn error(status: u16, code: u32, message: &str) -> Response {
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
        axum::Json(json!({"code": code, "message": message})),
    )
        .into_response()
}

/// The parts of a `multipart/form-data` body: (name, filename, bytes).
fn multipart(content_type: &str, body: &[u8]) -> Vec<(String, Option<String>, Vec<u8>)> {
    let Some(boundary) = content_type.split("boundary=").nth(1) else {
        return Vec::new();
    };
    let delimiter = format!("--{}", boundary.trim_matches('"'));
    let find = |hay: &[u8], needle: &[u8], from: usize| {
        (from..=hay.len().saturating_sub(needle.len())).find(|&i| hay[i..].starts_with(needle))
    };
    let mut parts = Vec::new();
    let mut at = find(body, delimiter.as_bytes(), 0);
    while let Some(start) = at {
        let content_start = start + delimiter.len();
        let Some(end) = find(body, delimiter.as_bytes(), content_start) else {
            break;
        };
        let part = &body[content_start..end];
        if let Some(split) = find(part, b"\r\n\r\n", 0) {
            let head = String::from_utf8_lossy(&part[..split]).to_string();
            let mut data = &part[split + 4..];
            if data.ends_with(b"\r\n") {
                data = &data[..data.len() - 2];
            }
            let attr = |key: &str| {
                head.lines()
                    .filter(|l| l.to_ascii_lowercase().starts_with("content-disposition"))
                    .flat_map(|l| l.split(';'))
                    .map(str::trim)
                    .find_map(|kv| kv.strip_prefix(&format!("{key}=\"")))
                    .and_then(|v| v.split('"').next())
                    .map(str::to_owned)
            };
            if let Some(name) = attr("name") {
                parts.push((name, attr("filename"), data.to_vec()));
            }
        }
        at = Some(end);
    }
    parts
}

async fn rest(
    State(inner): State<Arc<Inner>>,
    method: Method,
    Path(path): Path<String>,
    headers: HeaderMap,
    raw: axum::body::Bytes,
) -> Response {
    let path = format!("/{path}");
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    // A message with files comes as multipart: its JSON in `payload_json`, each file in `files[n]`.
    let mut uploads = Vec::new();
    let body: Value = if content_type.starts_with("multipart/form-data") {
        let mut json = Value::Null;
        for (name, filename, data) in multipart(content_type, &raw) {
            if name == "payload_json" {
                json = serde_json::from_slice(&data).unwrap_or(Value::Null);
            } else if let Some(filename) = filename {
                uploads.push((filename, data));
            }
        }
        json
    } else {
        serde_json::from_slice(&raw).unwrap_or(Value::Null)
    };
    inner.requests.lock().expect("lock").push(Request {
        method: method.to_string(),
        path: path.clone(),
        auth: auth.clone(),
        body: body.clone(),
        at: std::time::Instant::now(),
    });
    if auth != format!("Bot {TOKEN}")
        && !path.starts_with("/interactions/")
        && !path.starts_with("/webhooks/")
    {
        return error(401, 0, "401: Unauthorized");
    }
    let line = format!("{method} {path}");
    let scripted = {
        let mut script = inner.script.lock().expect("lock");
        script
            .iter()
            .position(|(prefix, _)| line.starts_with(prefix.as_str()))
            .map(|i| script.remove(i).1)
    };
    match scripted {
        Some(Reply::RateLimited(secs)) => {
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [
                    ("retry-after", format!("{secs}")),
                    ("x-ratelimit-scope", "user".to_owned()),
                ],
                axum::Json(json!({"message": "You are being rate limited.", "retry_after": secs, "global": false})),
            )
                .into_response();
        }
        Some(Reply::Error(status, code, message)) => return error(status, code, message),
        None => {}
    }
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let bot = user(BOT, "chat-bridge", true);
    match (method.as_str(), parts.as_slice()) {
        ("GET", ["gateway"]) => axum::Json(json!({"url": inner.gateway_url.lock().expect("lock").clone()})).into_response(),
        ("GET", ["gateway", "bot"]) => axum::Json(json!({
            "url": inner.gateway_url.lock().expect("lock").clone(), "shards": 1,
            "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 14_400_000, "max_concurrency": 1},
        }))
        .into_response(),
        ("GET", ["users", "@me"]) => axum::Json(bot).into_response(),
        ("GET", ["channels", id]) => match inner.threads.lock().expect("lock").get(*id) {
            Some(parent) => axum::Json(thread_json(id, parent, "thread")).into_response(),
            None => error(404, 10003, "Unknown Channel"),
        },
        ("POST", ["channels", ch, "messages", mid, "threads"]) => {
            let mut threads = inner.threads.lock().expect("lock");
            if threads.contains_key(*ch) {
                return error(400, 50024, "Cannot execute action on this channel type");
            }
            if threads.contains_key(*mid) {
                return error(400, 160_004, "A thread has already been created for this message");
            }
            threads.insert((*mid).to_owned(), (*ch).to_owned());
            let name = body["name"].as_str().unwrap_or("");
            axum::Json(thread_json(mid, ch, name)).into_response()
        }
        ("POST", ["channels", ch, "messages"]) => {
            if body["enforce_nonce"] == true
                && let Some(nonce) = body["nonce"].as_str()
                && let Some((_, m)) = inner
                    .messages
                    .lock()
                    .expect("lock")
                    .values()
                    .find(|(c, m)| c == ch && m["nonce"] == nonce)
            {
                // Discord answers a repeated nonce with the message it already created.
                return axum::Json(m.clone()).into_response();
            }
            let id = (inner.next_id.fetch_add(1, Ordering::SeqCst) + 5000).to_string();
            let mut m = message(&id, ch, &bot, body["content"].as_str().unwrap_or(""));
            // Discord always answers with arrays here, whether or not the request had them.
            for key in ["embeds", "components"] {
                if body[key].is_array() {
                    m[key] = body[key].clone();
                }
            }
            m["nonce"] = body["nonce"].clone();
            let attachments: Vec<Value> = uploads
                .into_iter()
                .map(|(filename, data)| {
                    let aid = (inner.next_id.fetch_add(1, Ordering::SeqCst) + 5000).to_string();
                    let path = format!("/attachments/{ch}/{aid}/{filename}");
                    let size = data.len();
                    inner.files.lock().expect("lock").insert(path.clone(), data);
                    json!({"id": aid, "filename": filename, "size": size, "url": path, "proxy_url": path})
                })
                .collect();
            m["attachments"] = json!(attachments);
            inner
                .messages
                .lock()
                .expect("lock")
                .insert(id, ((*ch).to_owned(), m.clone()));
            axum::Json(m).into_response()
        }
        ("PATCH", ["channels", ch, "messages", mid]) => {
            let mut messages = inner.messages.lock().expect("lock");
            let Some((channel, m)) = messages.get_mut(*mid) else {
                return error(404, 10008, "Unknown Message");
            };
            if channel != ch {
                return error(404, 10008, "Unknown Message");
            }
            for k in ["content", "embeds", "components"] {
                if body.get(k).is_some() {
                    m[k] = body[k].clone();
                }
            }
            m["edited_timestamp"] = json!("2026-11-29T10:00:01.000000+00:00");
            axum::Json(m.clone()).into_response()
        }
        ("POST", ["channels", _, "typing"])
        | ("PUT" | "DELETE", ["channels", _, "messages", _, "reactions", _, "@me"])
        | ("POST", ["interactions", _, _, "callback"]) => StatusCode::NO_CONTENT.into_response(),
        ("POST", ["webhooks", _, _]) => {
            let id = (inner.next_id.fetch_add(1, Ordering::SeqCst) + 5000).to_string();
            let mut m = message(&id, "1", &bot, body["content"].as_str().unwrap_or(""));
            m["flags"] = body["flags"].clone();
            axum::Json(m).into_response()
        }
        _ => error(404, 0, "404: Not Found"),
    }
}

/// The fake's CDN: files by path, no token needed (Discord's attachment URLs are signed).
async fn cdn(State(inner): State<Arc<Inner>>, Path(path): Path<String>) -> Response {
    match inner
        .files
        .lock()
        .expect("lock")
        .get(&format!("/attachments/{path}"))
    {
        Some(data) => data.clone().into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

impl FakeDiscord {
    /// Hosts `data` on the fake's CDN and returns the attachment object a message carries.
    ///
    /// # Panics
    /// Never in practice (poisoned lock).
    #[must_use]
    pub fn host_file(&self, filename: &str, content_type: &str, data: &[u8]) -> Value {
        let id = (self.inner.next_id.fetch_add(1, Ordering::SeqCst) + 5000).to_string();
        let path = format!("/attachments/{CHANNEL}/{id}/{filename}");
        self.inner
            .files
            .lock()
            .expect("lock")
            .insert(path.clone(), data.to_vec());
        let url = format!("{}{path}", self.base_url);
        json!({"id": id, "filename": filename, "size": data.len(), "content_type": content_type,
               "url": url, "proxy_url": url})
    }

    /// The bytes of a file on the fake's CDN, by the `url` an attachment carries (absolute or a
    /// path).
    ///
    /// # Panics
    /// Never in practice (poisoned lock).
    #[must_use]
    pub fn file(&self, url: &str) -> Option<Vec<u8>> {
        let path = url.strip_prefix(&self.base_url).unwrap_or(url);
        self.inner.files.lock().expect("lock").get(path).cloned()
    }

    /// Starts the fake on free loopback ports; the gateway asks for a heartbeat every
    /// `heartbeat_ms`.
    ///
    /// # Panics
    /// When loopback cannot be bound.
    pub async fn start(heartbeat_ms: u64) -> Self {
        let inner = Arc::new(Inner::default());
        inner.heartbeat_ms.store(heartbeat_ms, Ordering::SeqCst);
        let app = Router::new()
            .route("/api/v10/{*path}", axum::routing::any(rest))
            .route("/attachments/{*path}", axum::routing::get(cdn))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let gateway = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind gateway");
        *inner.gateway_url.lock().expect("lock") =
            format!("ws://{}", gateway.local_addr().expect("addr"));
        let gw = inner.clone();
        let task = tokio::spawn(async move {
            tokio::spawn(gateway_server(gateway, gw));
            let _ = axum::serve(listener, app).await;
        });
        Self {
            base_url: format!("http://{addr}"),
            inner,
            task,
        }
    }

    /// `GET /gateway/bot` answers `url` from now on (a gateway peer of the test's own).
    ///
    /// # Panics
    /// Never in practice (poisoned lock).
    pub fn set_gateway_url(&self, url: &str) {
        url.clone_into(&mut self.inner.gateway_url.lock().expect("lock"));
    }

    /// The next request whose `METHOD /path` starts with `prefix` answers `reply`.
    ///
    /// # Panics
    /// Never in practice (poisoned lock).
    pub fn script(&self, prefix: &str, reply: Reply) {
        self.inner
            .script
            .lock()
            .expect("lock")
            .push((prefix.to_owned(), reply));
    }

    /// Every REST request so far.
    ///
    /// # Panics
    /// Never in practice (poisoned lock).
    #[must_use]
    pub fn requests(&self) -> Vec<Request> {
        self.inner.requests.lock().expect("lock").clone()
    }

    /// Requests whose `METHOD /path` starts with `prefix`.
    #[must_use]
    pub fn requests_to(&self, prefix: &str) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| format!("{} {}", r.method, r.path).starts_with(prefix))
            .collect()
    }

    /// A message as the fake holds it now (after every edit).
    ///
    /// # Panics
    /// Never in practice (poisoned lock).
    #[must_use]
    pub fn message(&self, id: &str) -> Option<Value> {
        self.inner
            .messages
            .lock()
            .expect("lock")
            .get(id)
            .map(|(_, m)| m.clone())
    }

    /// Every message the bot posted in `channel`, in order, as they are now.
    ///
    /// # Panics
    /// Never in practice (poisoned lock).
    #[must_use]
    pub fn messages_in(&self, channel: &str) -> Vec<Value> {
        let messages = self.inner.messages.lock().expect("lock");
        let mut v: Vec<(u64, Value)> = messages
            .iter()
            .filter(|(_, (c, _))| c == channel)
            .map(|(id, (_, m))| (id.parse().unwrap_or(0), m.clone()))
            .collect();
        v.sort_by_key(|(id, _)| *id);
        v.into_iter().map(|(_, m)| m).collect()
    }

    /// Threads created: id → parent channel.
    ///
    /// # Panics
    /// Never in practice (poisoned lock).
    #[must_use]
    pub fn threads(&self) -> HashMap<String, String> {
        self.inner.threads.lock().expect("lock").clone()
    }

    /// Dispatches an event (`t`, `d`) on the gateway: sent at once on a live session, replayed on
    /// RESUME otherwise.
    ///
    /// # Panics
    /// Never in practice (poisoned lock).
    pub fn dispatch(&self, t: &str, d: Value) {
        {
            let mut gw = self.inner.gateway.lock().expect("lock");
            let seq = gw.log.last().map_or(1, |(s, _)| s + 1);
            gw.log
                .push((seq, json!({"op": 0, "s": seq, "t": t, "d": d})));
        }
        self.inner.pushed.notify_waiters();
    }

    /// Closes the gateway connection (code 4000, resumable) after queueing `missed`, which the bridge
    /// can then only receive by resuming the session.
    ///
    /// # Panics
    /// Never in practice (poisoned lock).
    pub fn disconnect_with_missed(&self, missed: &[(&str, Value)]) {
        {
            let mut gw = self.inner.gateway.lock().expect("lock");
            gw.kick = true;
            for (t, d) in missed {
                let seq = gw.log.last().map_or(1, |(s, _)| s + 1);
                gw.log
                    .push((seq, json!({"op": 0, "s": seq, "t": t, "d": d})));
            }
        }
        self.inner.pushed.notify_waiters();
    }

    /// Every frame the bridge sent on the gateway (IDENTIFY, HEARTBEAT, RESUME, …).
    ///
    /// # Panics
    /// Never in practice (poisoned lock).
    #[must_use]
    pub fn frames(&self) -> Vec<Value> {
        self.inner.frames.lock().expect("lock").clone()
    }

    /// Frames of one opcode.
    #[must_use]
    pub fn frames_op(&self, op: u64) -> Vec<Value> {
        self.frames()
            .into_iter()
            .filter(|f| f["op"].as_u64() == Some(op))
            .collect()
    }

    /// Gateway connections opened so far.
    #[must_use]
    pub fn connections(&self) -> u64 {
        self.inner.connections.load(Ordering::SeqCst)
    }

    /// Waits until `pred` holds (30 s at most).
    ///
    /// # Panics
    /// When it does not.
    pub async fn wait_for(&self, what: &str, pred: impl Fn(&Self) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !pred(self) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}: {:#?}",
                self.requests()
                    .iter()
                    .map(|r| format!("{} {} {}", r.method, r.path, r.body))
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn gateway_server(listener: tokio::net::TcpListener, inner: Arc<Inner>) {
    while let Ok((tcp, _)) = listener.accept().await {
        let Ok(ws) = tokio_tungstenite::accept_async(tcp).await else {
            continue;
        };
        inner.connections.fetch_add(1, Ordering::SeqCst);
        // One connection at a time, like one shard.
        gateway_connection(ws, &inner).await;
    }
}

async fn gateway_connection(
    mut ws: tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
    inner: &Arc<Inner>,
) {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::protocol::CloseFrame;
    let hello = json!({"op": 10, "s": null, "t": null,
                       "d": {"heartbeat_interval": inner.heartbeat_ms.load(Ordering::SeqCst)}});
    if ws.send(Message::text(hello.to_string())).await.is_err() {
        return;
    }
    // The sequence number sent last on this connection; None until READY or RESUMED.
    let mut sent: Option<u64> = None;
    loop {
        let (kick, next) = {
            let mut gw = inner.gateway.lock().expect("lock");
            let kick = std::mem::take(&mut gw.kick);
            let next = sent.and_then(|s| gw.log.iter().find(|(seq, _)| *seq > s).cloned());
            (kick, next)
        };
        if kick {
            let _ = ws
                .send(Message::Close(Some(CloseFrame {
                    code: 4000.into(),
                    reason: "fake: unknown error, reconnect".into(),
                })))
                .await;
            return;
        }
        if let Some((seq, frame)) = next {
            if ws.send(Message::text(frame.to_string())).await.is_err() {
                return;
            }
            if let Some(id) = frame["d"]["id"].as_str() {
                inner.sent_ids.lock().expect("lock").insert(id.to_owned());
            }
            sent = Some(seq);
            continue;
        }
        let pushed = inner.pushed.notified();
        tokio::select! {
            () = pushed => {}
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
            msg = ws.next() => {
                let text = match msg {
                    Some(Ok(Message::Text(t))) => t.to_string(),
                    Some(Ok(Message::Binary(_) | Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
                    _ => return,
                };
                let Ok(frame) = serde_json::from_str::<Value>(&text) else { continue };
                // An IDENTIFY is recorded once its READY is queued (below): a test that dispatches as
                // soon as it sees the IDENTIFY must not have its events wiped by the session's reset.
                if frame["op"].as_u64() != Some(2) {
                    inner.frames.lock().expect("lock").push(frame.clone());
                }
                match frame["op"].as_u64() {
                    Some(1) => {
                        let ack = json!({"op": 11, "s": null, "t": null, "d": null});
                        if ws.send(Message::text(ack.to_string())).await.is_err() { return; }
                    }
                    Some(2) => {
                        if frame["d"]["token"].as_str() != Some(TOKEN) && frame["d"]["token"].as_str() != Some(&format!("Bot {TOKEN}")) {
                            inner.frames.lock().expect("lock").push(frame.clone());
                            let _ = ws.send(Message::Close(Some(CloseFrame { code: 4004.into(), reason: "Authentication failed.".into() }))).await;
                            return;
                        }
                        let n = inner.connections.load(Ordering::SeqCst);
                        let session = format!("session-{n}");
                        let url = inner.gateway_url.lock().expect("lock").clone();
                        let ready = json!({"v": 10, "user": user(BOT, "chat-bridge", true),
                            "guilds": [{"id": GUILD, "unavailable": true}], "session_id": session,
                            "resume_gateway_url": url, "shard": [0, 1],
                            "application": {"id": BOT, "flags": 0}, "private_channels": [], "relationships": []});
                        let mut gw = inner.gateway.lock().expect("lock");
                        gw.session = Some(session);
                        gw.log = vec![(1, json!({"op": 0, "s": 1, "t": "READY", "d": ready}))];
                        drop(gw);
                        inner.frames.lock().expect("lock").push(frame.clone());
                        sent = Some(0);
                    }
                    Some(6) => {
                        let resumed = {
                            let mut gw = inner.gateway.lock().expect("lock");
                            let ok = gw.session.is_some() && frame["d"]["session_id"].as_str() == gw.session.as_deref();
                            if ok {
                                let seq = gw.log.last().map_or(1, |(s, _)| s + 1);
                                // Missed dispatches first (the loop sends them), then RESUMED.
                                gw.log.push((seq, json!({"op": 0, "s": seq, "t": "RESUMED", "d": {}})));
                            }
                            ok
                        };
                        if resumed {
                            sent = Some(frame["d"]["seq"].as_u64().unwrap_or(0));
                        } else {
                            let invalid = json!({"op": 9, "s": null, "t": null, "d": false});
                            if ws.send(Message::text(invalid.to_string())).await.is_err() { return; }
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}

impl Drop for FakeDiscord {
    fn drop(&mut self) {
        self.task.abort();
    }
}
