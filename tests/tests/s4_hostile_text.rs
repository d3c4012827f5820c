//! S4 at the bridge, on real PostgreSQL and on SQLite with the real shell agent: NUL and invalid
//! UTF-8 in command output and NUL in a chat message are stored and delivered (NUL shown as `␀`), and
//! an inbound event that keeps failing — or that the bridge was handling each time it died — is set
//! aside as a dead letter with a notice in its thread, never taken again.

use std::sync::Arc;

use chat_bridge::app::Application;
use chat_bridge::channel::{Inbound, Tone, console};
use chat_bridge::store::bind::BindExt;
use chat_bridge::store::bind::FetchExt;
use chat_bridge::store::{
    Backend, Store, conversations, inbound, now_ms, tool_calls, transcript, turns,
};
use chat_bridge_tests::bridge::{config, settle};
use chat_bridge_tests::db::TestDb;
use chat_bridge_tests::on_both;
use chat_bridge_tests::recorder::Recorder;

fn in_thread(text: &str, thread: &str) -> Inbound {
    let mut m = console::inbound(text);
    m.target.thread = thread.into();
    m
}

/// The conversation of a console thread.
async fn conversation(store: &Store, thread: &str) -> conversations::Conversation {
    let mut c = store.conn().await.expect("conn");
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

/// Every text column the thread's history holds, for "no NUL anywhere" checks.
async fn history_text(store: &Store, thread: &str) -> String {
    let conv = conversation(store, thread).await;
    let mut c = store.conn().await.expect("conn");
    let mut all = format!("{conv:?}");
    all += &format!(
        "{:?}",
        turns::of_conversation(&mut c, &conv.id)
            .await
            .expect("turns")
    );
    all += &format!(
        "{:?}",
        tool_calls::of_conversation(&mut c, &conv.id)
            .await
            .expect("calls")
    );
    all += &format!(
        "{:?}",
        transcript::list(&mut c, &conv.id)
            .await
            .expect("transcript")
    );
    all
}

/// Makes the store refuse any turn whose prompt contains `POISON` (a deterministic, non-transient
/// failure in the middle of handling an event).
async fn poison_turns(db: &TestDb) {
    let statements: &[&str] = match db.store.backend() {
        Backend::Postgres => &[
            "CREATE FUNCTION cb_poison() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN IF NEW.prompt LIKE '%POISON%' THEN RAISE EXCEPTION 'poisoned prompt'; END IF; RETURN NEW; END $$",
            "CREATE TRIGGER cb_poison BEFORE INSERT ON turns FOR EACH ROW EXECUTE FUNCTION cb_poison()",
        ],
        Backend::Sqlite => &[
            "CREATE TRIGGER cb_poison BEFORE INSERT ON turns WHEN NEW.prompt LIKE '%POISON%'
             BEGIN SELECT RAISE(ABORT, 'poisoned prompt'); END",
        ],
    };
    for s in statements {
        sqlx::query(*s)
            .execute(db.store.statements())
            .await
            .expect("trigger");
    }
}

on_both! {
    async fn s4_nul_in_command_output_is_stored_and_delivered(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&config(&db.url, dir.path()), rec.clone()).await.expect("build");
        app.core.accept(console::inbound(r"printf 'a\0b\n'; find . -maxdepth 0 -print0")).await.expect("accept");
        settle(&app).await;

        let latest = rec.latest();
        assert_eq!(latest.len(), 1, "one tool message: {latest:#?}");
        let m = &latest[0].1;
        assert_eq!(m.tone, Tone::Success, "{m:?}");
        assert_eq!(m.code.as_deref(), Some("a␀b\n.␀"), "delivered with NUL made visible");
        let conv = conversation(&app.store, "main").await;
        let mut c = app.store.conn().await.expect("conn");
        let calls = tool_calls::of_conversation(&mut c, &conv.id).await.expect("calls");
        assert_eq!(calls[0].status, "completed", "not left running");
        assert_eq!(calls[0].output.as_deref(), Some("a␀b\n.␀"), "stored in full");
        drop(c);
        assert!(!history_text(&app.store, "main").await.contains('\0'));
        app.shutdown().await;
    }

    async fn s4_invalid_utf8_from_the_pty_is_delivered(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&config(&db.url, dir.path()), rec.clone()).await.expect("build");
        // Bytes that are not UTF-8, then a binary file (NUL bytes, invalid sequences, all of it).
        app.core.accept(in_thread(r"printf 'ok\377\376end\n'", "bytes")).await.expect("accept");
        app.core.accept(in_thread("head -c 2048 /bin/sh; echo; echo after-binary", "binary")).await.expect("accept");
        settle(&app).await;

        let latest = rec.latest();
        assert_eq!(latest.len(), 2, "{latest:#?}");
        for (_, m) in &latest {
            assert_eq!(m.tone, Tone::Success, "{}", m.title);
        }
        let codes: Vec<&str> = latest.iter().filter_map(|(_, m)| m.code.as_deref()).collect();
        assert!(codes.contains(&"ok\u{FFFD}\u{FFFD}end"), "{codes:?}");
        let binary = codes.iter().find(|c| c.contains("ELF")).expect("the binary's output");
        assert!(binary.ends_with("after-binary") && binary.contains('␀'), "{binary:?}");
        for thread in ["bytes", "binary"] {
            let conv = conversation(&app.store, thread).await;
            let mut c = app.store.conn().await.expect("conn");
            let calls = tool_calls::of_conversation(&mut c, &conv.id).await.expect("calls");
            assert_eq!(calls[0].status, "completed", "{thread}: stored, not left running");
            let out = calls[0].output.as_deref().expect("output");
            assert!(out.contains('\u{FFFD}') && !out.contains('\0'), "{thread}: {out:?}");
            drop(c);
            assert!(!history_text(&app.store, thread).await.contains('\0'));
        }
        app.shutdown().await;
    }

    async fn s4_nul_in_an_inbound_message_is_stored_and_run_as_shown(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&config(&db.url, dir.path()), rec.clone()).await.expect("build");
        app.core.accept(console::inbound("echo IN\0NUL")).await.expect("accept");
        settle(&app).await;
        let latest = rec.latest();
        assert_eq!(latest.len(), 1, "{latest:#?}");
        assert!(latest[0].1.title.starts_with("✅ echo IN␀NUL"), "{}", latest[0].1.title);
        assert_eq!(latest[0].1.code.as_deref(), Some("IN␀NUL"), "what ran is what the history shows");
        let conv = conversation(&app.store, "main").await;
        assert_eq!(conv.title, "echo IN␀NUL");
        let mut c = app.store.conn().await.expect("conn");
        assert_eq!(turns::of_conversation(&mut c, &conv.id).await.expect("turns")[0].prompt, "echo IN␀NUL");
        assert!(inbound::unhandled(&mut c).await.expect("inbox").is_empty(), "handled, not left for the next start");
        drop(c);
        app.shutdown().await;
    }

    async fn s4_a_poison_inbound_event_is_dead_lettered_after_three_attempts(db) {
        poison_turns(&db).await;
        let dir = tempfile::tempdir().expect("tmp");
        let rec = Arc::new(Recorder::default());
        let mut cfg = config(&db.url, dir.path());
        cfg.http.listen = Some("127.0.0.1:0".into());
        cfg.http.api_token = Some("api-secret".into());
        let metrics = chat_bridge::metrics::handle().expect("the metrics recorder");
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        let poison = console::inbound("echo POISON");
        app.core.accept(poison.clone()).await.expect("accept");
        settle(&app).await;

        let errors = rec.with_tone(Tone::Error);
        assert_eq!(errors.len(), 1, "one notice in the thread: {:#?}", rec.calls());
        assert!(
            errors[0].title.starts_with("A message could not be handled and was set aside: the database refused it"),
            "{}", errors[0].title
        );
        assert!(!errors[0].title.contains("POISON") && !errors[0].title.contains("poisoned"), "no message text, no raw error: {}", errors[0].title);
        // Registered at 0 from start-up: the dead letter shows as a count above 0.
        let text = metrics.render();
        let counted = text
            .lines()
            .find_map(|l| l.strip_prefix("chatbridge_inbound_dead_letters_total{platform=\"console\"} "))
            .and_then(|v| v.trim().parse::<f64>().ok());
        assert!(counted.is_some_and(|n| n >= 1.0), "counted: {counted:?}");
        let mut c = app.store.conn().await.expect("conn");
        let dead = inbound::dead_letters(&mut c, 10).await.expect("dead letters");
        assert_eq!(dead.len(), 1, "{dead:?}");
        assert_eq!((dead[0].event_id.as_str(), dead[0].attempts), (poison.event_id.as_str(), 3));
        assert!(inbound::unhandled(&mut c).await.expect("inbox").is_empty(), "never taken again");
        drop(c);
        daemon_client::install_crypto_provider();
        let listed: serde_json::Value = reqwest::Client::new()
            .get(format!("http://{}/api/v1/dead-letters", app.http_addr.expect("listening")))
            .bearer_auth("api-secret")
            .send().await.expect("dead letters over HTTP")
            .json().await.expect("json");
        assert_eq!(listed["inbound_dead_letters"][0]["event_id"], poison.event_id.as_str(), "{listed}");
        assert_eq!(listed["inbound_dead_letters"][0]["attempts"], 3, "{listed}");

        // The thread still works.
        app.core.accept(console::inbound("echo still here")).await.expect("accept");
        settle(&app).await;
        assert!(rec.latest().iter().any(|(_, m)| m.code.as_deref() == Some("still here")), "{:#?}", rec.latest());
        app.shutdown().await;

        // A restart neither takes it again nor repeats the notice.
        let rec2 = Arc::new(Recorder::default());
        let again = Application::build(&cfg, rec2.clone()).await.expect("the next start");
        settle(&again).await;
        assert!(rec2.calls().is_empty(), "{:#?}", rec2.calls());
        let mut c = again.store.conn().await.expect("conn");
        assert_eq!(inbound::dead_letters(&mut c, 10).await.expect("dead")[0].attempts, 3);
        drop(c);
        again.shutdown().await;
    }

    async fn s4_an_event_the_bridge_died_handling_three_times_is_set_aside_at_the_next_start(db) {
        // What three crashes during handling leave behind: the event, unhandled, its three attempts
        // counted (each counted before it began).
        let event = console::inbound("echo crashed-three-times > ran");
        let mut c = db.store.conn().await.expect("conn");
        let payload = serde_json::to_string(&event).expect("json");
        inbound::record(&mut c, "console", &event.event_id, &payload, now_ms()).await.expect("record");
        for n in 1..=3 {
            assert_eq!(inbound::start_attempt(&mut c, "console", &event.event_id).await.expect("count"), Some(n));
        }
        drop(c);

        let dir = tempfile::tempdir().expect("tmp");
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&config(&db.url, dir.path()), rec.clone()).await.expect("start-up never fails because of one event");
        settle(&app).await;
        let latest = rec.latest();
        assert_eq!(latest.len(), 1, "only the notice, the command did not run again: {latest:#?}");
        assert_eq!(latest[0].1.tone, Tone::Error);
        assert!(latest[0].1.title.contains("interrupted 3 times"), "{}", latest[0].1.title);
        assert!(!dir.path().join("ran").exists(), "not run a fourth time");
        let mut c = app.store.conn().await.expect("conn");
        let dead = inbound::dead_letters(&mut c, 10).await.expect("dead");
        assert_eq!(dead.len(), 1, "{dead:?}");
        let conv = conversation(&app.store, "main").await;
        assert!(turns::of_conversation(&mut c, &conv.id).await.expect("turns").is_empty());
        drop(c);
        app.shutdown().await;
    }

    async fn s4_an_unreadable_inbox_entry_is_set_aside_and_start_up_goes_on(db) {
        let mut c = db.store.conn().await.expect("conn");
        inbound::record(&mut c, "slack", "Ev-garbled", "{\"not\": \"an event\"", now_ms()).await.expect("record");
        let ok = console::inbound("echo after the garbled one");
        inbound::record(&mut c, "console", &ok.event_id, &serde_json::to_string(&ok).expect("json"), now_ms() + 1).await.expect("record");
        drop(c);
        let dir = tempfile::tempdir().expect("tmp");
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&config(&db.url, dir.path()), rec.clone()).await.expect("start-up goes on");
        settle(&app).await;
        assert!(rec.latest().iter().any(|(_, m)| m.code.as_deref() == Some("after the garbled one")), "{:#?}", rec.calls());
        let mut c = app.store.conn().await.expect("conn");
        let dead = inbound::dead_letters(&mut c, 10).await.expect("dead");
        assert_eq!(dead.iter().map(|d| d.event_id.as_str()).collect::<Vec<_>>(), ["Ev-garbled"]);
        drop(c);
        app.shutdown().await;
    }

    async fn s4_a_message_waiting_behind_a_running_turn_is_not_counted_as_failing(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&config(&db.url, dir.path()), rec.clone()).await.expect("build");
        app.core.accept(console::inbound("sleep 2; echo first")).await.expect("accept");
        rec.wait_for("the first command running", |r| !r.posts().is_empty()).await;
        let second = console::inbound("echo second");
        app.core.accept(second.clone()).await.expect("accept");
        let attempts = || async {
            let (n,): (i64,) = sqlx::query_as("SELECT attempts FROM inbound_events WHERE event_id = $1")
                .arg(second.event_id.as_str())
                .only(db.store.statements())
                .await
                .expect("attempts");
            n
        };
        // Counted when handed to the conversation, forgotten once it waits in the queue: restarts
        // while it waits are not failures of its own.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while attempts().await != 0 {
            assert!(tokio::time::Instant::now() < deadline, "the queued message's count was reset");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        settle(&app).await;
        let codes: Vec<_> = rec.latest().into_iter().filter_map(|(_, m)| m.code).collect();
        assert_eq!(codes, ["first", "second"]);
        app.shutdown().await;
    }
}
