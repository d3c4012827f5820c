//! A checkout per thread (`workspace.isolation = "worktree"`): when the sessions' directory is in a
//! git repository, each conversation works in its own `git worktree` on the branch
//! `chat/<platform>-<short id>`, so two threads never edit the same files.
//!
//! Worktrees live under `workspace.dir` (default `<repository>/.chat-bridge/worktrees/`, one folder
//! per conversation); when that is inside the repository it is listed in the repository's
//! `.git/info/exclude`, so it never shows as untracked and is never committed. `/done` and the
//! idle sweep ([`crate::checkouts`]) remove a worktree — never one with uncommitted changes unless
//! forced — and always keep its branch.
//!
//! Git runs as a subprocess (`tokio::process`), never through a shell: every argument is one
//! argument, branch names are built from checked parts ([`Branch`]), paths are the bridge's own,
//! and `--` separates paths from options. Each call has a time limit and is killed when dropped.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;

/// How long one git call may take.
const GIT_TIMEOUT: Duration = Duration::from_secs(120);

/// How much of a git call's output is read (a patch larger than this is cut, with a note).
pub const OUTPUT_CAP: usize = 4 * 1024 * 1024;

/// How `workspace.isolation` shares the working directory between threads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// Every thread's session works in `daemon.cwd` (the default).
    #[default]
    Shared,
    /// Each thread gets its own `git worktree` of `daemon.cwd`'s repository.
    Worktree,
}

/// Why a git step failed (the words go to the thread; they carry no secret, only git's message).
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// `git` could not be started (not installed, not on `PATH`).
    #[error("git could not be run: {0}")]
    Spawn(std::io::Error),
    /// Git took longer than its limit and was stopped.
    #[error("git {0} took longer than {GIT_TIMEOUT:?} and was stopped")]
    TimedOut(String),
    /// Git said no.
    #[error("git {what} failed: {stderr}")]
    Failed {
        /// The subcommand.
        what: String,
        /// Its error output, trimmed and capped.
        stderr: String,
    },
    /// A file the bridge writes around git (the exclude list, a temporary index).
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// A thread's branch: `chat/<platform>-<short id>`, built only from checked parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Branch(String);

impl Branch {
    /// The branch of conversation `conversation` on `platform`; `None` when either part holds
    /// anything but ASCII letters, digits and `-` (a platform name or our own id never does).
    #[must_use]
    pub fn of(platform: &str, conversation: &str) -> Option<Self> {
        let short = short_id(conversation)?;
        let ok = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        };
        (ok(platform) && !platform.starts_with('-'))
            .then(|| Self(format!("chat/{platform}-{short}")))
    }

    /// The branch's name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Branch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The first 12 hex digits of a conversation id (a UUID), lower case; `None` for anything else.
#[must_use]
pub fn short_id(conversation: &str) -> Option<String> {
    let hex: String = conversation
        .chars()
        .filter(|c| *c != '-')
        .take(12)
        .collect();
    (hex.len() == 12 && hex.chars().all(|c| c.is_ascii_hexdigit()))
        .then(|| hex.to_ascii_lowercase())
}

/// What removing a worktree came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// Removed (or already gone); the branch stays. `saved`: the branch made for a commit that was
    /// on no branch (a detached `HEAD`, forced).
    Removed {
        /// The branch made at the detached `HEAD`, when one was.
        saved: Option<String>,
    },
    /// Kept: it has uncommitted changes (`git status --porcelain` lines).
    Dirty(Vec<String>),
    /// Kept: its `HEAD` is detached at a commit no branch holds (its short id); removing the
    /// worktree would lose it.
    Unbranched(String),
}

/// A thread's uncommitted work, as `/diff` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diff {
    /// `git diff --stat` (untracked files included).
    pub stat: String,
    /// The patch (cut at [`OUTPUT_CAP`]).
    pub patch: String,
    /// The patch was cut.
    pub cut: bool,
}

/// The repository the threads' worktrees are made of, and where they go.
#[derive(Debug, Clone)]
pub struct Worktrees {
    /// The repository's top level (the main checkout).
    repo: PathBuf,
    /// `daemon.cwd` relative to the top level (a session works in the same place of its worktree).
    sub: PathBuf,
    /// Where the worktrees go, one folder per conversation.
    dir: PathBuf,
    /// Worktrees are added and removed one at a time (git's own files are shared).
    lock: Arc<Mutex<()>>,
}

