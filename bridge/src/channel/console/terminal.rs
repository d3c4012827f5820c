//! The terminal around the console: where log lines go while the conversation owns the screen, and
//! the opening banner.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// Where log lines go: stderr, until [`logs_to_file`] sends them to a file. A `MakeWriter` for
/// `tracing_subscriber`, so the choice can be made after logging is set up (once the configuration
/// says the console is the channel).
#[derive(Debug, Clone, Copy, Default)]
pub struct LogWriter;

fn log_file() -> &'static OnceLock<Mutex<std::fs::File>> {
    static FILE: OnceLock<Mutex<std::fs::File>> = OnceLock::new();
    &FILE
}

pub(super) fn log_path() -> &'static OnceLock<PathBuf> {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    &PATH
}

/// One log line's writer (see [`LogWriter`]).
#[derive(Debug)]
pub enum LogTarget {
    /// The terminal's stderr.
    Stderr(std::io::Stderr),
    /// The log file.
    File(&'static Mutex<std::fs::File>),
}

impl Write for LogTarget {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::Stderr(e) => e.write(buf),
            // The formatter chose colours for the terminal before the log moved to the file.
            Self::File(f) => {
                f.lock()
                    .map_err(|_| std::io::Error::other("log file lock poisoned"))?
                    .write_all(&strip_ansi(buf))?;
                Ok(buf.len())
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::Stderr(e) => e.flush(),
            Self::File(f) => f
                .lock()
                .map_err(|_| std::io::Error::other("log file lock poisoned"))?
                .flush(),
        }
    }
}

/// `buf` without its ANSI CSI sequences (`ESC [ … final`), so a log file reads as plain text.
fn strip_ansi(buf: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(buf.len());
    let mut bytes = buf.iter().copied().peekable();
    while let Some(b) = bytes.next() {
        if b == 0x1b && bytes.peek() == Some(&b'[') {
            bytes.next();
            // Parameters and intermediates, then one final byte in 0x40..=0x7e.
            for c in bytes.by_ref() {
                if (0x40..=0x7e).contains(&c) {
                    break;
                }
            }
        } else {
            out.push(b);
        }
    }
    out
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogTarget;

    fn make_writer(&'a self) -> Self::Writer {
        match log_file().get() {
            Some(f) => LogTarget::File(f),
            None => LogTarget::Stderr(std::io::stderr()),
        }
    }
}

/// The file a terminal console session logs to.
pub const LOG_FILE: &str = "chat-bridge.log";

/// When the console is the channel and stderr is a terminal, sends log lines to `./chat-bridge.log`
/// (appended) so they do not interleave with the conversation — unless `CHAT_BRIDGE_LOG` is set,
/// which asks for them on stderr. Returns the file when logs go there.
///
/// # Errors
/// When the file cannot be opened (logs then stay on stderr).
pub fn logs_to_file() -> std::io::Result<Option<PathBuf>> {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() || std::env::var_os("CHAT_BRIDGE_LOG").is_some() {
        return Ok(None);
    }
    let path = Path::new(".").join(LOG_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)?;
    let _ = log_file().set(Mutex::new(file));
    let _ = log_path().set(path.clone());
    Ok(Some(path))
}

/// The console's opening line: where the agent and the database are, what to type (a shell command
/// only for the built-in shell agent), and where the logs went.
#[must_use]
pub fn banner(
    daemon_url: &str,
    database_url: &str,
    built_in_agent: bool,
    log_file: Option<&Path>,
) -> String {
    let what = if built_in_agent {
        "type a shell command (a leading `timeout=30s ` sets its timeout)"
    } else {
        "type a message for the agent"
    };
    let mut s = format!(
        "chat-bridge — agent at {} · database {}\n{what}; /help for commands, Ctrl-D to quit",
        crate::store::mask_url(daemon_url),
        crate::store::mask_url(database_url),
    );
    if let Some(f) = log_file {
        s.push_str(&format!(
            "\nlogs: {} (CHAT_BRIDGE_LOG=info shows them here instead)",
            f.display()
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::strip_ansi;

    #[test]
    fn log_file_lines_carry_no_colour_codes() {
        let line = b"\x1b[2m2026-12-01T16:00:00Z\x1b[0m \x1b[32m INFO\x1b[0m chat_bridge: ready\n";
        assert_eq!(
            strip_ansi(line),
            b"2026-12-01T16:00:00Z  INFO chat_bridge: ready\n".to_vec()
        );
        // Text without escapes, and a lone ESC that starts no sequence, pass through.
        assert_eq!(strip_ansi(b"plain \x1b text"), b"plain \x1b text".to_vec());
    }
}
