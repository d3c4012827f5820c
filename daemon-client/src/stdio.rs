//! The stdio transport: an agent run as a child process, speaking newline-delimited JSON-RPC on its
//! stdin and stdout (how `qwen --acp`, Gemini CLI, claude-code-acp, codex-acp and goose speak ACP).
//!
//! The child runs in its own process group, so ending it ends whatever it started (shells, tools); its
//! stderr goes to the log at debug level, rate-limited, because agents print command output there.
//! "Reconnecting" a child means starting it again: the client does that through the same supervisor
//! as for a WebSocket.

use std::fmt;
use std::path::PathBuf;
use std::process::Stdio as StdStdio;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::error::Error;

/// Environment variables of the bridge that a child never inherits: they hold its configuration and
/// secrets (chat tokens, the database URL), which an agent has no use for.
const PRIVATE_ENV_PREFIX: &str = "CHAT_BRIDGE_";

/// The names of this process's environment variables that a child it starts must not inherit: the
/// bridge's `CHAT_BRIDGE_*` configuration and secrets (S2).
pub fn private_env() -> impl Iterator<Item = std::ffi::OsString> {
    std::env::vars_os()
        .map(|(name, _)| name)
        .filter(|name| name.to_string_lossy().starts_with(PRIVATE_ENV_PREFIX))
}

/// How long a child gets to exit after `SIGTERM` before its process group is killed.
const TERM_GRACE: Duration = Duration::from_secs(3);

/// stderr lines logged per `STDERR_WINDOW`; the rest are counted and reported once.
const STDERR_BUDGET: u32 = 20;
const STDERR_WINDOW: Duration = Duration::from_secs(10);

/// The command line of a stdio agent, e.g. `["qwen", "--acp"]`.
#[derive(Clone, PartialEq, Eq)]
pub struct AgentCommand {
    /// The program and its arguments; never empty.
    argv: Vec<String>,
    /// Variables added to the child's environment.
    pub env: Vec<(String, String)>,
    /// The child's working directory; default the bridge's.
    pub cwd: Option<PathBuf>,
}

impl fmt::Debug for AgentCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Values of `env` may be API keys: only their names are shown.
        let names: Vec<&str> = self.env.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("AgentCommand")
            .field("argv", &self.argv)
            .field("env", &names)
            .field("cwd", &self.cwd)
            .finish()
    }
}

/// An empty command line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the agent command is empty: give the program and its arguments, e.g. [\"qwen\", \"--acp\"]"
)]
pub struct EmptyCommand;

impl AgentCommand {
    /// A command from its argv.
    ///
    /// # Errors
    /// [`EmptyCommand`] when `argv` is empty or its program is blank.
    pub fn new(argv: Vec<String>) -> Result<Self, EmptyCommand> {
        if argv.first().is_none_or(|p| p.trim().is_empty()) {
            return Err(EmptyCommand);
        }
        Ok(Self {
            argv,
            env: Vec::new(),
            cwd: None,
        })
    }

    /// The program (first word).
    #[must_use]
    pub fn program(&self) -> &str {
        self.argv.first().map_or("", String::as_str)
    }

    /// The whole command line.
    #[must_use]
    pub fn argv(&self) -> &[String] {
        &self.argv
    }

    /// How logs and errors name this agent: `stdio:<program>`.
    #[must_use]
    pub fn label(&self) -> String {
        format!("stdio:{}", self.program())
    }
}

/// A running child agent: lines in, lines out. The client drives it through its connection loop;
/// `chat-bridge agent-host` serves it over WebSocket.
pub struct StdioLink {
    child: Child,
    pgid: Option<Pid>,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Read>,
    label: String,
    /// How the process ended, once it has: its stdout may stay open (a launcher whose children
    /// hold it), so its exit, not only EOF, ends the link.
    exited: Option<String>,
}

