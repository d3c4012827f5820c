//! The rich-message rig's agent: a scripted ACP daemon that records every prompt's content blocks
//! and answers with text — a 60 kB answer to `LONG…`, Markdown to `MARKDOWN…`, two chunks
//! apart to `STREAM…`, a short line otherwise — and the test inputs (a 60 kB answer with paragraphs and fences, PNG bytes).

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::scripted::{Peer, ScriptedDaemon};

/// What the scripted daemon answers to a prompt whose text starts with these.
pub const LONG: &str = "LONG";
/// See [`LONG`].
pub const MARKDOWN: &str = "MARKDOWN";
/// See [`LONG`]: the answer comes in two chunks [`STREAM_GAP`] apart.
pub const STREAM: &str = "STREAM";
/// The time between the two chunks of the streamed answer.
pub const STREAM_GAP: std::time::Duration = std::time::Duration::from_millis(1500);

/// The 60 kB answer: numbered paragraphs and a code fence, so splitting has boundaries to find.
#[must_use]
pub fn long_answer() -> String {
    let mut s = String::new();
    let mut i = 0;
    while s.len() < 60_000 {
        i += 1;
        if i % 25 == 0 {
            s.push_str("```\nfn main() {\n    println!(\"inside a fence\");\n}\n```\n\n");
        }
        s.push_str(&format!(
            "Paragraph {i}: the quick brown fox jumps over the lazy dog, and the answer goes on.\n\n"
        ));
    }
    s.trim_end().to_owned()
}

/// The Markdown answer: a heading, bold, italics, a link, a table and code.
pub const MARKDOWN_ANSWER: &str = "## Result\n\nThis is **bold**, this is *italic*, see [the docs](https://example.com/a?b=1).\n\n| name | value |\n|------|-------|\n| a    | 1     |\n\n```\nlet x = **not bold**;\n```";

/// The prompts the daemon was sent, each its content blocks.
pub type Prompts = Arc<Mutex<Vec<Value>>>;

/// A daemon (taking images when `images`, and embedded context) that records each prompt's content
/// blocks and answers with text.
pub async fn daemon(images: bool, prompts: Prompts) -> ScriptedDaemon {
    daemon_with(images, true, prompts).await
}

/// [`daemon`], saying `promptCapabilities.embeddedContext: embedded`.
pub async fn daemon_with(images: bool, embedded: bool, prompts: Prompts) -> ScriptedDaemon {
    ScriptedDaemon::start(move |mut peer: Peer| {
        let prompts = prompts.clone();
        async move {
            let init = peer.expect("initialize").await;
            peer.reply(
                &init,
                json!({"protocolVersion": 1, "agentCapabilities": {"loadSession": true,
                    "promptCapabilities": {"image": images, "embeddedContext": embedded}}}),
            )
            .await;
            serve(peer, prompts).await;
        }
    })
    .await
}

/// A daemon that restarts with other capabilities: its first connection takes images and embedded
/// context and ends right after `initialize` (the daemon went away); every later one takes neither
/// and serves as [`daemon`] does. `inits` counts the `initialize` calls answered.
pub async fn daemon_restarting_without_images(
    prompts: Prompts,
    inits: Arc<std::sync::atomic::AtomicUsize>,
) -> ScriptedDaemon {
    ScriptedDaemon::start(move |mut peer: Peer| {
        let (prompts, inits) = (prompts.clone(), inits.clone());
        async move {
            let first = peer.number == 1;
            let init = peer.expect("initialize").await;
            peer.reply(
                &init,
                json!({"protocolVersion": 1, "agentCapabilities": {"loadSession": true,
                    "promptCapabilities": {"image": first, "embeddedContext": first}}}),
            )
            .await;
            inits.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if first {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                peer.drop_connection();
                return;
            }
            serve(peer, prompts).await;
        }
    })
    .await
}

/// Records each prompt and answers it (see the module docs).
async fn serve(mut peer: Peer, prompts: Prompts) {
    while let Some(msg) = peer.recv().await {
        match msg["method"].as_str() {
            Some("session/new") => peer.reply(&msg, json!({"sessionId": "s1"})).await,
            Some("session/prompt") => {
                let blocks = msg["params"]["prompt"].clone();
                prompts.lock().expect("lock").push(blocks.clone());
                let text = blocks[0]["text"].as_str().unwrap_or("");
                if text.starts_with(STREAM) {
                    peer.send(json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1",
                                "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "The first half. "}}}}))
                                .await;
                    tokio::time::sleep(STREAM_GAP).await;
                }
                let answer = if text.starts_with(STREAM) {
                    "The second half.".to_owned()
                } else if text.starts_with(LONG) {
                    long_answer()
                } else if text.starts_with(MARKDOWN) {
                    MARKDOWN_ANSWER.to_owned()
                } else {
                    "I saw it.".to_owned()
                };
                peer.send(json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1",
                            "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": answer}}}}))
                            .await;
                peer.reply(&msg, json!({"stopReason": "end_turn"})).await;
            }
            Some(_) if msg.get("id").is_some() => peer.reply(&msg, json!({})).await,
            _ => {}
        }
    }
}

/// A real PNG's signature and some bytes (the bridge checks the signature, the agent gets them all).
#[must_use]
pub fn png(len: usize) -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n".to_vec();
    b.extend((0..len.saturating_sub(8)).map(|i| (i * 7 % 251) as u8));
    b
}
