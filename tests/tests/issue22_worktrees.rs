//! Issue 22, a checkout per thread (`workspace.isolation = "worktree"`), end to end: the built-in
//! shell agent on a real git repository in a temporary directory, on PostgreSQL and SQLite. Two
//! threads edit the same file at the same time without touching each other's; `/diff` shows each
//! one's changes; `/done` removes a worktree and keeps its branch, and refuses while there are
//! uncommitted changes (unless forced); the idle sweep does the same; a non-git directory falls back
//! to the shared one.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chat_bridge::app::Application;
use chat_bridge::channel::{Inbound, Message, console};
use chat_bridge::clock::ManualClock;
use chat_bridge::store::conversations::{self, Conversation};
use chat_bridge::worktree::{Branch, Isolation};
use chat_bridge_tests::bridge::{config, settle};
use chat_bridge_tests::on_both;
use chat_bridge_tests::recorder::Recorder;

/// `git args…` in `dir`, its output; panics when git fails.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether `git args…` succeeds in `dir`.
fn git_ok(dir: &Path, args: &[&str]) -> bool {
    std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .expect("git runs")
        .status
        .success()
}

/// A repository with one commit (`README`), its committer set for the agent's commits.
fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path();
    git(p, &["init", "-q", "-b", "main"]);
    git(p, &["config", "user.email", "agent@example.com"]);
    git(p, &["config", "user.name", "Agent"]);
    std::fs::write(p.join("README"), "hello\n").expect("write");
    git(p, &["add", "README"]);
    git(p, &["commit", "-q", "-m", "start"]);
    dir
}

/// A message in thread `thread` of the console platform.
fn said(thread: &str, text: &str) -> Inbound {
    let mut m = console::inbound(text);
    m.target.thread = thread.to_owned();
    m
}

async fn conversation(app: &Application, thread: &str) -> Conversation {
    let mut c = app.store.conn().await.expect("conn");
    let key = conversations::Key {
        platform: "console",
        workspace: "local",
        channel: "console",
        thread,
    };
    conversations::find(&mut c, &key)
        .await
        .expect("find")
        .expect("the thread's conversation")
}

/// The worktree a conversation's session works in.
fn checkout_of(conv: &Conversation) -> PathBuf {
    PathBuf::from(&conv.cwd)
}

fn branch_of(conv: &Conversation) -> String {
    Branch::of(&conv.platform, &conv.id)
        .expect("a branch name")
        .to_string()
}

fn titles(rec: &Recorder) -> Vec<String> {
    rec.latest().into_iter().map(|(_, m)| m.title).collect()
}

fn diffs(rec: &Recorder) -> Vec<Message> {
    rec.latest()
        .into_iter()
        .map(|(_, m)| m)
        .filter(|m| m.title.starts_with("📝 uncommitted changes on"))
        .collect()
}

