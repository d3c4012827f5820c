//! S4 as on-call would meet it: a NUL typed at the console on PostgreSQL used to fail the event's
//! handling, stay in the inbox, and make every later start exit 1 (a crash loop under Kubernetes).
//! The real binary, the built-in shell agent, started twice on the same database.

use std::process::Output;

mod binary;
mod support;

fn run(db: &str, cwd: &std::path::Path, stdin: &[u8]) -> Output {
    binary::piped(
        &mut binary::command(cwd, &[("CHAT_BRIDGE_DATABASE__URL", db)]),
        stdin,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_nul_in_an_inbound_message_does_not_crash_loop_start_up() {
    let db = support::FreshDb::create("cb_s4_restart").await;
    let dir = tempfile::tempdir().expect("tmp");

    let first = run(&db.url, dir.path(), b"echo IN\0NUL\n");
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(
        first.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(
        stdout.contains("IN␀NUL"),
        "run and delivered, NUL shown as ␀: {stdout}"
    );

    for start in 2..=3 {
        let again = run(&db.url, dir.path(), b"echo next start\n");
        let stdout = String::from_utf8_lossy(&again.stdout);
        let stderr = String::from_utf8_lossy(&again.stderr);
        assert!(
            again.status.success(),
            "start {start} exits 0:\n{stdout}\n{stderr}"
        );
        assert!(
            stdout.contains("│ next start"),
            "start {start} serves: {stdout}"
        );
        assert!(
            !stdout.contains("IN␀NUL"),
            "the first message is not taken again: {stdout}"
        );
    }
    db.drop_now().await;
}
