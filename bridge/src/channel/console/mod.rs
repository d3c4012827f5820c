//! The console channel: a local chat in the terminal. Readable, with status icons, elapsed time on
//! running tools, and errors marked `ERROR`. A terminal cannot edit earlier lines, so an edit prints the
//! message's new state as a new block. Permission options are numbered; type the number to choose.
//!
//! When stdin is not a terminal, each line is one message, in order, and the bridge exits once stdin
//! has closed and the last turn has finished — so it can be scripted.
//!
//! On a terminal the console is a conversation, not a log: when it is the channel and stderr is a
//! terminal, logs go to `./chat-bridge.log` ([`LogWriter`], said once in the [`banner`]) unless
//! `CHAT_BRIDGE_LOG` is set, which keeps them on stderr. A tool prints one start line (an edit that
//! would print the same running state again is skipped), and the full-output pointer is a command
//! that works when pasted ([`Pointer`]).

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub mod config;
mod start;
mod terminal;

pub use start::{ConsolePlatform, read_lines};
use terminal::log_path;
pub use terminal::{LOG_FILE, LogTarget, LogWriter, banner, logs_to_file};

use super::{
    BoxFuture, Capabilities, Channel, DeliveryError, Inbound, InboundKind, Message, Target, Tone,
};

/// Where the console writes.
pub type Sink = Arc<Mutex<Box<dyn Write + Send>>>;

/// The console adapter.
pub struct Console {
    out: Sink,
    next_id: AtomicU64,
    pointer: Pointer,
    /// What each message last printed as (its title while running), so a repeat is not printed.
    shown: Mutex<HashMap<String, String>>,
}

/// How the full-output pointer is written so that it works when pasted: `--database-url` when the
/// database is not the default one, the `GET /api/v1/…` half only when the HTTP API is on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pointer {
    /// The database URL to name (`None`: the default, nothing to add). Shown masked.
    pub database_url: Option<String>,
    /// Whether the HTTP API is served (`http.listen` and `http.api_token` set).
    pub api: bool,
}

impl Pointer {
    /// The pointer for a configuration: its database when not the default, the API when served.
    #[must_use]
    pub fn for_config(cfg: &crate::config::Config) -> Self {
        let default = crate::config::Config::default().database.url;
        Self {
            database_url: (cfg.database.url != default).then(|| cfg.database.url.clone()),
            api: cfg.http.listen.is_some() && (cfg.http.api_token.is_some() || cfg.http.ui),
        }
    }

    /// Rewrites a core pointer (`full output: `chat-bridge history show ID` · GET /api/v1/tool-calls/ID`)
    /// for this console; other text is returned as it is.
    #[must_use]
    pub fn apply(&self, footer: &str) -> String {
        const START: &str = "full output: `chat-bridge history show ";
        let Some(rest) = footer.strip_prefix(START) else {
            return footer.to_owned();
        };
        let Some((id, tail)) = rest.split_once('`') else {
            return footer.to_owned();
        };
        let db = self
            .database_url
            .as_deref()
            // Single-quoted for the shell, a `'` inside closed, escaped and reopened.
            .map(|u| {
                format!(
                    " --database-url '{}'",
                    crate::store::mask_url(u).replace('\'', r"'\''")
                )
            })
            .unwrap_or_default();
        let api = if self.api {
            tail.to_owned()
        } else {
            String::new()
        };
        format!("full output: `chat-bridge history show {id}{db}`{api}")
    }
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console").finish_non_exhaustive()
    }
}

/// The console's one conversation place.
#[must_use]
pub fn target() -> Target {
    Target {
        workspace: "local".into(),
        channel: "console".into(),
        thread: "main".into(),
    }
}

/// The local user's name (`$USER`, else `local`).
#[must_use]
pub fn user() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "local".into())
}

/// An inbound message typed at the console.
#[must_use]
pub fn inbound(line: &str) -> Inbound {
    Inbound {
        event_id: uuid::Uuid::new_v4().to_string(),
        platform: "console".into(),
        target: target(),
        user: user(),
        message_id: None,
        opens: true,
        kind: InboundKind::Message(line.to_owned()),
    }
}

impl Console {
    /// A console writing to `out`.
    #[must_use]
    pub fn new(out: Sink) -> Self {
        Self {
            out,
            next_id: AtomicU64::new(1),
            pointer: Pointer {
                database_url: None,
                api: true,
            },
            shown: Mutex::new(HashMap::new()),
        }
    }

