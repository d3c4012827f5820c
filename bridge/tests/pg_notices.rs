//! Issue 6: PostgreSQL's NOTICEs (`relation "_sqlx_migrations" already exists, skipping`, sent by
//! every idempotent migration run) are not printed on start, on `migrate` or on `history` commands.

mod binary;
mod support;

use std::process::Command;

fn bridge(url: &str, args: &[&str]) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_chat-bridge"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("CHAT_BRIDGE_") {
            c.env_remove(k);
        }
    }
    c.args(args)
        .args(["--database-url", url])
        .output()
        .expect("run chat-bridge")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_postgres_notices_are_not_printed_by_migrate_or_history() {
    let db = support::FreshDb::create("notices").await;
    for args in [
        &["migrate"][..],
        &["migrate"],
        &["history", "list"],
        &["history", "search", "x"],
    ] {
        let out = bridge(&db.url, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("already exists") && !stderr.contains("_sqlx_migrations"),
            "{args:?} printed a PostgreSQL notice: {stderr}"
        );
    }
    db.drop_now().await;
}

/// The driver's log budget (`log_budget`) sits beside the level filter; combined wrongly it once
/// lowered the whole log to warnings on PostgreSQL — the bridge's own info lines ("turn started")
/// vanished. A console session on PostgreSQL at the default level must show them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_log_level_shows_the_bridges_own_lines_on_postgres() {
    let db = support::FreshDb::create("loglevel").await;
    let dir = tempfile::tempdir().expect("tmp");
    let mut c = binary::command(dir.path(), &[]);
    c.args(["--database-url", &db.url]);
    let out = binary::piped(&mut c, b"echo logged\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("turn started") && stderr.contains("turn ended"),
        "info lines at the default level: {stderr}"
    );
    db.drop_now().await;
}