impl Worktrees {
    /// The worktrees of the repository `cwd` is in, under `dir` (default
    /// `<repository>/.chat-bridge/worktrees`); `Ok(None)` when `cwd` is not in a git repository
    /// (or git is not installed): the caller falls back to the shared directory.
    ///
    /// # Errors
    /// A directory that cannot be made or read, or the exclude list that cannot be written.
    pub async fn detect(cwd: &Path, dir: Option<&Path>) -> Result<Option<Self>, GitError> {
        let cwd = tokio::fs::canonicalize(cwd).await?;
        let top = match git(&cwd, ["rev-parse", "--show-toplevel"], None).await {
            Ok(out) => PathBuf::from(out.trim_end_matches('\n')),
            Err(GitError::Failed { .. } | GitError::Spawn(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let repo = tokio::fs::canonicalize(&top).await?;
        // A repository without a commit (just `git init`) has no `HEAD` to make a worktree of.
        if git(
            &repo,
            ["rev-parse", "--verify", "--quiet", "HEAD^{commit}"],
            None,
        )
        .await
        .is_err()
        {
            tracing::warn!(repository = %repo.display(), "the repository has no commit yet, so threads cannot get worktrees of it");
            return Ok(None);
        }
        let sub = cwd.strip_prefix(&repo).unwrap_or(Path::new("")).to_owned();
        let dir = match dir {
            Some(d) if d.is_absolute() => d.to_owned(),
            Some(d) => repo.join(d),
            None => repo.join(".chat-bridge").join("worktrees"),
        };
        // Inside the repository, every folder on the way must be a real directory: a symlink (or
        // a file) committed as `.chat-bridge` would put the worktrees somewhere else.
        if let Ok(rel) = dir.strip_prefix(&repo) {
            let mut at = repo.clone();
            for part in rel.components() {
                at.push(part);
                match tokio::fs::symlink_metadata(&at).await {
                    Ok(m) if m.file_type().is_symlink() || !m.is_dir() => {
                        return Err(GitError::Io(std::io::Error::other(format!(
                            "{} is not a directory (a symlink or a file, perhaps committed to the repository): the threads' worktrees cannot go there; remove it or set workspace.dir",
                            at.display()
                        ))));
                    }
                    _ => {}
                }
            }
        }
        tokio::fs::create_dir_all(&dir).await?;
        let dir = tokio::fs::canonicalize(&dir).await?;
        let me = Self {
            repo,
            sub,
            dir,
            lock: Arc::new(Mutex::new(())),
        };
        me.exclude().await?;
        Ok(Some(me))
    }

    /// The repository's top level.
    #[must_use]
    pub fn repo(&self) -> &Path {
        &self.repo
    }

    /// Where the worktrees go.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Lists the worktrees' folder in the repository's `info/exclude` when it is inside the
    /// repository, so it is never untracked noise nor committed.
    async fn exclude(&self) -> Result<(), GitError> {
        let Ok(rel) = self.dir.strip_prefix(&self.repo) else {
            return Ok(());
        };
        let Some(first) = rel.components().next() else {
            return Ok(());
        };
        let pattern = format!("/{}/", first.as_os_str().to_string_lossy());
        let common = git(
            &self.repo,
            ["rev-parse", "--path-format=absolute", "--git-common-dir"],
            None,
        )
        .await?;
        let info = PathBuf::from(common.trim_end_matches('\n')).join("info");
        tokio::fs::create_dir_all(&info).await?;
        let file = info.join("exclude");
        let now = match tokio::fs::read_to_string(&file).await {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e.into()),
        };
        if now.lines().any(|l| l.trim() == pattern) {
            return Ok(());
        }
        let mut next = now;
        if !next.is_empty() && !next.ends_with('\n') {
            next.push('\n');
        }
        next.push_str("# chat-bridge: the threads' worktrees and saved attachments\n");
        next.push_str(&pattern);
        next.push('\n');
        tokio::fs::write(&file, next).await?;
        Ok(())
    }

    /// The worktree folder of `conversation` (whether or not it exists).
    #[must_use]
    pub fn path(&self, conversation: &str) -> Option<PathBuf> {
        short_id(conversation).map(|s| self.dir.join(s))
    }

    /// Where a session of the worktree at `root` works (the same place `daemon.cwd` is in the
    /// repository).
    #[must_use]
    pub fn session_cwd(&self, root: &Path) -> PathBuf {
        root.join(&self.sub)
    }

    /// The worktree a session directory `cwd` is in, when it is one of these worktrees.
    #[must_use]
    pub fn owner_of(&self, cwd: &str) -> Option<PathBuf> {
        let rel = Path::new(cwd).strip_prefix(&self.dir).ok()?;
        let first = rel.components().next()?;
        Some(self.dir.join(first.as_os_str()))
    }

    /// The prefix every session directory in these worktrees starts with (for the store's query).
    #[must_use]
    pub fn prefix(&self) -> String {
        format!("{}/", self.dir.display())
    }

    /// The worktree of `conversation` on `platform`, made when it is not there: on the thread's
    /// branch when that exists (a thread closed before and written to again), else on a new
    /// branch from the repository's `HEAD`. Returns the worktree's folder and branch.
    ///
    /// # Errors
    /// A conversation id or platform a branch cannot be named after, or git refusing.
    pub async fn ensure(
        &self,
        platform: &str,
        conversation: &str,
    ) -> Result<(PathBuf, Branch), GitError> {
        let (Some(root), Some(branch)) =
            (self.path(conversation), Branch::of(platform, conversation))
        else {
            return Err(GitError::Failed {
                what: "worktree add".into(),
                stderr: "no branch can be named after this conversation".into(),
            });
        };
        let _one = self.lock.lock().await;
        if root.join(".git").exists() {
            return Ok((root, branch));
        }
        // A worktree folder deleted by hand is still registered: forget it first.
        git(&self.repo, ["worktree", "prune"], None).await?;
        let exists = git(
            &self.repo,
            [
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("refs/heads/{branch}"),
            ],
            None,
        )
        .await
        .is_ok();
        let root_arg = root.as_os_str();
        if exists {
            git(
                &self.repo,
                [
                    OsStr::new("worktree"),
                    OsStr::new("add"),
                    OsStr::new("--"),
                    root_arg,
                    OsStr::new(branch.as_str()),
                ],
                None,
            )
            .await?;
        } else {
            git(
                &self.repo,
                [
                    OsStr::new("worktree"),
                    OsStr::new("add"),
                    OsStr::new("-b"),
                    OsStr::new(branch.as_str()),
                    OsStr::new("--"),
                    root_arg,
                    OsStr::new("HEAD"),
                ],
                None,
            )
            .await?;
        }
        tracing::info!(branch = %branch, "made a thread's worktree");
        Ok((root, branch))
    }

    /// The uncommitted changes in the worktree at `root` (`git status --porcelain` lines,
    /// untracked files included).
    ///
    /// # Errors
    /// Git refusing.
    pub async fn changes(&self, root: &Path) -> Result<Vec<String>, GitError> {
        let out = git(
            root,
            ["status", "--porcelain=v1", "--untracked-files=all"],
            None,
        )
        .await?;
        Ok(out
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect())
    }

    /// The branch checked out in the worktree at `root` (`None`: a detached `HEAD`).
    ///
    /// # Errors
    /// Git refusing.
    pub async fn current_branch(&self, root: &Path) -> Result<Option<String>, GitError> {
        let out = git(root, ["branch", "--show-current"], None).await?;
        let b = out.trim();
        Ok((!b.is_empty()).then(|| b.to_owned()))
    }

    /// What changed in the worktree at `root` since its `HEAD`, untracked files included (read
    /// through a temporary index: the worktree's own index is not touched, and untracked files are
    /// only marked as intended, so no object is written).
    ///
    /// # Errors
    /// Git refusing, or the temporary index that cannot be written.
    pub async fn diff(&self, root: &Path) -> Result<Diff, GitError> {
        let index = std::env::temp_dir().join(format!(
            "chat-bridge-diff-{}.index",
            uuid::Uuid::new_v4().simple()
        ));
        let r = async {
            let idx = Some(index.as_path());
            git(root, ["read-tree", "HEAD"], idx).await?;
            // Intent to add: new files are listed, but none is written into the repository's
            // object store (a `/diff` of many large untracked files costs no disk).
            git(root, ["add", "--all", "--intent-to-add"], idx).await?;
            let diff = ["diff", "--no-ext-diff", "--no-textconv"];
            let stat = git(root, [&diff[..], &["--stat", "HEAD"]].concat(), idx).await?;
            let patch = git(root, [&diff[..], &["HEAD"]].concat(), idx).await?;
            Ok::<_, GitError>((stat, patch))
        }
        .await;
        let _ = tokio::fs::remove_file(&index).await;
        let (stat, mut patch) = r?;
        let cut = patch.len() >= OUTPUT_CAP;
        if cut {
            let mut end = OUTPUT_CAP.min(patch.len());
            while !patch.is_char_boundary(end) {
                end -= 1;
            }
            patch.truncate(end);
        }
        Ok(Diff {
            stat: stat.trim_end().to_owned(),
            patch,
            cut,
        })
    }

    /// The short id of the worktree's `HEAD` when it is detached at a commit no branch holds
    /// (removing the worktree would lose it).
    async fn unbranched(&self, root: &Path) -> Result<Option<String>, GitError> {
        if self.current_branch(root).await?.is_some() {
            return Ok(None);
        }
        let holders = git(
            root,
            [
                "for-each-ref",
                "--contains",
                "HEAD",
                "--format=%(refname)",
                "refs/heads",
            ],
            None,
        )
        .await?;
        if !holders.trim().is_empty() {
            return Ok(None);
        }
        let short = git(root, ["rev-parse", "--short=12", "HEAD"], None).await?;
        Ok(Some(short.trim().to_owned()))
    }

    /// Removes the worktree at `root` — not when it has uncommitted changes or its `HEAD` is
    /// detached at a commit no branch holds, unless `force`: then that commit gets the branch
    /// `<branch>-detached-<short id>` first (`branch`: the thread's). The branches are kept; no
    /// commit is ever lost.
    ///
    /// # Errors
    /// Git refusing.
    pub async fn remove(
        &self,
        root: &Path,
        force: bool,
        branch: &str,
    ) -> Result<Removal, GitError> {
        if !root.join(".git").exists() {
            let _one = self.lock.lock().await;
            git(&self.repo, ["worktree", "prune"], None).await?;
            return Ok(Removal::Removed { saved: None });
        }
        // The looks at this worktree run outside the lock: only adding and removing worktrees
        // (git's shared files) wait for each other, never for another thread's `git status`.
        if !force {
            let changes = self.changes(root).await?;
            if !changes.is_empty() {
                return Ok(Removal::Dirty(changes));
            }
        }
        let mut saved = None;
        if let Some(short) = self.unbranched(root).await? {
            if !force {
                return Ok(Removal::Unbranched(short));
            }
            let base = if branch.is_empty() {
                "chat/thread"
            } else {
                branch
            };
            let name = format!("{base}-detached-{short}");
            git(root, ["branch", "--", &name, "HEAD"], None).await?;
            tracing::info!(branch = %name, "kept a detached HEAD's commit on a branch");
            saved = Some(name);
        }
        let _one = self.lock.lock().await;
        let mut args = vec![OsStr::new("worktree"), OsStr::new("remove")];
        if force {
            // Twice: also a worktree git has marked locked.
            args.extend([OsStr::new("--force"), OsStr::new("--force")]);
        }
        args.extend([OsStr::new("--"), root.as_os_str()]);
        git(&self.repo, args, None).await?;
        tracing::info!("removed a thread's worktree");
        Ok(Removal::Removed { saved })
    }
}

/// Settings given to every git call, above any in the repository's own configuration: a
/// repository's hooks and its file-system monitor are programs an agent can set
/// (`git config core.fsmonitor …`, `.git/hooks/post-checkout`), and the bridge runs none of them;
/// nothing waits on a pager.
const SAFE_CONFIG: [&str; 6] = [
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.pager=cat",
];

/// Runs `git -C dir args…` (no shell, no prompt, no pager, no hooks, no inherited repository
/// variables and none of the bridge's `CHAT_BRIDGE_*` variables), with `index` as
/// `GIT_INDEX_FILE` when given; its standard output (capped at [`OUTPUT_CAP`]). Git runs in its
/// own process group, which is killed as a whole when the call times out or is dropped.
async fn git<I, S>(dir: &Path, args: I, index: Option<&Path>) -> Result<String, GitError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let what = args
        .iter()
        .take(2)
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    let mut cmd = tokio::process::Command::new("git");
    cmd.args(SAFE_CONFIG)
        .arg("-C")
        .arg(dir)
        .args(&args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .env_remove("GIT_COMMON_DIR")
        .env_remove("GIT_EXTERNAL_DIFF")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_PAGER", "cat")
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // Git (and anything git starts) never sees the bridge's configuration and secrets (S2).
    for key in daemon_client::stdio::private_env() {
        cmd.env_remove(key);
    }
    if let Some(index) = index {
        cmd.env("GIT_INDEX_FILE", index);
    }
    let child = cmd.spawn().map_err(GitError::Spawn)?;
    // Kills git's whole group (a hook or filter it started included) unless it ended by itself.
    let mut group = Group(child.id());
    let out = tokio::time::timeout(GIT_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| GitError::TimedOut(what.clone()))?
        .map_err(GitError::Io)?;
    group.0 = None;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stderr: String = stderr.trim().chars().take(500).collect();
        return Err(GitError::Failed { what, stderr });
    }
    let mut stdout = out.stdout;
    stdout.truncate(OUTPUT_CAP);
    Ok(String::from_utf8_lossy(&stdout).into_owned())
}

/// The process group of a running git call; killed when dropped before the call ended.
struct Group(Option<u32>);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pid) = self.0.and_then(|p| i32::try_from(p).ok()) {
            // ESRCH (the group is already gone) is the expected race, not an error.
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_branch_is_named_after_the_platform_and_the_conversation_only() {
        let b = Branch::of("slack", "3F2504E0-4F89-11D3-9A0C-0305E82C3301").expect("branch");
        assert_eq!(b.as_str(), "chat/slack-3f2504e04f89");
        for (platform, id) in [
            ("slack", "not-a-uuid"),
            ("sl ack", "3f2504e0-4f89-11d3-9a0c-0305e82c3301"),
            ("-x", "3f2504e0-4f89-11d3-9a0c-0305e82c3301"),
            ("slack", "../../etc/passwd-0000000000"),
            ("", "3f2504e0-4f89-11d3-9a0c-0305e82c3301"),
        ] {
            assert!(Branch::of(platform, id).is_none(), "{platform} {id}");
        }
    }

