//! The thread's own checkout (`workspace.isolation = "worktree"`, [`crate::worktree`]): made before
//! the session that works in it, named in `/status`, shown by `/diff`, removed by `/done` and by
//! the idle sweep (never with uncommitted changes unless forced; the branch is kept).

use std::path::PathBuf;

use super::Runner;
use crate::channel::{Message, OutFile, Tone};
use crate::conversation::effects;
use crate::core::{lock, render};
use crate::store::{Result, conversations, now_ms, schedules};
use crate::worktree::{Branch, GitError, Removal, Worktrees};

/// How many changed files a refusal to remove a checkout lists.
const LISTED: usize = 10;

/// `/done`'s usage.
pub const DONE_USAGE: &str = "Usage: `/done` closes this thread and removes its own checkout (its branch is kept); `/done force` removes the checkout even with uncommitted changes.";

impl Runner {
    /// This thread's worktree, when its session works in one (it may have been removed since).
    fn own_checkout(&self) -> Option<(Worktrees, PathBuf)> {
        let w = self.core.cfg.worktrees.clone()?;
        let root = w.owner_of(&self.conv.cwd)?;
        Some((w, root))
    }

    fn branch(&self) -> Option<Branch> {
        Branch::of(&self.conv.platform, &self.conv.id)
    }

    /// Makes (or finds) the thread's worktree before a session that may need it: a new session, or
    /// one that already works in a worktree (made again when it was removed, on the kept branch).
    ///
    /// # Errors
    /// Git refusing; the turn then does not start.
    pub(super) async fn prepare_checkout(&mut self) -> std::result::Result<(), GitError> {
        let Some(w) = self.core.cfg.worktrees.clone() else {
            return Ok(());
        };
        let owned = w.owner_of(&self.conv.cwd).is_some();
        if !(owned || self.state.session.is_none() || self.state.abandon_session) {
            // A session from before worktrees were turned on keeps its directory.
            return Ok(());
        }
        let (root, _) = w.ensure(&self.conv.platform, &self.conv.id).await?;
        let dir = w.session_cwd(&root);
        tokio::fs::create_dir_all(&dir).await?;
        self.checkout = Some(dir);
        Ok(())
    }

    /// The line `/status` adds about the thread's checkout; `None` without worktrees.
    pub(super) async fn checkout_status(&self) -> Option<String> {
        self.core.cfg.worktrees.as_ref()?;
        let thread_branch = self.branch().map(|b| b.to_string()).unwrap_or_default();
        let Some((w, root)) = self.own_checkout() else {
            return Some(
                "Checkout: this thread gets its own with its next new session.".to_owned(),
            );
        };
        if !root.join(".git").exists() {
            return Some(format!(
                "Checkout: removed; its branch `{thread_branch}` is kept."
            ));
        }
        Some(match w.current_branch(&root).await {
            Ok(Some(b)) if b == thread_branch => {
                format!("Checkout: branch `{b}` in `{}`.", root.display())
            }
            Ok(Some(b)) => format!(
                "Checkout: branch `{b}` in `{}` (the thread's branch is `{thread_branch}`).",
                root.display()
            ),
            Ok(None) => format!(
                "Checkout: a detached HEAD in `{}` (the thread's branch is `{thread_branch}`).",
                root.display()
            ),
            Err(e) => format!("Checkout: `{}` ({e}).", root.display()),
        })
    }