on_both! {
    async fn two_threads_edit_the_same_file_at_once_in_their_own_checkouts_and_done_keeps_the_branch(db) {
        let repo = repo();
        let root = std::fs::canonicalize(repo.path()).expect("canonical");
        let mut cfg = config(&db.url, &root);
        cfg.workspace.isolation = Isolation::Worktree;
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");

        // At the same time: both turns run together, each in its own thread.
        app.core.accept(said("t1", "git checkout -q -b x; sleep 0.5; echo A > f")).await.expect("accept");
        app.core.accept(said("t2", "sleep 0.5; echo B > f")).await.expect("accept");
        settle(&app).await;
        let (one, two) = (conversation(&app, "t1").await, conversation(&app, "t2").await);
        let (wt1, wt2) = (checkout_of(&one), checkout_of(&two));
        let worktrees = root.join(".chat-bridge/worktrees");
        assert!(wt1.starts_with(&worktrees) && wt2.starts_with(&worktrees) && wt1 != wt2, "{wt1:?} {wt2:?}");
        assert_eq!(std::fs::read_to_string(wt1.join("f")).expect("f in t1").trim(), "A");
        assert_eq!(std::fs::read_to_string(wt2.join("f")).expect("f in t2").trim(), "B");
        assert!(!root.join("f").exists(), "the main checkout is untouched");
        assert_eq!(git(&wt1, &["branch", "--show-current"]).trim(), "x");
        assert_eq!(git(&wt2, &["branch", "--show-current"]).trim(), branch_of(&two));
        assert!(branch_of(&two).starts_with("chat/console-"), "{}", branch_of(&two));
        // The worktrees are no untracked noise in the main checkout.
        assert_eq!(git(&root, &["status", "--porcelain"]), "", "main checkout clean");

        // `/diff` shows each thread its own changes; `/status` names the branch.
        app.core.accept(said("t1", "/diff")).await.expect("accept");
        settle(&app).await;
        app.core.accept(said("t2", "/diff")).await.expect("accept");
        app.core.accept(said("t2", "/status")).await.expect("accept");
        settle(&app).await;
        let d = diffs(&rec);
        assert_eq!(d.len(), 2, "{:#?}", rec.latest());
        let code = |m: &Message| m.code.clone().unwrap_or_default();
        assert!(d[0].title.contains("`x`") && code(&d[0]).contains(" f | 1 +") && code(&d[0]).contains("+A"), "{:#?}", d[0]);
        assert!(!code(&d[0]).contains("+B"));
        assert!(d[1].title.contains(&branch_of(&two)) && code(&d[1]).contains("+B") && !code(&d[1]).contains("+A"), "{:#?}", d[1]);
        let status = titles(&rec).into_iter().find(|t| t.starts_with("Idle.")).expect("status");
        assert!(status.contains(&format!("Checkout: branch `{}`", branch_of(&two))), "{status}");

        // Uncommitted changes: `/done` keeps the worktree (and the thread open).
        app.core.accept(said("t1", "/done")).await.expect("accept");
        settle(&app).await;
        assert!(titles(&rec).iter().any(|t| t.starts_with("This thread's checkout has uncommitted changes, so it is kept") && t.contains("`?? f`")), "{:#?}", titles(&rec));
        assert!(wt1.join("f").exists(), "not removed");
        assert_eq!(conversation(&app, "t1").await.status, "active");

        // Committed: `/done` removes the worktree and keeps the branch with the commit.
        app.core.accept(said("t2", "git add f && git commit -q -m B")).await.expect("accept");
        settle(&app).await;
        app.core.accept(said("t2", "/every 1h git status")).await.expect("accept");
        app.core.accept(said("t2", "/done")).await.expect("accept");
        settle(&app).await;
        assert!(!wt2.exists(), "t2's worktree removed");
        let mut c = app.store.conn().await.expect("conn");
        assert!(chat_bridge::store::schedules::of(&mut c, &two.id).await.expect("schedules").is_empty(), "its schedule went with it");
        drop(c);
        assert!(git_ok(&root, &["rev-parse", "--verify", "--quiet", &format!("refs/heads/{}", branch_of(&two))]), "branch kept");
        assert_eq!(git(&root, &["show", &format!("{}:f", branch_of(&two))]).trim(), "B");
        let closed = conversation(&app, "t2").await;
        assert_eq!((closed.status.as_str(), closed.daemon_session.as_deref()), ("closed", None));
        assert!(titles(&rec).iter().any(|t| t.starts_with("Done: this thread's checkout was removed") && t.contains(&branch_of(&two)) && t.ends_with("Its schedule was removed.")), "{:#?}", titles(&rec));

        // Forced: removed with its changes; both of t1's branches stay.
        app.core.accept(said("t1", "/done force")).await.expect("accept");
        settle(&app).await;
        assert!(!wt1.exists(), "t1's worktree removed");
        assert!(git_ok(&root, &["rev-parse", "--verify", "--quiet", "refs/heads/x"]));
        assert!(git_ok(&root, &["rev-parse", "--verify", "--quiet", &format!("refs/heads/{}", branch_of(&one))]));

        // Written to again, a closed thread works on its kept branch in a new session.
        app.core.accept(said("t2", "cat f")).await.expect("accept");
        settle(&app).await;
        let again = conversation(&app, "t2").await;
        assert_eq!((again.status.as_str(), checkout_of(&again)), ("active", wt2.clone()));
        assert!(again.daemon_session.is_some() && again.daemon_session != two.daemon_session);
        assert_eq!(std::fs::read_to_string(wt2.join("f")).expect("f again").trim(), "B");
        assert_eq!(git(&root, &["status", "--porcelain"]), "", "main checkout still clean");
        app.shutdown().await;
    }

    async fn idle_threads_lose_their_clean_worktrees_to_the_sweep_and_keep_dirty_ones(db) {
        let repo = repo();
        let root = std::fs::canonicalize(repo.path()).expect("canonical");
        let mut cfg = config(&db.url, &root);
        cfg.workspace.isolation = Isolation::Worktree;
        cfg.workspace.retain = Duration::from_secs(3600);
        // The test steps the sweep itself, on a clock it moves.
        cfg.workspace.sweep_every = Duration::from_secs(86_400);
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        app.core.accept(said("clean", "git status --short")).await.expect("accept");
        app.core.accept(said("dirty", "echo wip > notes.txt")).await.expect("accept");
        settle(&app).await;
        let (clean, dirty) = (conversation(&app, "clean").await, conversation(&app, "dirty").await);
        let clock = ManualClock::at(chat_bridge::store::now_ms());
        assert_eq!(chat_bridge::checkouts::sweep(&app.core, &clock).await.expect("sweep"), 0, "not idle yet");
        clock.advance(Duration::from_secs(2 * 3600));
        assert_eq!(chat_bridge::checkouts::sweep(&app.core, &clock).await.expect("sweep"), 2);
        settle(&app).await;
        assert!(!checkout_of(&clean).exists(), "the clean worktree is removed");
        assert!(git_ok(&root, &["rev-parse", "--verify", "--quiet", &format!("refs/heads/{}", branch_of(&clean))]), "branch kept");
        assert!(checkout_of(&dirty).join("notes.txt").exists(), "the dirty one is kept");
        let t = titles(&rec);
        assert!(t.iter().any(|t| t.starts_with("This thread had been idle for 1 hour: its checkout was removed")), "{t:#?}");
        assert!(t.iter().any(|t| t.starts_with("This thread has been idle for 1 hour, but its checkout has uncommitted changes") && t.contains("notes.txt")), "{t:#?}");
        assert_eq!(conversation(&app, "clean").await.status, "closed");
        // Asked once: the dirty thread waits another `retain` before the next look.
        assert_eq!(chat_bridge::checkouts::sweep(&app.core, &clock).await.expect("sweep"), 0);
        app.shutdown().await;
    }

    async fn a_patch_longer_than_a_message_shows_comes_as_a_file_with_the_stat(db) {
        let repo = repo();
        let root = std::fs::canonicalize(repo.path()).expect("canonical");
        let mut cfg = config(&db.url, &root);
        cfg.workspace.isolation = Isolation::Worktree;
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        app.core.accept(said("t1", "seq 1 2000 > numbers.txt; echo changed >> README")).await.expect("accept");
        settle(&app).await;
        app.core.accept(said("t1", "/diff")).await.expect("accept");
        settle(&app).await;
        let d = diffs(&rec);
        assert_eq!(d.len(), 1, "{:#?}", rec.latest());
        let code = d[0].code.clone().unwrap_or_default();
        assert!(code.contains("README") && code.contains("numbers.txt") && code.contains("2 files changed"), "the stat in the message: {code}");
        let file = d[0].file.clone().expect("the patch as a file");
        assert_eq!(file.name, "changes.diff");
        assert!(file.content.contains("+2000") && file.content.contains("+changed"), "the whole patch");
        assert!(d[0].body.as_deref().is_some_and(|b| b.contains("changes.diff")));
        // The worktree's own index is untouched: the new file is still untracked there.
        let wt = checkout_of(&conversation(&app, "t1").await);
        assert!(git(&wt, &["status", "--porcelain"]).contains("?? numbers.txt"));
        // And `/diff` wrote nothing into the repository's object store: not the untracked file,
        // not the changed one (a `/diff` of many large files costs no disk).
        for file in ["numbers.txt", "README"] {
            let id = git(&wt, &["hash-object", "--", file]);
            assert!(!git_ok(&root, &["cat-file", "-e", id.trim()]), "{file} is no object after /diff");
        }
        app.shutdown().await;
    }

    async fn a_directory_that_is_no_git_repository_falls_back_to_the_shared_one(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        let mut cfg = config(&db.url, &root);
        cfg.workspace.isolation = Isolation::Worktree;
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        app.core.accept(said("t1", "echo here > f")).await.expect("accept");
        app.core.accept(said("t1", "/diff")).await.expect("accept");
        settle(&app).await;
        assert_eq!(std::fs::read_to_string(root.join("f")).expect("f").trim(), "here");
        assert_eq!(PathBuf::from(conversation(&app, "t1").await.cwd), root);
        assert!(titles(&rec).iter().any(|t| t.starts_with("This thread has no checkout of its own: sessions share")), "{:#?}", titles(&rec));
        app.shutdown().await;
    }
}

