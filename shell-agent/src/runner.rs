//! Runs one shell command in a real PTY: output, heartbeats, timeout and cancel (H2, T1–T4).
//!
//! PTY I/O is blocking, so the reader and the exit waiter run on their own threads and only touch
//! [`Output`] and a oneshot. The async side does three things at once: sends output as it arrives
//! (waiting on a slow client never stalls the command — the reader keeps reading), ticks the
//! heartbeat timer (started only once the process exists, silenced by output, stopped at exit), and
//! ends the process group on timeout or cancel — whichever comes first is the cause (T2).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use portable_pty::{CommandBuilder, PtySize, native_pty_system};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::output::Output;

/// What to run and how.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The command, run as `sh -c COMMAND`.
    pub command: String,
    /// Working directory.
    pub cwd: PathBuf,
    /// Ends the process group after this long (T1).
    pub timeout: Option<Duration>,
    /// Heartbeat period (H2); `None` disables heartbeats.
    pub heartbeat: Option<Duration>,
    /// Output kept for the result (T4).
    pub output_cap: usize,
    /// Time between SIGTERM and SIGKILL when ending the process group.
    pub kill_grace: Duration,
}

/// Live progress, sent as a heartbeat's `_meta.shellProgress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Since the process started.
    pub elapsed: Duration,
    /// Since the process last printed, if it ever did.
    pub last_output_age: Option<Duration>,
    /// Lines printed so far.
    pub total_lines: u64,
    /// Bytes printed so far.
    pub total_bytes: u64,
    /// The command's timeout.
    pub timeout: Option<Duration>,
}

/// What the runner reports while the command runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunUpdate {
    /// The process exists (the heartbeat clock starts now).
    Spawned {
        /// Its process id (also its process group).
        pid: u32,
    },
    /// New output.
    Output(String),
    /// No output for a full heartbeat interval.
    Heartbeat(Progress),
}

/// How the command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// Exit code 0.
    Completed,
    /// Non-zero exit, or killed by a signal we did not send.
    Failed,
    /// The timeout fired first (T1, T2).
    TimedOut,
    /// Cancel came first (T2); or before the process existed (T3), when `pid` is `None`.
    Cancelled,
    /// The process could not be started.
    SpawnFailed(String),
}

/// The finished command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunResult {
    /// How it ended.
    pub outcome: RunOutcome,
    /// Kept output (tail, with a truncation notice when capped).
    pub output: String,
    /// Whether the output was capped (T4).
    pub truncated: bool,
    /// Exit code, when it exited rather than being killed.
    pub exit_code: Option<i64>,
    /// Signal number, when a signal ended it.
    pub signal: Option<i64>,
    /// Process id, if one was started.
    pub pid: Option<u32>,
    /// Time from start to end.
    pub duration: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    TimedOut,
    Cancelled,
}

struct Spawned {
    pid: u32,
    exit: oneshot::Receiver<portable_pty::ExitStatus>,
    // Held until the run ends: dropping the master closes the PTY.
    _master: Box<dyn portable_pty::MasterPty + Send>,
}

fn spawn(spec: &RunSpec, output: Arc<Output>) -> Result<Spawned, String> {
    let pty = native_pty_system()
        .openpty(PtySize {
            rows: 50,
            cols: 200,
            pixel_width: 0,
            pixel_height: 0,
        })
        .map_err(|e| format!("cannot open a PTY: {e}"))?;
    let mut cmd = CommandBuilder::new("sh");
    cmd.args(["-c", &spec.command]);
    cmd.cwd(&spec.cwd);
    cmd.env("TERM", "dumb");
    cmd.env("NO_COLOR", "1");
    // No output is read interactively: `git log`, `man` and the like must not wait in a pager.
    for pager in ["PAGER", "GIT_PAGER"] {
        if std::env::var_os(pager).is_none() {
            cmd.env(pager, "cat");
        }
    }
    // The bridge's own settings and secrets (`CHAT_BRIDGE_*`: chat tokens, the database URL, API
    // tokens) are not the command's business: a chat user's `env` must not print them (S2).
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("CHAT_BRIDGE_") {
            cmd.env_remove(key);
        }
    }
    let mut child = pty
        .slave
        .spawn_command(cmd)
        .map_err(|e| format!("cannot start sh: {e}"))?;
    // Only the child holds the slave now, so end of file arrives when it (and its group) is gone.
    drop(pty.slave);
    let pid = child.process_id().ok_or("the started process has no id")?;
    let mut reader = pty
        .master
        .try_clone_reader()
        .map_err(|e| format!("cannot read the PTY: {e}"))?;
    std::thread::Builder::new()
        .name(format!("pty-read-{pid}"))
        .spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => output.push(&buf[..n]),
                }
            }
            output.mark_eof();
        })
        .map_err(|e| format!("cannot start the PTY reader: {e}"))?;
    let (exit_tx, exit) = oneshot::channel();
    std::thread::Builder::new()
        .name(format!("pty-wait-{pid}"))
        .spawn(move || {
            if let Ok(status) = child.wait() {
                let _ = exit_tx.send(status);
            }
        })
        .map_err(|e| format!("cannot start the exit waiter: {e}"))?;
    Ok(Spawned {
        pid,
        exit,
        _master: pty.master,
    })
}

fn signal_group(pid: u32, signal: Signal) {
    if let Ok(pid) = i32::try_from(pid) {
        // ESRCH (the group is already gone) is the expected race, not an error.
        let _ = killpg(Pid::from_raw(pid), signal);
    }
}

