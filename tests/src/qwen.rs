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
        self.stop();
        let port = self
            .url
            .rsplit(':')
            .next()
            .and_then(|p| p.split('/').next())
            .expect("port in the URL")
            .to_owned();
        let out = Command::new("bash")
            .arg(crate::shared_dir().join("peers/qwen/start.sh"))
            .arg(&self.state.0)
            .env("QWEN_PORT", &port)
            .env("QWEN_SERVER_TOKEN", &self.token)
            .output()
            .expect("run start.sh");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            stdout.lines().next(),
            Some(self.url.as_str()),
            "qwen-code did not come back on {}: {}",
            self.url,
            String::from_utf8_lossy(&out.stderr)
        );
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