/// Where the repository's hooks write what they saw (set by the test that runs
/// [`git_in_a_bridge_with_a_secret_in_its_environment`] in a process of its own).
const HOOK_REPO: &str = "ISSUE22_HOOK_REPO";

/// S2: the bridge's own git calls (the worktree made for a thread, `/diff`, `/done`) run none of
/// the repository's programs — an agent can set `core.fsmonitor` or write a `post-checkout` hook —
/// and pass none of the bridge's `CHAT_BRIDGE_*` variables to git. The bridge runs in a process of
/// its own (this test binary again), whose environment alone holds a fake secret.
#[test]
fn s2_the_bridges_git_runs_no_repository_hook_and_passes_on_no_chat_bridge_variable() {
    let repo = repo();
    let root = std::fs::canonicalize(repo.path()).expect("canonical");
    let seen = root.join("hook-saw.txt");
    let hook = root.join(".git/hooks/post-checkout");
    let script = format!("#!/bin/sh\nenv >> '{}'\nexit 0\n", seen.display());
    std::fs::write(&hook, &script).expect("hook");
    let monitor = root.join(".git/fsmonitor.sh");
    std::fs::write(&monitor, &script).expect("fsmonitor");
    for f in [&hook, &monitor] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    git(
        &root,
        &["config", "core.fsmonitor", &monitor.to_string_lossy()],
    );
    std::fs::write(root.join(".git/info/exclude"), "hook-saw.txt\n").expect("exclude");
    let out = std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args([
            "--exact",
            "git_in_a_bridge_with_a_secret_in_its_environment",
            "--ignored",
            "--nocapture",
        ])
        .env("CHAT_BRIDGE_TEST_CANARY", "canary-secret-value")
        .env(HOOK_REPO, &root)
        .output()
        .expect("the bridge's process runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && text.contains("1 passed"), "{text}");
    let saw = std::fs::read_to_string(&seen).unwrap_or_default();
    assert!(
        !saw.contains("CHAT_BRIDGE_") && !saw.contains("canary-secret-value"),
        "a hook saw the bridge's secret:\n{saw}"
    );
    assert!(
        !seen.exists(),
        "no hook nor file-system monitor ran:\n{saw}"
    );
    // The bridge did make (and remove) a worktree on a thread branch.
    assert!(
        git(&root, &["for-each-ref", "refs/heads/chat/"]).contains("chat/console-"),
        "a thread's branch"
    );
}

/// The bridge's side of the test above: a thread in a worktree, `/diff`, `/done force`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run in a process of its own by s2_the_bridges_git_runs_no_repository_hook_and_passes_on_no_chat_bridge_variable"]
async fn git_in_a_bridge_with_a_secret_in_its_environment() {
    let root = PathBuf::from(std::env::var_os(HOOK_REPO).expect("started by the S2 test"));
    assert!(std::env::var_os("CHAT_BRIDGE_TEST_CANARY").is_some());
    let db = chat_bridge_tests::db::TestDb::new(chat_bridge::store::Backend::Sqlite).await;
    let mut cfg = config(&db.url, &root);
    cfg.workspace.isolation = Isolation::Worktree;
    let rec = Arc::new(Recorder::default());
    let app = Application::build(&cfg, rec.clone()).await.expect("build");
    app.core
        .accept(said("t1", "echo x > f"))
        .await
        .expect("accept");
    settle(&app).await;
    let wt = checkout_of(&conversation(&app, "t1").await);
    assert!(wt.join("f").exists(), "the turn ran in its worktree");
    app.core.accept(said("t1", "/diff")).await.expect("accept");
    settle(&app).await;
    assert_eq!(diffs(&rec).len(), 1, "{:#?}", rec.latest());
    app.core
        .accept(said("t1", "/done force"))
        .await
        .expect("accept");
    settle(&app).await;
    assert!(!wt.exists(), "removed");
    app.shutdown().await;
    db.cleanup().await;
}

on_both! {
    async fn a_daemon_that_refuses_a_session_in_the_worktree_is_not_called_unreachable(db) {
        let repo = repo();
        let root = std::fs::canonicalize(repo.path()).expect("canonical");
        let daemon = chat_bridge_tests::scripted::ScriptedDaemon::start(|mut peer: chat_bridge_tests::scripted::Peer| async move {
            peer.handshake().await;
            while let Some(msg) = peer.recv().await {
                if msg["method"] == "session/new" {
                    peer.send(serde_json::json!({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32602,
                        "message": "Workspace mismatch: runtime is bound to \"/ws\" but request asked for another directory"}})).await;
                }
            }
        })
        .await;
        let mut cfg = config(&db.url, &root);
        cfg.daemon.url = Some(daemon.url.clone());
        cfg.daemon.token = Some(daemon.token.clone().into());
        cfg.workspace.isolation = Isolation::Worktree;
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        app.core.accept(said("t1", "hello")).await.expect("accept");
        settle(&app).await;
        let t = titles(&rec);
        assert!(t.iter().any(|t| t.starts_with("The agent would not open a session for this thread") && t.contains("Workspace mismatch")), "{t:#?}");
        assert!(!t.iter().any(|t| t.contains("Cannot reach the agent")), "{t:#?}");
        app.shutdown().await;
    }
}

