//! `discord-digital-twin` (npm, written by others): Discord's REST API and gateway, run by
//! `tests/twin/driver.mjs` and driven from the tests over its stdin/stdout. Installed by
//! `scripts/install-discord-twin` (which `scripts/test` runs; [`Twin::start`] runs it too when the
//! cache is empty) into `$DISCORD_TWIN_DIR` or `$HOME/.cache/discord-twin`. When it
//! cannot be installed (npm unreachable) [`Twin::start`] says SKIPPED loudly and returns `None`.
//!
//! The bridge asks `GET /gateway/bot` (which the twin serves) for the gateway URL; the install
//! script patches one line of the twin so a thread started from a message has the message's id, as
//! on real Discord.
//!
//! Only std, tokio, `serde_json` and `base64`: `bridge/tests` includes this file by path for the tests that
//! run the real binary.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// The repository root (this file is built from `tests/` and from `bridge/`, both one level down).
fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Where the twin is installed, installing it when the cache is empty.
fn install() -> Result<PathBuf, String> {
    let dir = std::env::var_os("DISCORD_TWIN_DIR").map_or_else(
        || {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
                .join(".cache/discord-twin")
        },
        PathBuf::from,
    );
    if dir
        .join("node_modules/discord-digital-twin/dist/server.js")
        .is_file()
    {
        return Ok(dir);
    }
    let out = std::process::Command::new(repo().join("scripts/install-discord-twin"))
        .arg(&dir)
        .output()
        .map_err(|e| format!("scripts/install-discord-twin: {e}"))?;
    if out.status.success() {
        Ok(dir)
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// A running twin: one guild, one text channel, two people (`501` ana, `502` bob), our bot.
#[derive(Debug)]
pub struct Twin {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    /// REST base for `discord.api_base_url`.
    pub base_url: String,
    /// The bot token it accepts.
    pub token: String,
    /// Our bot's user id.
    pub bot: String,
    /// The text channel.
    pub channel: String,
    /// Two people: ana, bob.
    pub people: Vec<String>,
}

impl Twin {
    /// Starts the twin, or says SKIPPED (loudly, on stderr) and returns `None` when it cannot be
    /// installed from npm.
    ///
    /// # Panics
    /// When it is installed but does not start.
    pub async fn start() -> Option<Self> {
        let dir = match install() {
            Ok(dir) => dir,
            Err(e) => {
                eprintln!(
                    "\n!!! SKIPPED: discord-digital-twin could not be installed from npm ({}) !!!\n",
                    e.trim()
                );
                return None;
            }
        };
        let mut child = Command::new(std::env::var("CHAT_BRIDGE_NODE").unwrap_or("node".into()))
            .arg(repo().join("tests/twin/driver.mjs"))
            .arg(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("node runs tests/twin/driver.mjs");
        let stdin = child.stdin.take().expect("stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), stdout.next_line())
            .await
            .expect("the twin starts within 60 s")
            .expect("read")
            .expect("the twin said ready");
        let ready: Value = serde_json::from_str(&line).expect("json");
        let s = |k: &str| ready["ready"][k].as_str().expect(k).to_owned();
        Some(Self {
            base_url: s("base_url"),
            token: s("token"),
            bot: s("bot"),
            channel: s("channel"),
            people: ready["ready"]["people"]
                .as_array()
                .expect("people")
                .iter()
                .filter_map(|p| p.as_str().map(str::to_owned))
                .collect(),
            child,
            stdin,
            stdout,
        })
    }

    /// Sends one command and returns its answer.
    ///
    /// # Panics
    /// When the twin answers an error or not within 30 s.
    pub async fn call(&mut self, cmd: Value) -> Value {
        let line = format!("{cmd}\n");
        self.stdin.write_all(line.as_bytes()).await.expect("write");
        let answer = tokio::time::timeout(Duration::from_secs(30), self.stdout.next_line())
            .await
            .expect("the twin answers within 30 s")
            .expect("read")
            .expect("an answer");
        let v: Value = serde_json::from_str(&answer).expect("json");
        assert!(v.get("error").is_none(), "the twin refused {cmd}: {v}");
        v["ok"].clone()
    }

    /// A person posts `content` in `channel`; the created message.
    pub async fn post(&mut self, channel: &str, user: &str, content: &str) -> Value {
        self.call(json!({"cmd": "post", "channel": channel, "user": user, "content": content}))
            .await
    }

    /// A person posts `content` with `attachments` (Discord attachment objects, e.g. from
    /// [`Twin::attachment`]); the created message.
    pub async fn post_with(
        &mut self,
        channel: &str,
        user: &str,
        content: &str,
        attachments: &[Value],
    ) -> Value {
        self.call(
            json!({"cmd": "post", "channel": channel, "user": user, "content": content,
            "attachments": attachments}),
        )
        .await
    }

    /// An attachment object for `bytes` named `name`, its bytes served at the twin's own origin
    /// (the twin keeps attachment objects but serves no files; the driver does, beside it).
    pub async fn attachment(
        &mut self,
        id: &str,
        name: &str,
        content_type: &str,
        bytes: &[u8],
    ) -> Value {
        use base64::Engine as _;
        let path = format!("/attachments/{}/{id}/{name}", self.channel);
        let url = self
            .call(
                json!({"cmd": "host", "path": path, "content_type": content_type,
                "base64": base64::engine::general_purpose::STANDARD.encode(bytes)}),
            )
            .await;
        let url = url.as_str().expect("url").to_owned();
        json!({"id": id, "filename": name, "content_type": content_type, "size": bytes.len(),
            "url": url, "proxy_url": url})
    }

    /// The requests for hosted files: `{method, path, authorization}` each.
    pub async fn fetches(&mut self) -> Vec<Value> {
        self.call(json!({"cmd": "fetches"}))
            .await
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// A person clicks the button `custom_id` of `message`.
    pub async fn click(&mut self, channel: &str, user: &str, message: &str, custom_id: &str) {
        self.call(json!({"cmd": "click", "channel": channel, "user": user, "message": message, "custom_id": custom_id}))
            .await;
    }

    /// The messages of a channel or thread, as the twin stored them.
    pub async fn messages(&mut self, channel: &str) -> Vec<Value> {
        self.call(json!({"cmd": "messages", "channel": channel}))
            .await
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// A channel or thread, if it exists.
    pub async fn channel_info(&mut self, channel: &str) -> Value {
        self.call(json!({"cmd": "channel", "channel": channel}))
            .await
    }

    /// The emoji reacted on a message.
    pub async fn reactions(&mut self, message: &str) -> Vec<String> {
        self.call(json!({"cmd": "reactions", "message": message}))
            .await
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e.as_str().map(str::to_owned))
            .collect()
    }

    /// The gateway goes away (REST stays): every client gets a close frame without a status code
    /// and new connections are refused until [`Twin::restore_gateway`].
    pub async fn drop_gateway(&mut self) {
        self.call(json!({"cmd": "drop_gateway"})).await;
    }

    /// The gateway accepts connections again.
    pub async fn restore_gateway(&mut self) {
        self.call(json!({"cmd": "restore_gateway"})).await;
    }

    /// The twin stops as it does (close frames without a status code, then its HTTP server).
    pub async fn stop(&mut self) {
        self.call(json!({"cmd": "stop"})).await;
    }

    /// Polls `probe` until it returns `Some`, every 100 ms for at most `within`.
    ///
    /// # Panics
    /// When `within` passes first.
    pub async fn wait_for<T>(
        &mut self,
        what: &str,
        within: Duration,
        mut probe: impl AsyncFnMut(&mut Self) -> Option<T>,
    ) -> T {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(v) = probe(self).await {
                return v;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: not within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The first message in `channel` whose headline (first embed title, or content) starts with
    /// `prefix`.
    pub async fn find(&mut self, channel: &str, prefix: &str) -> Option<Value> {
        self.messages(channel)
            .await
            .into_iter()
            .find(|m| headline(m).starts_with(prefix))
    }
}

impl Drop for Twin {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// A message's first embed title, or its content.
#[must_use]
pub fn headline(m: &Value) -> String {
    m["embeds"][0]["title"].as_str().map_or_else(
        || m["content"].as_str().unwrap_or("").to_owned(),
        str::to_owned,
    )
}

/// All the text of a message: content, embed titles, descriptions and footers.
#[must_use]
pub fn text_of(m: &Value) -> String {
    let mut s = m["content"].as_str().unwrap_or("").to_owned();
    for e in m["embeds"].as_array().into_iter().flatten() {
        for k in ["title", "description"] {
            s.push('\n');
            s.push_str(e[k].as_str().unwrap_or(""));
        }
        s.push('\n');
        s.push_str(e["footer"]["text"].as_str().unwrap_or(""));
    }
    s
}

/// `GET path` on `addr` over plain HTTP/1.1: the status code, or `None` when there is no answer
/// within `within`.
pub async fn http_status(addr: &str, path: &str, within: Duration) -> Option<u16> {
    http_get(addr, path, within).await.map(|(status, _)| status)
}

/// `GET path` on `addr` over plain HTTP/1.1: the status code and the whole response, or `None`
/// when there is no answer within `within`.
pub async fn http_get(addr: &str, path: &str, within: Duration) -> Option<(u16, String)> {
    let ask = async {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        tcp.write_all(req.as_bytes()).await.ok()?;
        let mut response = Vec::new();
        tcp.read_to_end(&mut response).await.ok()?;
        let response = String::from_utf8_lossy(&response).into_owned();
        let status = response.get(9..12)?.parse().ok()?;
        Some((status, response))
    };
    tokio::time::timeout(within, ask).await.ok().flatten()
}
