//! S4 as a property, on PostgreSQL and on SQLite: arbitrary text (all of Unicode, NUL, control
//! characters, 100 kB lines) and arbitrary bytes (invalid UTF-8) go the whole way — a chat message →
//! the built-in shell agent (a real PTY) → tool output → the store → chat actions through the outbox
//! to a recording platform. Every result is stored and delivered, exactly as expected once NUL is
//! shown as `␀` (and the PTY has turned `\n` into `\r\n`, which the agent turns back); no turn is left
//! open, nothing is dead-lettered, nothing is retried.
//!
//! Each case sends three messages in a thread of its own: `printf '%b'` of the bytes escaped (or, past
//! 8 kB, `cat` of a file holding them), `printf '%s'` of the text as typed, and the raw text itself as
//! the command (with a `timeout=`, since it is run by a shell). One bridge per backend serves every
//! case. `PROPTEST_CASES` sets the number of cases (default 10 per backend).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use chat_bridge::app::Application;
use chat_bridge::channel::{Inbound, Tone, console};
use chat_bridge::core::redact::Redactor;
use chat_bridge::core::render::{CHAT_OUTPUT_CAP, cap_output};
use chat_bridge::store::bind::storable;
use chat_bridge::store::{Backend, conversations, inbound, tool_calls, turns};
use chat_bridge_tests::bridge::{config, settle};
use chat_bridge_tests::db::TestDb;
use chat_bridge_tests::recorder::Recorder;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// Characters the path is most likely to mishandle, and any other.
fn hostile_char() -> impl Strategy<Value = char> {
    prop_oneof![
        3 => any::<char>(),
        2 => (0u32..0x20).prop_map(|c| char::from_u32(c).unwrap_or('\0')),
        1 => prop::sample::select(vec!['\0', '\n', '\r', '\t', '\u{7f}', '\u{1b}', '\'', '\\', '%', '"', '\u{2028}', '\u{feff}', '\u{fffd}', '␀']),
    ]
}

/// Arbitrary text: short strings of any character, or one line of at least 100 kB.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::collection::vec(hostile_char(), 0..300).prop_map(|v| v.into_iter().collect()),
        1 => prop::collection::vec(hostile_char().prop_filter("one line", |c| !matches!(c, '\n' | '\r' | '\'')), 1..8)
            .prop_map(|unit| {
                let unit: String = unit.into_iter().collect();
                unit.repeat(100_000 / unit.len() + 1)
            }),
    ]
}

/// Arbitrary bytes, sometimes 100 kB of them.
fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::collection::vec(any::<u8>(), 0..3000),
        1 => prop::collection::vec(any::<u8>(), 100_000..=100_000),
    ]
}

/// What a PTY and the shell agent make of output: `\n` leaves the PTY as `\r\n` (ONLCR), the agent
/// decodes it lossily and turns `\r\n` back into `\n`.
fn through_pty(bytes: &[u8]) -> String {
    let mut onlcr = Vec::with_capacity(bytes.len() + bytes.len() / 16);
    for &b in bytes {
        if b == b'\n' {
            onlcr.push(b'\r');
        }
        onlcr.push(b);
    }
    String::from_utf8_lossy(&onlcr).replace("\r\n", "\n")
}

/// The code block a result message shows for the daemon's `output`: capped as the daemon sent it,
/// NUL made visible on its way through the outbox.
fn shown(redactor: &Redactor, output: &str) -> Option<String> {
    let output = redactor.redact(output.trim_end());
    (!output.trim().is_empty())
        .then(|| storable(&cap_output(&output, CHAT_OUTPUT_CAP)).into_owned())
}

fn in_thread(text: &str, thread: &str) -> Inbound {
    let mut m = console::inbound(text);
    m.target.thread = thread.into();
    m
}

struct Rig {
    app: Application,
    rec: Arc<Recorder>,
    dir: tempfile::TempDir,
    redactor: Redactor,
    cases: AtomicUsize,
}

