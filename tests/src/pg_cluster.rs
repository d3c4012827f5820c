//! A throwaway PostgreSQL cluster of the test's own (never a shared server), so a fault test can
//! stop and start it: `initdb` into a temporary directory, `pg_ctl start` on a free loopback port,
//! run as the `postgres` user when the test runs as root (as in CI).

use std::path::PathBuf;
use std::process::Command;

/// A running cluster; stopped and removed on drop.
#[derive(Debug)]
pub struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    /// The port it listens on (127.0.0.1).
    pub port: u16,
}

fn pg_bin() -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("initdb").exists())
        .collect();
    found.sort();
    found
        .pop()
        .expect("PostgreSQL server binaries (apt-get install postgresql): the fault tests need their own cluster")
}

fn is_root() -> bool {
    // The effective uid is the second field of `Uid:` in /proc/self/status.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

impl Cluster {
    fn pg(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Creates and starts a cluster.
    ///
    /// # Panics
    /// When PostgreSQL is not installed or does not start (with its log).
    #[must_use]
    pub fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("chat-bridge-fault-pg")
            .tempdir()
            .expect("tmp");
        if is_root() {
            let status = Command::new("chown")
                .args(["postgres"])
                .arg(dir.path())
                .status()
                .expect("chown");
            assert!(status.success(), "chown the cluster directory to postgres");
        }
        let port = crate::free_port();
        let cluster = Self {
            dir,
            bin: pg_bin(),
            port,
        };
        let out = cluster
            .pg("initdb")
            .arg("-D")
            .arg(cluster.data())
            .args(["-U", "postgres", "-A", "trust", "--no-sync"])
            .output()
            .expect("initdb");
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.start_again();
        cluster
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the (stopped) cluster again on the same port and data.
    ///
    /// # Panics
    /// When it does not start.
    pub fn start_again(&self) {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let out = self
            .pg("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.path().join("log"))
            .args(["-w", "-t", "30", "-o", &opts, "start"])
            .output()
            .expect("pg_ctl start");
        assert!(
            out.status.success(),
            "pg_ctl start: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
        );
    }

    /// Stops the cluster (`fast`: every connection is closed at once, as in a restart).
    ///
    /// # Panics
    /// When it does not stop.
    pub fn stop(&self) {
        let out = self
            .pg("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "fast", "-w", "stop"])
            .output()
            .expect("pg_ctl stop");
        assert!(
            out.status.success(),
            "pg_ctl stop: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self
            .pg("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "stop"])
            .output();
    }
}