on_both! {
    async fn done_never_loses_a_commit_on_a_detached_head(db) {
        let repo = repo();
        let root = std::fs::canonicalize(repo.path()).expect("canonical");
        let mut cfg = config(&db.url, &root);
        cfg.workspace.isolation = Isolation::Worktree;
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        app.core.accept(said("t1", "git checkout -q --detach && echo kept > g && git add g && git commit -q -m detached")).await.expect("accept");
        settle(&app).await;
        let conv = conversation(&app, "t1").await;
        let wt = checkout_of(&conv);
        let sha = git(&wt, &["rev-parse", "--short=12", "HEAD"]).trim().to_owned();
        assert_eq!(git(&wt, &["status", "--porcelain"]), "", "nothing uncommitted");

        app.core.accept(said("t1", "/done")).await.expect("accept");
        settle(&app).await;
        let t = titles(&rec);
        assert!(t.iter().any(|t| t.starts_with("This thread's checkout is on a detached HEAD at commit") && t.contains(&sha)), "{t:#?}");
        assert!(wt.join("g").exists(), "kept");
        assert_eq!(conversation(&app, "t1").await.status, "active");

        app.core.accept(said("t1", "/done force")).await.expect("accept");
        settle(&app).await;
        assert!(!wt.exists(), "removed when forced");
        let saved = format!("{}-detached-{sha}", branch_of(&conv));
        assert_eq!(git(&root, &["show", &format!("{saved}:g")]).trim(), "kept", "the commit is on a branch");
        assert!(titles(&rec).iter().any(|t| t.starts_with("Done: this thread's checkout was removed") && t.contains(&format!("`{saved}`"))), "{:#?}", titles(&rec));
        app.shutdown().await;
    }
}