    /// The same console writing the full-output pointer as `pointer` says.
    #[must_use]
    pub fn with_pointer(mut self, pointer: Pointer) -> Self {
        self.pointer = pointer;
        self
    }

    /// A console on stdout.
    #[must_use]
    pub fn stdout() -> Self {
        Self::new(Arc::new(Mutex::new(Box::new(std::io::stdout()))))
    }

    /// Prints `message` as message `id` — unless it would show a running tool again that is already
    /// on screen (the start line is printed once; the result follows as its own block).
    fn print(&self, id: &str, message: &Message) -> Result<(), DeliveryError> {
        let mut message = message.clone();
        message.footer = message.footer.as_deref().map(|f| self.pointer.apply(f));
        let seen = if message.tone == Tone::Running {
            message.title.clone()
        } else {
            render(&message)
        };
        {
            let mut shown = self
                .shown
                .lock()
                .map_err(|_| DeliveryError::Permanent("console state poisoned".into()))?;
            // A running call says it started once: an edit that only renames it (qwen's "Shell"
            // becoming the command) is not a second start line; its progress lines still print.
            let renamed_only =
                message.tone == Tone::Running && message.body.is_none() && shown.contains_key(id);
            if shown.get(id) == Some(&seen) || renamed_only {
                shown.insert(id.to_owned(), seen);
                return Ok(());
            }
            shown.insert(id.to_owned(), seen);
        }
        let text = render(&message);
        let text = super::text::terminal_safe(&text);
        let mut out = self
            .out
            .lock()
            .map_err(|_| DeliveryError::Permanent("console output poisoned".into()))?;
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .map_err(|e| DeliveryError::Temporary(format!("console write failed: {e}")))
    }
}

/// The text block for a message.
#[must_use]
pub fn render(m: &Message) -> String {
    let mark = match m.tone {
        Tone::Error => "ERROR ",
        Tone::Warning => "WARN  ",
        _ => "",
    };
    let mut s = format!("{mark}{}\n", super::text::plain(&m.title));
    // A terminal has no files: an answer carried as one is printed whole instead of its preview.
    let body = m.file.as_ref().map(|f| &f.content).or(m.body.as_ref());
    if let Some(body) = body {
        let body = super::text::plain(body);
        for line in body.lines() {
            s.push_str(&format!("    {line}\n"));
        }
    }
    if let Some(code) = &m.code {
        for line in code.lines() {
            s.push_str(&format!("    │ {line}\n"));
        }
    }
    if !m.buttons.is_empty() {
        let numbers: Vec<String> = (1..=m.buttons.len()).map(|i| i.to_string()).collect();
        let numbers = match numbers.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        };
        s.push_str(&format!(
            "    Answer with a number ({numbers}) and Enter:\n"
        ));
        for (i, b) in m.buttons.iter().enumerate() {
            s.push_str(&format!(
                "      {}) {}\n",
                i + 1,
                super::text::plain(&b.label)
            ));
        }
    }
    if let Some(footer) = &m.footer {
        s.push_str(&format!("    ↳ {}\n", super::text::plain(footer)));
    }
    s
}