/// Starts the child in its own process group, stdio piped, stderr to the log.
///
/// # Errors
/// [`Error::Spawn`] when the program cannot be started.
pub fn spawn(cmd: &AgentCommand, max_line: usize) -> Result<StdioLink, Error> {
    let mut c = Command::new(cmd.program());
    c.args(&cmd.argv[1..])
        .stdin(StdStdio::piped())
        .stdout(StdStdio::piped())
        .stderr(StdStdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    for name in private_env() {
        c.env_remove(name);
    }
    c.envs(cmd.env.iter().map(|(k, v)| (k, v)));
    if let Some(dir) = &cmd.cwd {
        c.current_dir(dir);
    }
    let label = cmd.label();
    let mut child = c.spawn().map_err(|e| Error::Spawn {
        command: label.clone(),
        reason: spawn_reason(cmd, &e),
    })?;
    let pgid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(Error::Spawn {
            command: label,
            reason: "the child's stdio was not piped".into(),
        });
    };
    tokio::spawn(log_stderr(stderr, label.clone()));
    // Reading happens in its own task so that a read in progress is never dropped half-way by the
    // connection loop's `select!` (a line read partly would be lost).
    let (tx, lines) = mpsc::channel(64);
    tokio::spawn(read_lines(BufReader::new(stdout), max_line, tx));
    tracing::info!(agent = %label, pid = pgid.map_or(0, Pid::as_raw), "agent process started");
    Ok(StdioLink {
        child,
        pgid,
        stdin: Some(stdin),
        lines,
        label,
        exited: None,
    })
}

/// Why a spawn failed, naming what is missing: the OS says only "No such file or directory" both
/// for a missing program and for a missing working directory.
fn spawn_reason(cmd: &AgentCommand, e: &std::io::Error) -> String {
    if let Some(dir) = &cmd.cwd
        && !dir.is_dir()
    {
        return format!(
            "its working directory {} does not exist or is not a directory",
            dir.display()
        );
    }
    if e.kind() == std::io::ErrorKind::NotFound {
        return format!("{e} (not found, or not on PATH)");
    }
    e.to_string()
}

/// Checks, without starting it, that the command could be started: its working directory exists
/// and its program is an executable file (by path, or found on `PATH`). `check-config` uses it, so
/// it refuses what start-up would (S3); the messages are the same.
///
/// # Errors
/// [`Error::Spawn`], worded as a failed start.
pub fn check(cmd: &AgentCommand) -> Result<(), Error> {
    let fail = |reason: String| Error::Spawn {
        command: cmd.label(),
        reason,
    };
    if let Some(dir) = &cmd.cwd
        && !dir.is_dir()
    {
        return Err(fail(format!(
            "its working directory {} does not exist or is not a directory",
            dir.display()
        )));
    }
    let program = cmd.program();
    let found = if program.contains('/') {
        let p = std::path::Path::new(program);
        let p = match &cmd.cwd {
            Some(dir) if p.is_relative() => dir.join(p),
            _ => p.to_path_buf(),
        };
        is_executable(&p)
    } else {
        std::env::var_os("PATH").is_some_and(|path| {
            std::env::split_paths(&path).any(|d| is_executable(&d.join(program)))
        })
    };
    if found {
        Ok(())
    } else {
        let e = std::io::Error::from(nix::errno::Errno::ENOENT);
        Err(fail(spawn_reason(cmd, &e)))
    }
}

fn is_executable(p: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// What one read from the child gave.
#[derive(Debug)]
pub enum Read {
    /// One line (without its newline).
    Line(Vec<u8>),
    /// A line longer than the limit was skipped; its length.
    TooLong(usize),
    /// The child closed stdout or exited; why.
    Ended(String),
}

async fn read_lines(mut stdout: BufReader<ChildStdout>, max_line: usize, tx: mpsc::Sender<Read>) {
    loop {
        let read = read_line(&mut stdout, max_line).await;
        let ended = matches!(read, Read::Ended(_));
        if tx.send(read).await.is_err() || ended {
            return;
        }
    }
}

async fn read_line(stdout: &mut BufReader<ChildStdout>, max_line: usize) -> Read {
    let mut line = Vec::new();
    let limit = max_line as u64 + 1;
    match stdout.take(limit).read_until(b'\n', &mut line).await {
        Ok(0) => return Read::Ended(String::new()),
        Ok(_) => {}
        Err(e) => return Read::Ended(format!("reading from the agent failed: {e}")),
    }
    if line.last() == Some(&b'\n') {
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        return Read::Line(line);
    }
    if line.len() as u64 >= limit {
        // Skip the rest of the oversized line.
        let mut skipped = line.len();
        let mut rest = Vec::new();
        loop {
            rest.clear();
            match stdout.take(64 << 10).read_until(b'\n', &mut rest).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    skipped += n;
                    if rest.last() == Some(&b'\n') {
                        break;
                    }
                }
            }
        }
        return Read::TooLong(skipped);
    }
    // A last line without its newline: stdout ended right after it.
    Read::Line(line)
}