on_both! {
    async fn the_sweep_hands_a_thread_on_once_until_it_answered_and_warns_once(db) {
        let repo = repo();
        let root = std::fs::canonicalize(repo.path()).expect("canonical");
        let mut cfg = config(&db.url, &root);
        cfg.workspace.isolation = Isolation::Worktree;
        cfg.workspace.retain = Duration::from_secs(3600);
        cfg.workspace.sweep_every = Duration::from_secs(86_400);
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        for t in ["d1", "d2", "d3"] {
            app.core.accept(said(t, "echo wip > notes.txt")).await.expect("accept");
        }
        settle(&app).await;
        let clock = ManualClock::at(chat_bridge::store::now_ms());
        clock.advance(Duration::from_secs(2 * 3600));
        // Sweeps come faster than the runners answer (their git takes a while): each thread is
        // handed on once.
        let mut handed = Vec::new();
        for _ in 0..3 {
            handed.push(chat_bridge::checkouts::sweep(&app.core, &clock).await.expect("sweep"));
        }
        settle(&app).await;
        assert_eq!(handed, vec![3, 0, 0], "handed on once each");
        let warned = titles(&rec).into_iter().filter(|t| t.contains("but its checkout has uncommitted changes")).count();
        assert_eq!(warned, 3, "one notice per thread: {:#?}", titles(&rec));
        // Answered: the next look is another `retain` later.
        assert_eq!(chat_bridge::checkouts::sweep(&app.core, &clock).await.expect("sweep"), 0);
        clock.advance(Duration::from_secs(3600 + 1));
        assert_eq!(chat_bridge::checkouts::sweep(&app.core, &clock).await.expect("sweep"), 3);
        settle(&app).await;
        app.shutdown().await;
    }
}