    /// `/diff`: the stat and the patch of what changed in the thread's checkout since its `HEAD`
    /// (new files included); a patch longer than a message shows comes as a file.
    pub(super) async fn cmd_diff(&mut self) -> Result<()> {
        let Some((w, root)) = self.own_checkout() else {
            let text = if self.core.cfg.worktrees.is_some() {
                "This thread has no checkout of its own yet: it gets one with its next new session."
            } else {
                "This thread has no checkout of its own: sessions share the working directory (`workspace.isolation = \"shared\"`)."
            };
            return self.notice(Tone::Neutral, text).await;
        };
        let branch = self.branch().map(|b| b.to_string()).unwrap_or_default();
        if !root.join(".git").exists() {
            return self
                .notice(
                    Tone::Neutral,
                    &format!("This thread's checkout was removed; its branch `{branch}` is kept."),
                )
                .await;
        }
        let diff = match w.diff(&root).await {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(conversation = %self.conv.id, error = %e, "could not read a thread's changes");
                return self
                    .notice(
                        Tone::Error,
                        &format!("Could not read this thread's changes: {e}"),
                    )
                    .await;
            }
        };
        if diff.stat.is_empty() {
            return self
                .notice(
                    Tone::Neutral,
                    &format!(
                        "No uncommitted changes in this thread's checkout (branch `{branch}`)."
                    ),
                )
                .await;
        }
        let r = &self.core.redactor;
        let current = w
            .current_branch(&root)
            .await
            .ok()
            .flatten()
            .unwrap_or(branch);
        let stat = cap_stat(&r.redact(&diff.stat), self.core.cfg.output_cap);
        let patch = r.redact(&diff.patch);
        let mut m = Message::text(
            Tone::Neutral,
            format!("📝 uncommitted changes on `{current}`"),
        );
        let shown = stat.len() + 2 + patch.len();
        if shown <= self.core.cfg.output_cap && !diff.cut {
            m.code = Some(format!("{stat}\n\n{}", patch.trim_end()));
        } else {
            m.code = Some(stat.clone());
            m.body = Some(format!(
                "The whole patch ({}{}) is in the file changes.diff.",
                crate::conversation::files::human_bytes(patch.len() as u64),
                if diff.cut { ", cut" } else { "" }
            ));
            m.file = Some(OutFile {
                name: "changes.diff".into(),
                content: patch,
            });
        }
        let key = self.state.next_notice_key(now_ms());
        let mut tx = self.begin().await?;
        let turn_id = self.state.turn.as_ref().map(|t| t.row.id.clone());
        self.record(&mut tx, turn_id.as_deref(), "notice", "bridge", &stat, None)
            .await?;
        self.enqueue(&mut tx, &effects::post(&self.target, &key, m))
            .await?;
        self.commit(tx).await
    }

    /// `/done` (`force`: `/done force`): nothing may run or wait; the checkout is removed (not with
    /// uncommitted changes unless forced), its branch kept, its schedules removed, and the thread
    /// closed.
    pub(super) async fn cmd_done(&mut self, rest: &str) -> Result<()> {
        let force = match rest.trim() {
            "" => false,
            "force" => true,
            _ => return self.notice(Tone::Warning, DONE_USAGE).await,
        };
        if self.state.turn.is_some() || !self.state.queue.is_empty() {
            return self
                .notice(
                    Tone::Warning,
                    "A turn is running or messages wait in this thread: `/cancel` first, then `/done`.",
                )
                .await;
        }
        self.close(force, None).await
    }

    /// The idle sweep's turn ([`crate::checkouts`]): the thread has had no activity since
    /// `before` (Unix ms) — unless something ran meanwhile, it gets what `/done` does.
    pub(super) async fn on_expire(&mut self, before: i64) -> Result<()> {
        if self.state.turn.is_some() || !self.state.queue.is_empty() {
            return Ok(());
        }
        let now = {
            let mut c = self.core.store.conn().await?;
            conversations::get(&mut c, &self.conv.id).await?
        };
        match now {
            Some(c) if c.status == "active" && c.updated_at < before => {}
            _ => return Ok(()),
        }
        self.close(false, Some(before)).await
    }

    /// Removes the checkout (when the thread has one) and closes the thread; `idle`: the sweep
    /// does it, for a thread without activity since then (Unix ms).
    async fn close(&mut self, force: bool, idle: Option<i64>) -> Result<()> {
        let retain = self.core.cfg.retain;
        let branch = self.branch().map(|b| b.to_string()).unwrap_or_default();
        let mut removed = false;
        let mut saved = None;
        if let Some((w, root)) = self.own_checkout() {
            match w.remove(&root, force, &branch).await {
                Ok(Removal::Removed { saved: s }) => {
                    removed = true;
                    saved = s;
                }
                Ok(Removal::Unbranched(short)) => {
                    let text = match idle {
                        Some(_) => format!(
                            "This thread has been idle for {}, but its checkout is on a detached HEAD at commit `{short}`, which no branch holds, so it is kept. Put it on a branch (`git switch -c NAME`), or `/done force` to keep it on a new branch and remove the checkout.",
                            idle_for(retain)
                        ),
                        None => format!(
                            "This thread's checkout is on a detached HEAD at commit `{short}`, which no branch holds, so it is kept and the thread stays open. Put it on a branch (`git switch -c NAME`), or `/done force` to keep it on a new branch and remove the checkout."
                        ),
                    };
                    if let Some(before) = idle {
                        let at = before
                            .saturating_add(i64::try_from(retain.as_millis()).unwrap_or(i64::MAX));
                        let mut c = self.core.store.write_conn().await?;
                        conversations::touch(&mut c, &self.conv.id, "active", at).await?;
                    }
                    return self.notice(Tone::Warning, &text).await;
                }
                Ok(Removal::Dirty(changes)) => {
                    let mut files: Vec<String> = changes
                        .iter()
                        .take(LISTED)
                        .map(|l| format!("`{l}`"))
                        .collect();
                    if changes.len() > LISTED {
                        files.push(format!("… and {} more", changes.len() - LISTED));
                    }
                    let text = match idle {
                        Some(_) => format!(
                            "This thread has been idle for {}, but its checkout has uncommitted changes, so it is kept: {}. Commit them, or `/done force` to remove it anyway (its branch `{branch}` is kept either way).",
                            idle_for(retain),
                            files.join(", ")
                        ),
                        None => format!(
                            "This thread's checkout has uncommitted changes, so it is kept and the thread stays open: {}. Commit them (or ask the agent to), or `/done force` to remove it anyway (its branch `{branch}` is kept either way).",
                            files.join(", ")
                        ),
                    };
                    if let Some(before) = idle {
                        // Asked again after another `workspace.retain` (from the sweep's now), not
                        // at every sweep.
                        let at = before
                            .saturating_add(i64::try_from(retain.as_millis()).unwrap_or(i64::MAX));
                        let mut c = self.core.store.write_conn().await?;
                        conversations::touch(&mut c, &self.conv.id, "active", at).await?;
                    }
                    return self.notice(Tone::Warning, &text).await;
                }
                Err(e) => {
                    tracing::warn!(conversation = %self.conv.id, error = %e, "could not remove a thread's worktree");
                    return self
                        .notice(
                            Tone::Error,
                            &format!("Could not remove this thread's checkout: {e}. The thread stays open."),
                        )
                        .await;
                }
            }
        }
        if let Some(s) = self.state.session.take() {
            lock(&self.core.sessions).remove(&s);
        }
        self.state.session_ready = false;
        self.checkout = None;
        self.conv.daemon_session = None;
        let text = match (removed, idle) {
            (true, Some(_)) => format!(
                "This thread had been idle for {}: its checkout was removed and the thread closed. Its branch `{branch}` is kept; a new message here starts a new session on it.",
                idle_for(retain)
            ),
            (true, None) => format!(
                "Done: this thread's checkout was removed and the thread closed. Its branch `{branch}` is kept; a new message here starts a new session on it."
            ),
            (false, _) => {
                "Done: this thread is closed; a new message here starts a new session.".to_owned()
            }
        };
        let mut tx = self.begin().await?;
        conversations::close(tx.conn(), &self.conv.id, now_ms()).await?;
        // A closed thread runs nothing on its own: its schedules go with it.
        let mut dropped = 0;
        for s in schedules::of(tx.conn(), &self.conv.id).await? {
            if schedules::remove(tx.conn(), &self.conv.id, &s.id).await? {
                dropped += 1;
            }
        }
        let text = match saved {
            Some(b) => format!("{text} Its detached HEAD's commit is kept on the branch `{b}`."),
            None => text,
        };
        let text = match dropped {
            0 => text,
            1 => format!("{text} Its schedule was removed."),
            n => format!("{text} Its {n} schedules were removed."),
        };
        let key = self.state.next_notice_key(now_ms());
        let msg = render::notice(&self.core.redactor, Tone::Neutral, &text);
        self.record(&mut tx, None, "notice", "bridge", &self.kept(&text), None)
            .await?;
        self.enqueue(&mut tx, &effects::post(&self.target, &key, msg))
            .await?;
        self.commit(tx).await?;
        self.conv.status = "closed".into();
        tracing::info!(conversation = %self.conv.id, removed, idle = idle.is_some(), "thread closed");
        Ok(())
    }
}