impl Channel for Console {
    fn platform(&self) -> &'static str {
        "console"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            max_message_len: 1 << 20,
            answer_len: 1 << 20,
            output_cap: 3500,
            can_edit: false,
            has_buttons: false,
            has_threads: false,
            has_reactions: false,
            takes_requests: false,
        }
    }

    fn post<'a>(
        &'a self,
        _target: &'a Target,
        message: &'a Message,
    ) -> BoxFuture<'a, Result<String, DeliveryError>> {
        Box::pin(async move {
            let id = format!("console-{}", self.next_id.fetch_add(1, Ordering::Relaxed));
            self.print(&id, message)?;
            Ok(id)
        })
    }

    fn edit<'a>(
        &'a self,
        _target: &'a Target,
        id: &'a str,
        message: &'a Message,
    ) -> BoxFuture<'a, Result<(), DeliveryError>> {
        Box::pin(async move { self.print(id, message) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(tone: Tone, title: &str) -> Message {
        Message::text(tone, title)
    }

    #[test]
    fn a_long_answer_carried_as_a_file_prints_whole() {
        let mut m = Message::text(Tone::Neutral, "💬 answer");
        m.body = Some("preview".into());
        m.file = Some(crate::channel::OutFile {
            name: "answer.md".into(),
            content: "all\nof it".into(),
        });
        assert_eq!(render(&m), "💬 answer\n    all\n    of it\n");
    }

    #[tokio::test]
    async fn a_tool_prints_one_start_line_and_its_result() {
        let buf = Arc::new(Mutex::new(Vec::new()));
        struct Shared(Arc<Mutex<Vec<u8>>>);
        impl Write for Shared {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0
                    .lock()
                    .map_err(|_| std::io::Error::other("poisoned"))?
                    .extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let console = Console::new(Arc::new(Mutex::new(Box::new(Shared(buf.clone())))));
        let t = target();
        let id = console
            .post(&t, &tool(Tone::Running, "⏳ ls"))
            .await
            .expect("post");
        let mut running = tool(Tone::Running, "⏳ ls");
        running.footer = Some("running for 15s".into());
        console.edit(&t, &id, &running).await.expect("edit");
        // Renamed while running (qwen's "Shell" becoming the command): still one start line.
        console
            .edit(&t, &id, &tool(Tone::Running, "⏳ ls -la"))
            .await
            .expect("edit");
        console
            .edit(&t, &id, &tool(Tone::Success, "✅ ls — 1s"))
            .await
            .expect("edit");
        let printed = String::from_utf8(buf.lock().expect("lock").clone()).expect("utf8");
        assert_eq!(printed, "⏳ ls\n✅ ls — 1s\n");
    }

    #[test]
    fn approvals_list_the_numbers_to_type() {
        let mut m = Message::text(Tone::Warning, "🔐 approval needed: rm -rf build");
        for label in ["Allow once", "Allow always", "Reject"] {
            m.buttons.push(crate::channel::Button {
                value: format!("perm:1:{label}"),
                label: label.into(),
                style: None,
            });
        }
        assert_eq!(
            render(&m),
            "WARN  🔐 approval needed: rm -rf build\n    Answer with a number (1, 2 or 3) and Enter:\n      1) Allow once\n      2) Allow always\n      3) Reject\n"
        );
    }

    #[test]
    fn the_full_output_pointer_is_a_command_that_works_when_pasted() {
        let core = "full output: `chat-bridge history show tc-1` · GET /api/v1/tool-calls/tc-1";
        let default = Pointer {
            database_url: None,
            api: false,
        };
        assert_eq!(
            default.apply(core),
            "full output: `chat-bridge history show tc-1`"
        );
        let pg = Pointer {
            database_url: Some("postgres://bridge:hunter2@db/chat".into()),
            api: true,
        };
        let out = pg.apply(core);
        assert!(
            out.starts_with(
                "full output: `chat-bridge history show tc-1 --database-url 'postgres://bridge:"
            ),
            "{out}"
        );
        assert!(
            out.ends_with("` · GET /api/v1/tool-calls/tc-1") && !out.contains("hunter2"),
            "{out}"
        );
        assert_eq!(default.apply("asked by x"), "asked by x");
        let quoted = Pointer {
            database_url: Some("sqlite://./it's.db".into()),
            api: false,
        };
        assert_eq!(
            quoted.apply(core),
            r"full output: `chat-bridge history show tc-1 --database-url 'sqlite://./it'\''s.db'`",
            "a quote in the path survives pasting into a shell"
        );
    }

    #[test]
    fn the_banner_fits_the_daemon_and_says_where_the_logs_went() {
        let qwen = banner(
            "ws://127.0.0.1:4000/acp",
            "sqlite://./chat-bridge.db",
            false,
            None,
        );
        assert!(
            !qwen.contains("shell command") && qwen.contains("message for the agent"),
            "{qwen}"
        );
        let own = banner(
            "ws://127.0.0.1:1/acp",
            "sqlite://./chat-bridge.db",
            true,
            Some(std::path::Path::new("./chat-bridge.log")),
        );
        assert!(
            own.contains("shell command") && own.contains("logs: ./chat-bridge.log"),
            "{own}"
        );
    }

    #[test]
    fn errors_are_marked_and_output_is_framed() {
        let m = Message {
            tone: Tone::Error,
            title: "⏱ sleep 30 — timed out".into(),
            body: Some("Command timed out after 2s".into()),
            code: Some("partial".into()),
            footer: Some("full output: `chat-bridge history show x`".into()),
            buttons: Vec::new(),
            markdown: false,
            file: None,
        };
        assert_eq!(
            render(&m),
            "ERROR ⏱ sleep 30 — timed out\n    Command timed out after 2s\n    │ partial\n    ↳ full output: `chat-bridge history show x`\n"
        );
    }
}