on_both! {
    async fn a_repository_without_a_commit_falls_back_to_the_shared_directory(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        git(&root, &["init", "-q"]);
        let mut cfg = config(&db.url, &root);
        cfg.workspace.isolation = Isolation::Worktree;
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        app.core.accept(said("t1", "echo here > f")).await.expect("accept");
        settle(&app).await;
        assert_eq!(std::fs::read_to_string(root.join("f")).expect("the message ran").trim(), "here");
        assert!(!titles(&rec).iter().any(|t| t.contains("invalid reference")), "{:#?}", titles(&rec));
        app.shutdown().await;
    }

    async fn a_committed_chat_bridge_symlink_is_refused_naming_the_path_once(db) {
        let repo = repo();
        let root = std::fs::canonicalize(repo.path()).expect("canonical");
        let elsewhere = tempfile::tempdir().expect("tmp");
        std::os::unix::fs::symlink(elsewhere.path(), root.join(".chat-bridge")).expect("symlink");
        git(&root, &["add", ".chat-bridge"]);
        git(&root, &["commit", "-q", "-m", "a symlink"]);
        let mut cfg = config(&db.url, &root);
        cfg.workspace.isolation = Isolation::Worktree;
        let err = Application::build(&cfg, Arc::new(Recorder::default())).await.expect_err("refused");
        let text = format!("{err:#}");
        let path = root.join(".chat-bridge").display().to_string();
        assert_eq!(text.matches(&path).count(), 1, "{text}");
        assert!(text.contains("not a directory") && text.contains("workspace.dir"), "{text}");
        assert_eq!(std::fs::read_dir(elsewhere.path()).expect("read").count(), 0, "nothing made outside the repository");
    }
}