impl fmt::Debug for StdioLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StdioLink")
            .field("agent", &self.label)
            .field("pgid", &self.pgid.map(Pid::as_raw))
            .finish_non_exhaustive()
    }
}

impl StdioLink {
    /// Writes one message and its newline. JSON from `serde_json` never contains a raw newline.
    ///
    /// # Errors
    /// The write's failure, in words: the child is gone.
    pub async fn send(&mut self, text: &str) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("the agent's stdin is closed")?;
        let mut line = Vec::with_capacity(text.len() + 1);
        line.extend_from_slice(text.as_bytes());
        line.push(b'\n');
        let written = match stdin.write_all(&line).await {
            Ok(()) => stdin.flush().await,
            Err(e) => Err(e),
        };
        match written {
            Ok(()) => Ok(()),
            // The child is gone: how it ended says more than the broken pipe.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(self.exit_reason().await),
            Err(e) => Err(format!("writing to the agent failed: {e}")),
        }
    }

    /// The next line from the child; cancel-safe. The link ends at EOF, or shortly after the
    /// process exits (what it wrote before is still read) even if something else holds its stdout.
    pub async fn recv(&mut self) -> Read {
        if let Some(how) = self.exited.clone() {
            return match tokio::time::timeout(Duration::from_millis(500), self.lines.recv()).await {
                Ok(Some(Read::Ended(_)) | None) | Err(_) => Read::Ended(how),
                Ok(Some(read)) => read,
            };
        }
        tokio::select! {
            line = self.lines.recv() => match line {
                Some(Read::Ended(why)) if !why.is_empty() => Read::Ended(why),
                Some(Read::Ended(_)) | None => Read::Ended(self.exit_reason().await),
                Some(read) => read,
            },
            status = self.child.wait() => {
                let how = match status {
                    Ok(s) => format!("the agent process exited ({s})"),
                    Err(e) => format!("the agent process could not be waited for: {e}"),
                };
                tracing::debug!(agent = %self.label, %how, "the agent process exited");
                self.exited = Some(how);
                Box::pin(self.recv()).await
            }
        }
    }

    async fn exit_reason(&mut self) -> String {
        // stdout closed; give the process a moment to be reaped so the reason names its status.
        match tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await {
            Ok(Ok(status)) => format!("the agent process exited ({status})"),
            _ => "the agent closed its stdout".into(),
        }
    }

    /// Ends the child and everything it started: stdin closed, `SIGTERM` to the group, `SIGKILL`
    /// after a grace, then reaped — no zombie is left.
    pub async fn close(&mut self) {
        drop(self.stdin.take());
        if let Some(pgid) = self.pgid {
            let _ = killpg(pgid, Signal::SIGTERM);
        }
        if tokio::time::timeout(TERM_GRACE, self.child.wait())
            .await
            .is_err()
        {
            tracing::warn!(agent = %self.label, "the agent did not exit on SIGTERM; killing its process group");
        }
        self.kill_group();
        let _ = self.child.wait().await;
        self.pgid = None;
    }

    fn kill_group(&self) {
        if let Some(pgid) = self.pgid {
            // The leader may be gone while its children still run: the group is what matters.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

impl Drop for StdioLink {
    fn drop(&mut self) {
        // Aborted without `close`: nothing of the agent outlives the link. `kill_on_drop` lets
        // tokio reap the leader.
        self.kill_group();
    }
}

/// Logs the child's stderr at debug, at most `STDERR_BUDGET` lines per window (agents print
/// command output there: never at info, R4).
async fn log_stderr(stderr: impl AsyncRead + Unpin, label: String) {
    let mut lines = BufReader::new(stderr).lines();
    let mut window = Instant::now();
    let (mut logged, mut dropped) = (0u32, 0u64);
    loop {
        let line = match lines.next_line().await {
            Ok(Some(l)) => l,
            Ok(None) | Err(_) => break,
        };
        if window.elapsed() >= STDERR_WINDOW {
            if dropped > 0 {
                tracing::debug!(agent = %label, dropped, "agent stderr lines not logged (rate limit)");
            }
            window = Instant::now();
            (logged, dropped) = (0, 0);
        }
        if logged < STDERR_BUDGET {
            logged += 1;
            let line: String = line.chars().take(500).collect();
            tracing::debug!(agent = %label, %line, "agent stderr");
        } else {
            dropped += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_command_is_refused() {
        assert_eq!(AgentCommand::new(vec![]), Err(EmptyCommand));
        assert_eq!(AgentCommand::new(vec![" ".into()]), Err(EmptyCommand));
        let c = AgentCommand::new(vec!["qwen".into(), "--acp".into()]).expect("valid");
        assert_eq!(c.label(), "stdio:qwen");
    }

    #[test]
    fn debug_shows_env_names_not_values() {
        let mut c = AgentCommand::new(vec!["agent".into()]).expect("valid");
        c.env
            .push(("OPENAI_API_KEY".into(), "sk-secret-value".into()));
        let shown = format!("{c:?}");
        assert!(shown.contains("OPENAI_API_KEY"));
        assert!(!shown.contains("sk-secret-value"));
    }

    #[tokio::test]
    async fn lines_round_trip_and_an_oversized_line_is_skipped() {
        let cmd = AgentCommand::new(vec![
            "sh".into(),
            "-c".into(),
            "read x; echo \"$x\"; head -c 100 /dev/zero | tr '\\0' a; echo; echo after".into(),
        ])
        .expect("valid");
        let mut link = spawn(&cmd, 50).expect("spawn");
        link.send("{\"a\":1}").await.expect("send");
        assert!(matches!(link.recv().await, Read::Line(l) if l == b"{\"a\":1}"));
        assert!(matches!(link.recv().await, Read::TooLong(n) if n >= 100));
        assert!(matches!(link.recv().await, Read::Line(l) if l == b"after"));
        assert!(matches!(link.recv().await, Read::Ended(r) if r.contains("exited")));
        link.close().await;
    }

    #[tokio::test]
    async fn the_launchers_exit_ends_the_link_while_its_children_hold_stdout() {
        // Issue 18 review, item 11: the direct child exits, a grandchild keeps stdout open.
        let cmd = AgentCommand::new(vec![
            "sh".into(),
            "-c".into(),
            "echo last; sleep 30 & exit 4".into(),
        ])
        .expect("valid");
        let mut link = spawn(&cmd, 1024).expect("spawn");
        assert!(matches!(link.recv().await, Read::Line(l) if l == b"last"));
        let ended = tokio::time::timeout(Duration::from_secs(5), link.recv())
            .await
            .expect("noticed without EOF");
        assert!(
            matches!(&ended, Read::Ended(r) if r.contains("exit status: 4")),
            "{ended:?}"
        );
        link.close().await;
    }

    #[tokio::test]
    async fn close_ends_the_whole_process_group() {
        // The child starts a grandchild that ignores SIGTERM; closing still ends it.
        let dir = std::env::temp_dir().join(format!("stdio-pg-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let pidfile = dir.join("grandchild");
        let script = format!(
            "sh -c 'trap \"\" TERM; sleep 60' & echo $! > {}; wait",
            pidfile.display()
        );
        let cmd = AgentCommand::new(vec!["sh".into(), "-c".into(), script]).expect("valid");
        let mut link = spawn(&cmd, 1024).expect("spawn");
        let mut pid = None;
        for _ in 0..100 {
            if let Ok(p) = std::fs::read_to_string(&pidfile)
                && let Ok(p) = p.trim().parse::<i32>()
            {
                pid = Some(p);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let pid = pid.expect("the grandchild started");
        link.close().await;
        // The grandchild was our child's child: once killed it is reaped by init, so it vanishes.
        let mut gone = false;
        for _ in 0..100 {
            let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z'))
            });
            if zombie || nix::sys::signal::kill(Pid::from_raw(pid), None).is_err() {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert!(gone, "the grandchild {pid} outlived close()");
    }
}
