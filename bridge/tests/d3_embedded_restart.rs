//! D3 on the embedded default (issue 14 item 6): the built-in shell agent lives in the bridge's
//! process, so a SIGKILL mid-command takes the agent's session with it. After a restart the open
//! turn ends at once as interrupted — its tool message says so, its row is closed — and the next
//! message runs right away instead of waiting out the idle limit.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;

fn bridge(db: &str, cwd: &std::path::Path) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_chat-bridge"))
        .current_dir(cwd)
        .env("CHAT_BRIDGE_DATABASE__URL", db)
        .env_remove("CHAT_BRIDGE_CONFIG")
        .env_remove("CHAT_BRIDGE_DAEMON__URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chat-bridge")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d3_embedded_sigkill_mid_command_then_restart_interrupts_at_once_and_the_next_message_runs()
{
    let dir = tempfile::tempdir().expect("tmp");
    let db = format!("sqlite://{}", dir.path().join("d3.db").display());

    let mut first = bridge(&db, dir.path());
    let mut stdin = first.stdin.take().expect("stdin");
    writeln!(stdin, "sleep 30").expect("write");
    let mut reader = BufReader::new(first.stdout.take().expect("stdout"));
    let mut first_out = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !first_out.contains("⏳ sleep 30") {
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).expect("read") > 0,
            "exited early: {first_out}"
        );
        first_out.push_str(&line);
        assert!(Instant::now() < deadline, "no tool message: {first_out}");
    }
    support::wait_delivered(&db).await;
    first.kill().expect("SIGKILL");
    let _ = first.wait();
    drop(stdin);

    let started = Instant::now();
    let second = tokio::task::spawn_blocking({
        let (db, cwd) = (db.clone(), dir.path().to_owned());
        move || {
            let mut child = bridge(&db, &cwd);
            let mut stdin = child.stdin.take().expect("stdin");
            writeln!(stdin, "echo after the restart").expect("write");
            drop(stdin);
            let mut out = String::new();
            child
                .stdout
                .take()
                .expect("stdout")
                .read_to_string(&mut out)
                .expect("read");
            (child.wait().expect("wait"), out)
        }
    });
    let (status, out) = tokio::time::timeout(Duration::from_secs(30), second)
        .await
        .expect("the restarted bridge finished well inside the 2-minute idle limit")
        .expect("join");
    assert!(status.success(), "{out}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}: {out}",
        started.elapsed()
    );
    assert!(out.contains("⏹ sleep 30 — interrupted"), "{out}");
    assert!(out.contains("✅ echo after the restart"), "{out}");
    let interrupted = out.find("⏹ sleep 30").expect("interrupted");
    let next = out.find("✅ echo after the restart").expect("next");
    assert!(
        interrupted < next,
        "the old turn ends before the next runs: {out}"
    );

    let store = chat_bridge::store::Store::connect(&db)
        .await
        .expect("store");
    let mut c = store.conn().await.expect("conn");
    let convs = chat_bridge::store::history::list(&mut c, &Default::default())
        .await
        .expect("list");
    for conv in convs.items {
        for call in chat_bridge::store::tool_calls::of_conversation(&mut c, &conv.id)
            .await
            .expect("calls")
        {
            assert_ne!(call.status, "running", "no row left running: {call:?}");
        }
    }
    drop(c);
    store.close().await;
}