/// The numbers of the signals a command usually dies of, from the names `strsignal` gives.
fn signal_number(name: &str) -> Option<i64> {
    Some(match name {
        "Hangup" => 1,
        "Interrupt" => 2,
        "Quit" => 3,
        "Aborted" => 6,
        "Killed" => 9,
        "Segmentation fault" => 11,
        "Broken pipe" => 13,
        "Alarm clock" => 14,
        "Terminated" => 15,
        _ => return name.strip_prefix("Signal ").and_then(|n| n.parse().ok()),
    })
}

/// Runs the command, sending updates on `updates` in order, until it ends.
///
/// A `cancel` that is already cancelled means no process is ever started (T3).
pub async fn run(
    spec: RunSpec,
    cancel: CancellationToken,
    updates: mpsc::Sender<RunUpdate>,
) -> RunResult {
    let started = Instant::now();
    let not_run = |outcome| RunResult {
        outcome,
        output: String::new(),
        truncated: false,
        exit_code: None,
        signal: None,
        pid: None,
        duration: started.elapsed(),
    };
    if cancel.is_cancelled() {
        return not_run(RunOutcome::Cancelled);
    }
    let output = Arc::new(Output::new(spec.output_cap));
    let spawned = {
        let (spec, output) = (spec.clone(), output.clone());
        tokio::task::spawn_blocking(move || spawn(&spec, output)).await
    };
    let Spawned {
        pid,
        mut exit,
        _master,
    } = match spawned {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return not_run(RunOutcome::SpawnFailed(e)),
        Err(e) => return not_run(RunOutcome::SpawnFailed(format!("spawn task failed: {e}"))),
    };
    let spawned_at = Instant::now();
    let cause: Arc<OnceLock<Cause>> = Arc::new(OnceLock::new());
    let done = CancellationToken::new();
    tokio::spawn(end_group_on_limit(
        pid,
        spec.timeout,
        spec.kill_grace,
        cancel,
        done.clone(),
        cause.clone(),
    ));
    let _ = updates.send(RunUpdate::Spawned { pid }).await;

    let interval = spec.heartbeat.filter(|d| !d.is_zero());
    let mut ticker = interval.map(|d| tokio::time::interval_at(tokio::time::Instant::now() + d, d));
    let mut last_sent = spawned_at;
    let status = loop {
        let tick = async {
            match ticker.as_mut() {
                Some(t) => t.tick().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            status = &mut exit => break status.ok(),
            () = output.changed.notified() => {
                if let Some(text) = output.take_pending() {
                    let _ = updates.send(RunUpdate::Output(text)).await;
                    last_sent = Instant::now();
                }
            }
            _ = tick => {
                let period = interval.unwrap_or_default();
                if last_sent.elapsed() + Duration::from_millis(5) >= period {
                    let c = output.counters();
                    let progress = Progress {
                        elapsed: spawned_at.elapsed(),
                        last_output_age: c.last_output.map(|t| t.elapsed()),
                        total_lines: c.total_lines,
                        total_bytes: c.total_bytes,
                        timeout: spec.timeout,
                    };
                    let _ = updates.send(RunUpdate::Heartbeat(progress)).await;
                    last_sent = Instant::now();
                }
            }
        }
    };
    // The leader is gone: end anything it left behind in its group, then read to end of file.
    signal_group(pid, Signal::SIGKILL);
    done.cancel();
    let drain_until = tokio::time::Instant::now() + Duration::from_secs(2);
    while !output.is_eof() {
        if tokio::time::timeout_at(drain_until, output.changed.notified())
            .await
            .is_err()
        {
            break;
        }
    }
    if let Some(text) = output.take_pending() {
        let _ = updates.send(RunUpdate::Output(text)).await;
    }
    let kept = output.kept();
    let signal = status
        .as_ref()
        .and_then(|s| s.signal())
        .and_then(signal_number);
    let exit_code = match (&status, signal) {
        (Some(s), None) => Some(i64::from(s.exit_code())),
        _ => None,
    };
    let outcome = match cause.get() {
        Some(Cause::TimedOut) => RunOutcome::TimedOut,
        Some(Cause::Cancelled) => RunOutcome::Cancelled,
        None if exit_code == Some(0) => RunOutcome::Completed,
        None => RunOutcome::Failed,
    };
    RunResult {
        outcome,
        output: kept.text,
        truncated: kept.truncated,
        exit_code,
        signal,
        pid: Some(pid),
        duration: spawned_at.elapsed(),
    }
}

/// Ends the process group when the timeout or a cancel comes first, recording which (T2).
async fn end_group_on_limit(
    pid: u32,
    timeout: Option<Duration>,
    grace: Duration,
    cancel: CancellationToken,
    done: CancellationToken,
    cause: Arc<OnceLock<Cause>>,
) {
    let timer = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    let first = tokio::select! {
        () = timer => Cause::TimedOut,
        () = cancel.cancelled() => Cause::Cancelled,
        () = done.cancelled() => return,
    };
    let _ = cause.set(first);
    signal_group(pid, Signal::SIGTERM);
    tokio::select! {
        () = tokio::time::sleep(grace) => signal_group(pid, Signal::SIGKILL),
        () = done.cancelled() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_names_map_back_to_numbers() {
        assert_eq!(signal_number("Terminated"), Some(15));
        assert_eq!(signal_number("Killed"), Some(9));
        assert_eq!(signal_number("Signal 34"), Some(34));
        assert_eq!(signal_number("Something else"), None);
    }
}