    /// A git call dropped (its thread gone, or timed out) takes everything it started with it: git
    /// runs in its own process group, killed as a whole.
    #[tokio::test]
    async fn a_dropped_git_call_kills_what_it_started() {
        let dir = tempfile::tempdir().expect("tmp");
        let pid_file = dir.path().join("child.pid");
        let alias = format!(
            "alias.slow=!sleep 300 & echo $! > '{}'; wait",
            pid_file.display()
        );
        let call = tokio::spawn({
            let d = dir.path().to_owned();
            async move { git(&d, ["-c", alias.as_str(), "slow"], None).await }
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let pid = loop {
            if let Some(pid) = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
            {
                break pid;
            }
            assert!(std::time::Instant::now() < deadline, "the alias ran");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        call.abort();
        let _ = call.await;
        let pid = nix::unistd::Pid::from_raw(pid);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        // Gone (or a zombie of its killed parent: signal 0 then fails once it is reaped; a
        // zombie's state in /proc is `Z`).
        while nix::sys::signal::kill(pid, None).is_ok()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.contains(") Z "))
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the sleep git started is still running"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[test]
    fn a_session_directory_belongs_to_the_worktree_it_is_in() {
        let w = Worktrees {
            repo: "/r".into(),
            sub: "svc".into(),
            dir: "/r/.chat-bridge/worktrees".into(),
            lock: Arc::default(),
        };
        let root = w
            .path("3f2504e0-4f89-11d3-9a0c-0305e82c3301")
            .expect("path");
        assert_eq!(root, Path::new("/r/.chat-bridge/worktrees/3f2504e04f89"));
        assert_eq!(w.session_cwd(&root), root.join("svc"));
        assert_eq!(
            w.owner_of("/r/.chat-bridge/worktrees/3f2504e04f89/svc"),
            Some(root)
        );
        assert_eq!(w.owner_of("/r/svc"), None);
        assert_eq!(w.owner_of("/r/.chat-bridge/worktrees"), None);
    }
}
