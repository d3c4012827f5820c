//! The console channel: a local chat in the terminal. Readable, with status icons, elapsed time on
//! running tools, and errors marked `ERROR`. A terminal cannot edit earlier lines, so an edit prints the
//! message's new state as a new block. Permission options are numbered; type the number to choose.
//!
//! When stdin is not a terminal, each line is one message, in order, and the bridge exits once stdin
//! has closed and the last turn has finished — so it can be scripted.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{
    BoxFuture, Capabilities, Channel, DeliveryError, Inbound, InboundKind, Message, Target, Tone,
};

/// Where the console writes.
pub type Sink = Arc<Mutex<Box<dyn Write + Send>>>;

/// The console adapter.
pub struct Console {
    out: Sink,
    next_id: AtomicU64,
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
        }
    }

    /// A console on stdout.
    #[must_use]
    pub fn stdout() -> Self {
        Self::new(Arc::new(Mutex::new(Box::new(std::io::stdout()))))
    }

    fn print(&self, message: &Message) -> Result<(), DeliveryError> {
        let text = render(message);
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
    let mut s = format!("{mark}{}\n", m.title);
    if let Some(body) = &m.body {
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
        let options: Vec<String> = m
            .buttons
            .iter()
            .enumerate()
            .map(|(i, b)| format!("{}) {}", i + 1, b.label))
            .collect();
        s.push_str(&format!("    {}  — type the number\n", options.join("   ")));
    }
    if let Some(footer) = &m.footer {
        s.push_str(&format!("    ↳ {footer}\n"));
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
            output_cap: 3500,
            can_edit: false,
            has_buttons: false,
            has_threads: false,
            has_reactions: false,
        }
    }

    fn post<'a>(
        &'a self,
        _target: &'a Target,
        message: &'a Message,
    ) -> BoxFuture<'a, Result<String, DeliveryError>> {
        Box::pin(async move {
            self.print(message)?;
            Ok(format!(
                "console-{}",
                self.next_id.fetch_add(1, Ordering::Relaxed)
            ))
        })
    }

    fn edit<'a>(
        &'a self,
        _target: &'a Target,
        _id: &'a str,
        message: &'a Message,
    ) -> BoxFuture<'a, Result<(), DeliveryError>> {
        Box::pin(async move { self.print(message) })
    }
}

/// The console as a [`Platform`](crate::platform::Platform): no credentials, always allowed; each
/// line of stdin is one message, and the end of stdin ends the bridge once the last turn is done.
#[derive(Debug, Clone, Copy)]
pub struct ConsolePlatform;

impl crate::platform::Platform for ConsolePlatform {
    fn name(&self) -> &'static str {
        "console"
    }

    fn configured(&self, _cfg: &crate::config::Config) -> bool {
        true
    }

    fn credentials(&self) -> &'static str {
        "nothing"
    }

    fn check(&self, _cfg: &crate::config::Config, _problems: &mut Vec<String>) {}

    fn access(&self, _cfg: &crate::config::Config) -> String {
        "local console".to_owned()
    }

    fn input_ends(&self) -> bool {
        true
    }

    fn connect<'a>(
        &'a self,
        _cfg: &'a crate::config::Config,
        inbound: tokio::sync::mpsc::Sender<super::Arrival>,
    ) -> BoxFuture<'a, anyhow::Result<crate::platform::Connected>> {
        Box::pin(async move {
            Ok(crate::platform::Connected {
                channel: Arc::new(Console::stdout()),
                listen: Box::new(move |run| Box::pin(read_stdin(run, inbound))),
            })
        })
    }
}

/// Feeds stdin's lines to the bridge until it ends (or `stop`), with a banner on a terminal.
async fn read_stdin(
    run: crate::platform::Running,
    sink: tokio::sync::mpsc::Sender<super::Arrival>,
) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    if std::io::stdin().is_terminal() {
        println!(
            "chat-bridge — agent at {} · database {} · type a shell command, /help for commands, Ctrl-D to quit",
            run.daemon_url, run.database_url
        );
    }
    read_lines(
        tokio::io::BufReader::new(tokio::io::stdin()),
        sink,
        run.stop,
    )
    .await
}

/// Each non-blank line of `input` becomes one console message, in order, until `input` ends or
/// `stop`. Bytes that are not UTF-8 become U+FFFD: a line is never lost for them (S4).
///
/// # Errors
/// Reading `input` failed.
pub async fn read_lines<R: tokio::io::AsyncBufRead + Unpin>(
    mut input: R,
    sink: tokio::sync::mpsc::Sender<super::Arrival>,
    stop: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    use anyhow::Context;
    use tokio::io::AsyncBufReadExt;
    let mut raw = Vec::new();
    loop {
        raw.clear();
        let n = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            n = input.read_until(b'\n', &mut raw) => n.context("reading the console")?,
        };
        if n == 0 {
            return Ok(());
        }
        let line = String::from_utf8_lossy(&raw);
        let line = line.trim_end_matches(['\n', '\r']);
        if line.trim().is_empty() {
            continue;
        }
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            sent = sink.send(inbound(line).into()) => if sent.is_err() { return Ok(()) },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_marked_and_output_is_framed() {
        let m = Message {
            tone: Tone::Error,
            title: "⏱ sleep 30 — timed out".into(),
            body: Some("Command timed out after 2s".into()),
            code: Some("partial".into()),
            footer: Some("full output: `chat-bridge history show x`".into()),
            buttons: Vec::new(),
        };
        assert_eq!(
            render(&m),
            "ERROR ⏱ sleep 30 — timed out\n    Command timed out after 2s\n    │ partial\n    ↳ full output: `chat-bridge history show x`\n"
        );
    }
}