async fn one_case(rig: &Rig, text: &str, bytes: &[u8], raw: &str) -> Result<(), TestCaseError> {
    let case = rig.cases.fetch_add(1, Ordering::SeqCst);
    let thread = format!("case-{case}");
    let bytes_cmd = if bytes.len() <= 8192 {
        let escaped: String = bytes.iter().map(|b| format!("\\0{b:03o}")).collect();
        format!("printf '%b' '{escaped}'")
    } else {
        let file = format!("case-{case}.bin");
        std::fs::write(rig.dir.path().join(&file), bytes).expect("write the bytes");
        format!("cat {file}")
    };
    // A shell command is one `sh -c` argument, which Linux caps at 128 KiB (MAX_ARG_STRLEN): text
    // past that (100 kB of NUL is 300 kB as `␀`) goes through a file, as bytes do.
    let text_shown = storable(text);
    let text_cmd = if text_shown.len() <= 96 * 1024 {
        format!("printf '%s' '{}'", text.replace('\'', r"'\''"))
    } else {
        let file = format!("case-{case}.txt");
        std::fs::write(rig.dir.path().join(&file), text_shown.as_bytes()).expect("write the text");
        format!("cat {file}")
    };
    let raw_cmd = format!("timeout=5s {raw}");
    let before = rig.rec.posts().len();
    for p in [&bytes_cmd, &text_cmd, &raw_cmd] {
        rig.app
            .core
            .accept(in_thread(p, &thread))
            .await
            .map_err(|e| TestCaseError::fail(format!("accept: {e}")))?;
    }
    settle(&rig.app).await;

    // Stored: every turn ended, every call terminal, the outputs exactly as expected.
    let store = &rig.app.store;
    let mut c = store.conn().await.expect("conn");
    let key = conversations::Key {
        platform: "console",
        workspace: "local",
        channel: "console",
        thread: &thread,
    };
    let conv = conversations::find(&mut c, &key)
        .await
        .expect("find")
        .expect("the case's conversation");
    let turns = turns::of_conversation(&mut c, &conv.id)
        .await
        .expect("turns");
    prop_assert_eq!(turns.len(), 3, "a turn per message");
    prop_assert!(
        turns.iter().all(|t| t.status == "ended"),
        "{:?}",
        turns.iter().map(|t| &t.status).collect::<Vec<_>>()
    );
    let raw_stored = storable(&raw_cmd);
    prop_assert_eq!(
        turns[2].prompt.as_str(),
        raw_stored.trim(),
        "the raw text is stored as sent"
    );
    let calls = tool_calls::of_conversation(&mut c, &conv.id)
        .await
        .expect("calls");
    prop_assert!(calls.len() >= 2, "{} calls", calls.len());
    prop_assert!(
        calls.iter().all(|t| t.status != "running"),
        "no call left running"
    );
    // What the daemon sends (the text arrives with NUL made visible already), and what is stored.
    let sent_bytes = through_pty(bytes);
    let expected_bytes = storable(&sent_bytes).into_owned();
    let expected_text = through_pty(storable(text).as_bytes());
    prop_assert_eq!(calls[0].status.as_str(), "completed");
    prop_assert_eq!(
        calls[0].output.as_deref(),
        Some(expected_bytes.as_str()),
        "the bytes, stored"
    );
    prop_assert_eq!(calls[1].status.as_str(), "completed");
    prop_assert_eq!(
        calls[1].output.as_deref(),
        Some(expected_text.as_str()),
        "the text, stored"
    );
    prop_assert!(
        inbound::unhandled(&mut c).await.expect("inbox").is_empty(),
        "nothing left in the inbox"
    );
    prop_assert!(
        inbound::dead_letters(&mut c, 1)
            .await
            .expect("dead")
            .is_empty(),
        "nothing set aside"
    );
    drop(c);

    // Delivered: one message per call, terminal, showing the same text.
    let latest: Vec<_> = rig.rec.latest().into_iter().skip(before).collect();
    prop_assert!(
        latest.len() >= calls.len(),
        "a message per call: {} for {}",
        latest.len(),
        calls.len()
    );
    prop_assert!(
        latest.iter().all(|(_, m)| m.tone != Tone::Running),
        "nothing left running in the chat"
    );
    prop_assert_eq!(latest[0].1.tone, Tone::Success);
    prop_assert_eq!(
        latest[0].1.code.clone(),
        shown(&rig.redactor, &sent_bytes),
        "the bytes, delivered"
    );
    prop_assert_eq!(latest[1].1.tone, Tone::Success);
    prop_assert_eq!(
        latest[1].1.code.clone(),
        shown(&rig.redactor, &expected_text),
        "the text, delivered"
    );
    for (_, m) in &latest {
        let fields = [
            Some(&m.title),
            m.body.as_ref(),
            m.code.as_ref(),
            m.footer.as_ref(),
        ];
        prop_assert!(
            fields.iter().flatten().all(|f| !f.contains('\0')),
            "no NUL reached the chat"
        );
    }
    Ok(())
}

fn property(backend: Backend) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (db, rig) = rt.block_on(async {
        let db = TestDb::new(backend).await;
        let dir = tempfile::tempdir().expect("tmp");
        let rec = Arc::new(Recorder::default());
        let mut cfg = config(&db.url, dir.path());
        // This is about text, not liveness: 100 kB outputs on two busy cores must not read as a stall.
        cfg.liveness.idle = std::time::Duration::from_secs(30);
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        let redactor = Redactor::new(&[]).expect("redactor");
        (
            db,
            Rig {
                app,
                rec,
                dir,
                redactor,
                cases: AtomicUsize::new(0),
            },
        )
    });
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let mut runner = TestRunner::new(Config {
        cases,
        max_shrink_iters: 64,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&(text(), bytes(), text()), |(t, b, raw)| {
        rt.block_on(one_case(&rig, &t, &b, &raw))
    });
    rt.block_on(async {
        rig.app.shutdown().await;
        db.cleanup().await;
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn s4_any_text_or_bytes_are_stored_and_delivered_on_postgres() {
    property(Backend::Postgres);
}

#[test]
fn s4_any_text_or_bytes_are_stored_and_delivered_on_sqlite() {
    property(Backend::Sqlite);
}