/// A `git diff --stat` that fits `cap` characters: the first files, a count of those left out, and
/// the summary line (`N files changed, …`).
fn cap_stat(stat: &str, cap: usize) -> String {
    if stat.chars().count() <= cap {
        return stat.to_owned();
    }
    let lines: Vec<&str> = stat.lines().collect();
    let Some((summary, files)) = lines.split_last() else {
        return String::new();
    };
    let budget = cap.saturating_sub(summary.chars().count() + 40);
    let mut out = String::new();
    let mut shown = 0;
    for line in files {
        if out.chars().count() + line.chars().count() + 1 > budget {
            break;
        }
        out.push_str(line);
        out.push('\n');
        shown += 1;
    }
    out.push_str(&format!(" … {} more files\n{summary}", files.len() - shown));
    out
}

/// `workspace.retain` as people say it: `7 days`, `1 day`, `12 hours`, `1 hour`, else `1h 30m`.
fn idle_for(d: std::time::Duration) -> String {
    let secs = d.as_secs();
    let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    if secs > 0 && secs.is_multiple_of(86_400) {
        plural(secs / 86_400, "day", "days")
    } else if secs > 0 && secs.is_multiple_of(3600) {
        plural(secs / 3600, "hour", "hours")
    } else {
        daemon_client::liveness::human_duration(d)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_long_stat_keeps_its_first_files_and_its_summary_within_the_cap() {
        let mut stat: String = (0..500)
            .map(|i| format!(" src/file{i}.rs | 2 +-\n"))
            .collect();
        stat.push_str(" 500 files changed, 500 insertions(+), 500 deletions(-)");
        let capped = super::cap_stat(&stat, 1_000);
        assert!(capped.chars().count() <= 1_000, "{}", capped.len());
        assert!(capped.starts_with(" src/file0.rs | 2 +-\n"), "{capped}");
        assert!(
            capped
                .ends_with(" more files\n 500 files changed, 500 insertions(+), 500 deletions(-)"),
            "{capped}"
        );
        assert_eq!(
            super::cap_stat("a | 1 +\n 1 file changed", 1_000),
            "a | 1 +\n 1 file changed"
        );
    }

    #[test]
    fn retain_reads_as_people_say_it() {
        use std::time::Duration;
        assert_eq!(super::idle_for(Duration::from_secs(7 * 86_400)), "7 days");
        assert_eq!(super::idle_for(Duration::from_secs(86_400)), "1 day");
        assert_eq!(super::idle_for(Duration::from_secs(3600)), "1 hour");
        assert_eq!(super::idle_for(Duration::from_secs(5400)), "1h 30m");
    }
}
