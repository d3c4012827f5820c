//! The store on a fresh real PostgreSQL database per test and on SQLite: every query exercised on
//! both backends (D1, D2, D3, D4, D5, R6 and the history queries).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chat_bridge::store::bind::BindExt;
use chat_bridge::store::bind::FetchExt;
use chat_bridge::store::conversations::{self, Key};
use chat_bridge::store::history::{self, Filter, HistoryError};
use chat_bridge::store::outbox::{self, Enqueued, Failure, Kind, NewAction, Retry, RetryPolicy};
use chat_bridge::store::transcript::{self, NewEntry};
use chat_bridge::store::{
    Backend, Store, StoreError, inbound, leader, message_map, permissions, tool_calls, turns,
};
use chat_bridge_tests::{db as support, on_both};

const T0: i64 = 1_795_000_000_000;

fn key<'a>(thread: &'a str) -> Key<'a> {
    Key {
        platform: "slack",
        workspace: "T1",
        channel: "C1",
        thread,
    }
}

async fn conversation(store: &Store, thread: &str) -> String {
    let mut c = store.conn().await.expect("conn");
    conversations::find_or_create(&mut c, &key(thread), "U1", "title", T0)
        .await
        .expect("conv")
        .0
        .id
}

/// How many rows of `table` belong to `conv`.
async fn rows(store: &Store, table: &str, conv: &str) -> i64 {
    let mut c = store.conn().await.expect("conn");
    sqlx::query_as::<_, (i64,)>(sqlx::AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM {table} WHERE conversation_id = $1"
    )))
    .arg(conv)
    .only(&mut *c)
    .await
    .expect("count")
    .0
}

async fn outbox_status(store: &Store, id: i64) -> String {
    let mut c = store.conn().await.expect("conn");
    sqlx::query_as::<_, (String,)>("SELECT status FROM outbox WHERE id = $1")
        .arg(id)
        .only(&mut *c)
        .await
        .expect("status")
        .0
}

fn action<'a>(conv: &'a str, body: &'a str) -> NewAction<'a> {
    NewAction {
        conversation_id: conv,
        kind: Kind::Post,
        coalesce_key: None,
        action: body,
    }
}

on_both! {
    async fn d4_migrations_are_idempotent(db) {
        db.store.migrate().await.expect("second run is a no-op");
        let again = Store::open(&db.url).await.expect("reopen migrates again");
        again.close().await;
    }

    async fn conversations_are_found_or_created_once_per_key(db) {
        let mut c = db.store.conn().await.expect("conn");
        let (a, created) = conversations::find_or_create(&mut c, &key("1.1"), "U1", "first", T0).await.expect("a");
        assert!(created);
        let (b, created) = conversations::find_or_create(&mut c, &key("1.1"), "U2", "other", T0 + 5).await.expect("b");
        assert!(!created);
        assert_eq!(a.id, b.id);
        assert_eq!(b.started_by, "U1", "the first writer wins");
        conversations::set_session(&mut c, &a.id, "sess-1", "/work", T0 + 10).await.expect("bind");
        let by = conversations::by_session(&mut c, "sess-1").await.expect("by session").expect("found");
        assert_eq!((by.id.as_str(), by.cwd.as_str(), by.updated_at), (a.id.as_str(), "/work", T0 + 10));
        let (other, created) = conversations::find_or_create(&mut c, &key("2.2"), "U1", "t", T0).await.expect("other");
        assert!(created && other.id != a.id);
    }

    async fn turns_are_numbered_and_finish_once(db) {
        let conv = conversation(&db.store, "1.1").await;
        let mut c = db.store.conn().await.expect("conn");
        let t1 = turns::start(&mut c, &conv, "ls", "U1", T0).await.expect("t1");
        let t2 = turns::start(&mut c, &conv, "pwd", "U1", T0 + 1).await.expect("t2");
        assert_eq!((t1.seq, t2.seq), (1, 2));
        assert_eq!(turns::open(&mut c).await.expect("open").len(), 2);
        let end = turns::Ending { status: "ended", stop_reason: Some("end_turn"), end_cause: None, answer: Some("done") };
        assert!(turns::finish(&mut c, &t1.id, &end, T0 + 2).await.expect("finish"));
        assert!(!turns::finish(&mut c, &t1.id, &end, T0 + 3).await.expect("again"), "a closed turn stays closed");
        let open = turns::open(&mut c).await.expect("open");
        assert_eq!(open.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), [t2.id.as_str()]);
        let t1 = turns::get(&mut c, &t1.id).await.expect("get").expect("t1");
        assert_eq!((t1.answer.as_deref(), t1.ended_at), (Some("done"), Some(T0 + 2)));
    }

    async fn tool_calls_accumulate_progress_and_finish_exactly_once(db) {
        let conv = conversation(&db.store, "1.1").await;
        let mut c = db.store.conn().await.expect("conn");
        let id = tool_calls::start(&mut c, &conv, None, "call_1", "sleep 30", Some("execute"), T0).await.expect("start");
        let again = tool_calls::start(&mut c, &conv, None, "call_1", "", None, T0 + 1).await.expect("restart");
        assert_eq!(id, again, "a replayed start is the same call");
        assert!(tool_calls::progress(&mut c, &conv, "call_1", 3, Some(r#"{"elapsedMs":30000}"#), T0 + 30_000).await.expect("p"));
        assert!(tool_calls::progress(&mut c, &conv, "call_1", 2, None, T0 + 50_000).await.expect("p"));
        let f = tool_calls::Finish { outcome: "timed_out", summary: Some("Command timed out after 1m"), output: "partial\n", exit_code: None, signal: Some(15) };
        assert_eq!(tool_calls::finish(&mut c, &conv, "call_1", &f, T0 + 60_000).await.expect("finish"), Some(id.clone()));
        assert_eq!(tool_calls::finish(&mut c, &conv, "call_1", &f, T0 + 61_000).await.expect("dup"), None, "never twice");
        // Heartbeats received before the result but written after it still count; the progress does not change.
        assert!(!tool_calls::progress(&mut c, &conv, "call_1", 1, Some(r#"{"elapsedMs":99}"#), T0 + 62_000).await.expect("late"), "reported as no longer running");
        let row = tool_calls::get(&mut c, &id).await.expect("get").expect("row");
        assert_eq!(row.title, "sleep 30", "an empty title does not erase the known one");
        assert_eq!(row.kind.as_deref(), Some("execute"));
        assert_eq!((row.status.as_str(), row.heartbeats, row.signal), ("timed_out", 6, Some(15)));
        assert_eq!(row.last_progress.as_deref(), Some(r#"{"elapsedMs":30000}"#), "a late write leaves the progress alone");
        assert_eq!(row.output.as_deref(), Some("partial\n"));
        assert_eq!(row.last_progress.as_deref(), Some(r#"{"elapsedMs":30000}"#));
    }

    async fn p2_heartbeat_counts_of_many_calls_are_written_in_one_statement(db) {
        use tool_calls::ProgressRow;
        let (a, b) = (conversation(&db.store, "1.1").await, conversation(&db.store, "2.2").await);
        let mut c = db.store.conn().await.expect("conn");
        let one = tool_calls::start(&mut c, &a, None, "call_1", "make", None, T0).await.expect("start");
        let two = tool_calls::start(&mut c, &b, None, "call_1", "make test", None, T0).await.expect("start");
        let done = tool_calls::start(&mut c, &b, None, "call_2", "ls", None, T0).await.expect("start");
        let f = tool_calls::Finish { outcome: "completed", summary: None, output: "", exit_code: Some(0), signal: None };
        tool_calls::finish(&mut c, &b, "call_2", &f, T0 + 1).await.expect("finish");
        let row = |conversation, call_id, heartbeats, last_progress| ProgressRow { conversation, call_id, heartbeats, last_progress };
        let rows = [
            row(&a, "call_1", 2, Some(r#"{"elapsedMs":1}"#)),
            row(&b, "call_1", 1, None),
            // The same call twice in one batch: counts add up, the latest progress wins.
            row(&a, "call_1", 3, Some(r#"{"elapsedMs":2}"#)),
            row(&a, "call_1", 1, None),
            // A finished call: its count still adds up, its progress stays.
            row(&b, "call_2", 4, Some(r#"{"elapsedMs":9}"#)),
            // A call nobody stored: nothing happens.
            row(&a, "call_9", 1, None),
        ];
        tool_calls::progress_many(&mut c, &rows, T0 + 5).await.expect("progress_many");
        let get = |id: String| { let db = db.store.clone(); async move { let mut c = db.conn().await.expect("conn"); tool_calls::get(&mut c, &id).await.expect("get").expect("row") } };
        let (one, two, done) = (get(one).await, get(two).await, get(done).await);
        assert_eq!((one.heartbeats, one.last_progress.as_deref(), one.progress_at), (6, Some(r#"{"elapsedMs":2}"#), Some(T0 + 5)));
        assert_eq!((two.heartbeats, two.last_progress.as_deref(), two.progress_at), (1, None, Some(T0 + 5)));
        assert_eq!((done.heartbeats, done.last_progress.as_deref(), done.status.as_str()), (4, None, "completed"));
        tool_calls::progress_many(&mut c, &[], T0 + 6).await.expect("an empty batch is nothing");
    }

    async fn p2_a_thread_is_looked_up_by_its_whole_key_from_a_new_databases_first_lookup(db) {
        // PostgreSQL keeps the generic plan it makes of a prepared statement executed five times:
        // made while the table is empty, it must still be the key's index once a channel holds
        // thousands of threads (before the fix: the channel's index, every thread scanned).
        use sqlx::Row;
        let mut c = db.store.conn().await.expect("conn");
        let plan: Vec<String> = match db.store.backend() {
            Backend::Postgres => {
                sqlx::raw_sql("PREPARE lookup(text, text, text, text) AS SELECT * FROM conversations WHERE platform = $1 AND workspace = $2 AND channel = $3 AND thread = $4").execute(&mut *c).await.expect("prepare");
                for _ in 0..6 {
                    sqlx::raw_sql("EXECUTE lookup('slack', 'T1', 'C1', 'none')").execute(&mut *c).await.expect("execute");
                }
                sqlx::raw_sql("INSERT INTO conversations (id, platform, workspace, channel, thread, started_by, created_at, updated_at)
                               SELECT 'c' || g, 'slack', 'T1', 'C1', 't' || g, 'U1', g, g FROM generate_series(1, 3000) g")
                    .execute(&mut *c).await.expect("fill");
                sqlx::raw_sql("EXPLAIN EXECUTE lookup('slack', 'T1', 'C1', 't1500')").fetch_all(&mut *c).await.expect("explain")
                    .iter().map(|r| r.get::<String, _>(0)).collect()
            }
            Backend::Sqlite => {
                for i in 0..300 {
                    conversations::find_or_create(&mut c, &key(&format!("t{i}")), "U1", "t", T0).await.expect("fill");
                }
                sqlx::raw_sql("EXPLAIN QUERY PLAN SELECT * FROM conversations WHERE platform = 'slack' AND workspace = 'T1' AND channel = 'C1' AND thread = 't150'").fetch_all(&mut *c).await.expect("explain")
                    .iter().map(|r| r.get::<String, _>(3)).collect()
            }
        };
        let plan = plan.join("\n");
        let by_key = match db.store.backend() {
            Backend::Postgres => plan.contains("Index Cond") && plan.contains("(thread = $4)") && !plan.contains("Filter"),
            Backend::Sqlite => plan.contains("thread=?") && plan.contains("workspace=?"),
        };
        assert!(by_key, "the lookup does not use an index on the whole key:\n{plan}");
    }

    async fn d1_p2_claims_start_at_the_floor_pass_over_no_pending_row_and_walk_no_delivered_history(db) {
        const HISTORY: i64 = 8000;
        let (conv, other) = (conversation(&db.store, "1.1").await, conversation(&db.store, "2.2").await);
        let old = conversation(&db.store, "3.3").await;
        let mut c = db.store.conn().await.expect("conn");
        // The oldest pending row: a delivery that failed and waits for its retry.
        let Enqueued::Inserted(waiting) = outbox::enqueue(&mut c, &action(&other, "retry me"), T0).await.expect("enqueue") else { panic!("inserted") };
        let held = outbox::claim_next(&mut c, "w", T0, Duration::from_secs(60)).await.expect("claim").expect("row");
        assert_eq!(held.id, waiting);
        let policy = RetryPolicy { base: Duration::from_secs(30), cap: Duration::from_secs(30), max_attempts: 5 };
        outbox::retry(&mut c, waiting, "w", &Failure::Error("down"), &policy, T0).await.expect("retry");
        // History: rows enqueued and delivered since (on PostgreSQL each leaves an entry in the
        // pending-rows index until a vacuum).
        sqlx::query("WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 8000)
                     INSERT INTO outbox (conversation_id, kind, action, status, attempts, next_attempt_at, created_at)
                     SELECT $1, 'post', '{}', 'pending', 0, 0, 0 FROM g")
            .arg(&old).execute(&mut *c).await.expect("history");
        let done = sqlx::query("UPDATE outbox SET status = 'delivered' WHERE conversation_id = $1 AND status = 'pending'")
            .arg(&old).execute(&mut *c).await.expect("delivered").rows_affected();
        assert_eq!(done, HISTORY as u64);
        let Enqueued::Inserted(fresh) = outbox::enqueue(&mut c, &action(&conv, "new"), T0).await.expect("enqueue") else { panic!("inserted") };
        let floor = db.store.claim_floor(&mut c).await.expect("floor");
        assert!(floor <= waiting, "the floor ({floor}) passed over the pending row {waiting}");
        let got = outbox::claim_next_from(&mut c, "w", T0 + 1, Duration::from_secs(60), floor).await.expect("claim").expect("the new row");
        assert_eq!(got.id, fresh, "the retry is not due yet");
        let due = T0 + 60_000;
        let got = outbox::claim_next_from(&mut c, "w", due, Duration::from_secs(60), floor).await.expect("claim").expect("the retry");
        assert_eq!(got.id, waiting, "the retry, once due, is claimed from the same floor");
        assert!(outbox::mark_delivered(&mut c, waiting, "w", due).await.expect("mark"));
        assert!(outbox::mark_delivered(&mut c, fresh, "w", due).await.expect("mark"));
        if db.store.backend() == Backend::Postgres {
            // What a claim reads: from the floor, a few pages; from the first id, the history.
            use sqlx::Row;
            let next = outbox::enqueue(&mut c, &action(&conv, "next"), due).await.expect("enqueue");
            assert!(matches!(next, Enqueued::Inserted(_)));
            let floor = outbox::ClaimFloor::default().get(&mut c).await.expect("floor");
            assert!(floor > waiting, "nothing older is pending now: the floor moves up ({floor})");
            sqlx::query("ANALYZE outbox").execute(&mut *c).await.expect("analyze");
            let mut blocks = Vec::new();
            for from in [0, floor, 0, floor] {
                let mut tx = db.store.begin().await.expect("begin");
                let plan: Vec<String> = sqlx::query(sqlx::AssertSqlSafe(format!("EXPLAIN (ANALYZE, BUFFERS) {}", outbox::CLAIM_ON_POSTGRES)))
                    .arg("w").arg(due + 60_000).arg(due).arg(from)
                    .fetch_all(tx.conn()).await.expect("explain").iter().map(|r| r.get(0)).collect();
                drop(tx); // rolled back: the claim EXPLAIN ANALYZE made is undone
                // The pages the scan for candidates read (the node "… on outbox o", then its
                // "Buffers:" line).
                let scan = plan.iter().position(|l| l.contains(" on outbox o ")).expect("the candidates' scan");
                let line = plan[scan..].iter().find(|l| l.trim_start().starts_with("Buffers:")).expect("buffers line");
                let pages: i64 = line.split([' ', ',']).filter_map(|w| w.split_once('=')).map(|(_, n)| n.parse::<i64>().expect("a count")).sum();
                blocks.push(pages);
            }
            // The second pair, after the first has marked the dead entries: still the history.
            let (from_zero, from_floor) = (blocks[2], blocks[3]);
            assert!(from_floor * 3 < from_zero, "a claim from the floor read {from_floor} pages, from the first id {from_zero} ({blocks:?})");
        }
    }

    async fn p2_a_claim_reads_its_messages_platform_id_with_it(db) {
        // The outbox worker takes the platform id of the claimed row's message from the claim (one
        // round trip less a delivery): posted, an intent recorded, and none yet.
        let (a, b, d) = (conversation(&db.store, "a").await, conversation(&db.store, "b").await, conversation(&db.store, "d").await);
        let mut c = db.store.conn().await.expect("conn");
        message_map::put(&mut c, &a, "tool:1", "1700.0001", T0).await.expect("put");
        message_map::put(&mut c, &b, "tool:1", "", T0).await.expect("intent");
        // Another conversation's message of the same key is not this one's.
        message_map::put(&mut c, &a, "tool:2", "1700.0002", T0).await.expect("put");
        for conv in [&a, &b, &d] {
            let row = NewAction { conversation_id: conv, kind: Kind::Edit, coalesce_key: Some("tool:1"), action: "{}" };
            outbox::enqueue(&mut c, &row, T0).await.expect("enqueue");
        }
        let mut seen = HashMap::new();
        while let Some(claimed) = outbox::claim_next(&mut c, "w", T0, Duration::from_secs(60)).await.expect("claim") {
            outbox::mark_delivered(&mut c, claimed.id, "w", T0).await.expect("delivered");
            seen.insert(claimed.conversation_id, claimed.mapped);
        }
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[&a].as_deref(), Some("1700.0001"));
        assert_eq!(seen[&b].as_deref(), Some(""), "an intent reads as the empty id, as a lookup does");
        assert_eq!(seen[&d], None);
        // A row without a message (a reaction) reads none.
        outbox::enqueue(&mut c, &action(&a, "react"), T0).await.expect("enqueue");
        let claimed = outbox::claim_next(&mut c, "w", T0, Duration::from_secs(60)).await.expect("claim").expect("row");
        assert_eq!(claimed.mapped, None);
    }

    async fn p2_a_tool_result_is_one_statement_on_postgres_written_whole_or_not_at_all(db) {
        let conv = conversation(&db.store, "1.1").await;
        let mut c = db.store.conn().await.expect("conn");
        let turn = turns::start(&mut c, &conv, "make", "U1", T0).await.expect("turn");
        let id = tool_calls::start(&mut c, &conv, Some(&turn.id), "s/call_1", "make", Some("execute"), T0).await.expect("start");
        let other = tool_calls::start(&mut c, &conv, Some(&turn.id), "s/call_2", "ls", None, T0).await.expect("start");
        transcript::append(&mut c, &conv, &NewEntry { turn_id: Some(&turn.id), kind: "tool_started", actor: Some("agent"), body: "make", tool_call_id: Some(&id) }, T0).await.expect("append");
        let finish = tool_calls::Finish { outcome: "completed", summary: Some("exit 0"), output: "built\n", exit_code: Some(0), signal: None };
        let entry = NewEntry { turn_id: Some(&turn.id), kind: "tool_finished", actor: Some("agent"), body: "exit 0", tool_call_id: Some(&id) };
        let edit = NewAction { conversation_id: &conv, kind: Kind::Edit, coalesce_key: Some("tool:s/call_1"), action: r#"{"edit":1}"# };
        macro_rules! write {
            ($row:expr) => {
                tool_calls::finish_with_result(&mut c, &conv, "s/call_1", &$row, &finish, 3, Some(r#"{"lines":2}"#), &entry, &edit, None, T0 + 10).await
            };
        }
        if db.store.backend() == Backend::Sqlite {
            // SQLite's WITH takes no UPDATE: the runner writes results in a transaction there.
            assert!(write!(id).is_err());
            let row = tool_calls::get(&mut c, &id).await.expect("get").expect("row");
            assert_eq!(row.status, "running");
            return;
        }
        // A row the id does not name, or that is not running, is not finished, and nothing else is written.
        assert_eq!(write!(other).expect("write"), None);
        assert_eq!((rows(&db.store, "transcript", &conv).await, rows(&db.store, "outbox", &conv).await), (1, 0));
        assert_eq!(write!(id).expect("write").as_deref(), Some(id.as_str()));
        let row = tool_calls::get(&mut c, &id).await.expect("get").expect("row");
        assert_eq!((row.status.as_str(), row.summary.as_deref(), row.output.as_deref(), row.exit_code), ("completed", Some("exit 0"), Some("built\n"), Some(0)));
        assert_eq!((row.heartbeats, row.last_progress.as_deref(), row.progress_at), (3, Some(r#"{"lines":2}"#), Some(T0 + 10)));
        let all = transcript::list(&mut c, &conv).await.expect("list");
        assert_eq!(all.iter().map(|e| (e.seq, e.kind.as_str(), e.tool_call_id.as_deref())).collect::<Vec<_>>(),
                   [(1, "tool_started", Some(id.as_str())), (2, "tool_finished", Some(id.as_str()))]);
        let claimed = outbox::claim_next(&mut c, "w", T0 + 10, Duration::from_secs(60)).await.expect("claim").expect("the edit");
        assert_eq!((claimed.kind.as_str(), claimed.coalesce_key.as_deref(), claimed.action.as_str()), ("edit", Some("tool:s/call_1"), r#"{"edit":1}"#));
        // A replay of the finished call writes nothing again.
        assert_eq!(write!(id).expect("write"), None);
        assert_eq!((rows(&db.store, "transcript", &conv).await, rows(&db.store, "outbox", &conv).await), (2, 1));
        let untouched = tool_calls::get(&mut c, &other).await.expect("get").expect("row");
        assert_eq!(untouched.status, "running");
    }

    async fn p2_a_result_and_its_turns_end_are_one_statement_the_end_only_with_the_result(db) {
        // A command's turn that ends with its result: the result's one statement closes the turn
        // too (one commit for both) — and only when it writes the result: a replay, or a row it
        // does not name, leaves the turn as it was.
        if db.store.backend() == Backend::Sqlite {
            return; // SQLite's WITH takes no UPDATE: the runner writes both in one transaction there.
        }
        let conv = conversation(&db.store, "1.1").await;
        let mut c = db.store.conn().await.expect("conn");
        let turn = turns::start(&mut c, &conv, "make", "U1", T0).await.expect("turn");
        let id = tool_calls::start(&mut c, &conv, Some(&turn.id), "s/call_1", "make", Some("execute"), T0).await.expect("start");
        let other = tool_calls::start(&mut c, &conv, None, "s/call_9", "ls", None, T0).await.expect("start");
        let finish = tool_calls::Finish { outcome: "completed", summary: Some("exit 0"), output: "built\n", exit_code: Some(0), signal: None };
        let entry = NewEntry { turn_id: Some(&turn.id), kind: "tool_finished", actor: Some("agent"), body: "exit 0", tool_call_id: Some(&id) };
        let edit = NewAction { conversation_id: &conv, kind: Kind::Edit, coalesce_key: Some("tool:s/call_1"), action: r#"{"edit":1}"# };
        let end = turns::Ending { status: "ended", stop_reason: Some("end_turn"), end_cause: None, answer: None };
        macro_rules! write {
            ($row:expr, $call:expr) => {
                tool_calls::finish_with_result(&mut c, &conv, $call, &$row, &finish, 0, None, &entry, &edit, Some((&turn.id, &end)), T0 + 10).await
            };
        }
        let status = |turns: Vec<turns::Turn>| turns.into_iter().map(|t| (t.status, t.stop_reason, t.ended_at)).collect::<Vec<_>>();
        // Nothing to write (a row the id does not name): the turn stays open.
        assert_eq!(write!(other, "s/call_1").expect("write"), None);
        assert_eq!(status(turns::of_conversation(&mut c, &conv).await.expect("turns")), [("open".to_owned(), None, None)]);
        assert_eq!(write!(id, "s/call_1").expect("write").as_deref(), Some(id.as_str()));
        let row = tool_calls::get(&mut c, &id).await.expect("get").expect("row");
        assert_eq!(row.status, "completed");
        assert_eq!(status(turns::of_conversation(&mut c, &conv).await.expect("turns")), [("ended".to_owned(), Some("end_turn".to_owned()), Some(T0 + 10))]);
        assert_eq!((rows(&db.store, "transcript", &conv).await, rows(&db.store, "outbox", &conv).await), (1, 1));
        // A replay writes nothing, and an ended turn is not ended again.
        assert_eq!(write!(id, "s/call_1").expect("write"), None);
        assert_eq!((rows(&db.store, "transcript", &conv).await, rows(&db.store, "outbox", &conv).await), (1, 1));
    }

    async fn p2_a_delivery_is_recorded_with_the_next_claim_as_one_statement_on_postgres(db) {
        // The outbox worker records a delivery (its message's platform id, the row delivered) and
        // claims its next action as one statement.
        let (a, b) = (conversation(&db.store, "a").await, conversation(&db.store, "b").await);
        let mut c = db.store.conn().await.expect("conn");
        for (conv, body) in [(&a, "a1"), (&a, "a2"), (&b, "b1")] {
            outbox::enqueue(&mut c, &action(conv, body), T0).await.expect("enqueue");
        }
        let lease = Duration::from_secs(60);
        let a1 = outbox::claim_next(&mut c, "w", T0, lease).await.expect("claim").expect("a1");
        assert_eq!(a1.action, "a1");
        let of_a = |id| outbox::Delivered { id, conversation_id: a.as_str(), remember: Some(("answer:1", "1700.0001")) };
        if db.store.backend() == Backend::Sqlite {
            // SQLite's WITH takes no UPDATE: the worker records and claims in two statements there.
            assert!(outbox::delivered_and_claim_next(&mut c, of_a(a1.id), "w", T0, lease, 0).await.is_err());
            assert_eq!(outbox_status(&db.store, a1.id).await, "pending");
            assert_eq!(message_map::get(&mut c, &a, "answer:1").await.expect("get"), None);
            return;
        }
        // Recorded with its lease run out: the claim never takes the delivered row itself, nor its
        // conversation's next row (the statement saw a1 pending) — it says that one waits — but
        // another conversation's head.
        let late = T0 + 61_000;
        let after = outbox::delivered_and_claim_next(&mut c, of_a(a1.id), "w", late, lease, 0).await.expect("record");
        let b1 = after.claimed.expect("b1");
        assert_eq!((b1.action.as_str(), b1.conversation_id.as_str(), after.more_in_its_conversation), ("b1", b.as_str(), true));
        assert_eq!(outbox_status(&db.store, a1.id).await, "delivered");
        assert_eq!(message_map::get(&mut c, &a, "answer:1").await.expect("get").as_deref(), Some("1700.0001"));
        // Nothing to remember: the mark alone, and a's head (a1 delivered before this statement) claimed.
        let of_b = outbox::Delivered { id: b1.id, conversation_id: b.as_str(), remember: None };
        let after = outbox::delivered_and_claim_next(&mut c, of_b, "w", late, lease, 0).await.expect("record");
        assert_eq!((after.claimed.as_ref().map(|r| r.action.as_str()), after.more_in_its_conversation), (Some("a2"), false));
        let a2 = after.claimed.expect("a2");
        assert_eq!(outbox_status(&db.store, b1.id).await, "delivered");
        assert_eq!(message_map::get(&mut c, &b, "answer:1").await.expect("get"), None);
        // A claim this worker no longer holds is not marked delivered (the message's id is remembered
        // all the same: the platform has it), and nothing is left to claim.
        assert!(outbox::release(&mut c, a2.id, "w").await.expect("release"));
        let of_a2 = outbox::Delivered { id: a2.id, conversation_id: a.as_str(), remember: Some(("answer:2", "1700.0002")) };
        let after = outbox::delivered_and_claim_next(&mut c, of_a2, "w", late, lease, 0).await.expect("record");
        assert_eq!(after, outbox::AfterDelivery { claimed: None, more_in_its_conversation: false });
        assert_eq!(outbox_status(&db.store, a2.id).await, "pending");
        assert_eq!(message_map::get(&mut c, &a, "answer:2").await.expect("get").as_deref(), Some("1700.0002"));
        assert_eq!(outbox::claim_next(&mut c, "v", late, lease).await.expect("claim").map(|r| r.id), Some(a2.id));
    }

    async fn transcript_keeps_order_and_message_map_replaces(db) {
        let conv = conversation(&db.store, "1.1").await;
        let mut c = db.store.conn().await.expect("conn");
        for (i, kind) in ["prompt", "tool_started", "tool_finished", "answer"].iter().enumerate() {
            let e = NewEntry { turn_id: None, kind, actor: Some("U1"), body: &format!("body {i}"), tool_call_id: None };
            assert_eq!(transcript::append(&mut c, &conv, &e, T0 + i as i64).await.expect("append"), i as i64 + 1);
        }
        let all = transcript::list(&mut c, &conv).await.expect("list");
        assert_eq!(all.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(), ["prompt", "tool_started", "tool_finished", "answer"]);
        assert_eq!(message_map::get(&mut c, &conv, "tool:call_1").await.expect("get"), None);
        message_map::put(&mut c, &conv, "tool:call_1", "1700.0001", T0).await.expect("put");
        message_map::put(&mut c, &conv, "tool:call_1", "1700.0002", T0 + 1).await.expect("replace");
        assert_eq!(message_map::get(&mut c, &conv, "tool:call_1").await.expect("get").as_deref(), Some("1700.0002"));
    }

    async fn d2_an_event_id_is_new_exactly_once_even_from_two_connections_at_once(db) {
        let mut c = db.store.conn().await.expect("conn");
        assert_eq!(inbound::record(&mut c, "slack", "Ev1", "{}", T0).await.expect("r"), inbound::Seen::New);
        assert_eq!(inbound::record(&mut c, "slack", "Ev1", "{}", T0).await.expect("r"), inbound::Seen::Duplicate);
        assert_eq!(inbound::record(&mut c, "discord", "Ev1", "{}", T0).await.expect("r"), inbound::Seen::New, "per platform");
        drop(c);
        for i in 0..40 {
            let id = format!("race-{i}");
            let (s1, s2) = (db.store.clone(), db.store.clone());
            let (a, b) = tokio::join!(
                async { let mut c = s1.conn().await.expect("c1"); inbound::record(&mut c, "slack", &id, "{}", T0).await.expect("a") },
                async { let mut c = s2.conn().await.expect("c2"); inbound::record(&mut c, "slack", &id, "{}", T0).await.expect("b") },
            );
            let news = [a, b].iter().filter(|s| **s == inbound::Seen::New).count();
            assert_eq!(news, 1, "event {id}: {a:?} {b:?}");
        }
        let mut c = db.store.conn().await.expect("conn");
        assert_eq!(inbound::prune(&mut c, T0 + 1).await.expect("prune"), 0, "unhandled events are kept");
        for (platform, id, _) in inbound::unhandled(&mut c).await.expect("unhandled") {
            inbound::mark_handled(&mut c, &platform, &id, T0).await.expect("mark");
        }
        assert_eq!(inbound::prune(&mut c, T0 + 1).await.expect("prune"), 42);
    }

    async fn d2_the_inbox_keeps_an_event_until_it_is_marked_handled_in_the_transaction_that_acted(db) {
        let mut c = db.store.conn().await.expect("conn");
        inbound::record(&mut c, "slack", "Ev1", r#"{"n":1}"#, T0).await.expect("r1");
        inbound::record(&mut c, "slack", "Ev2", r#"{"n":2}"#, T0 + 1).await.expect("r2");
        assert_eq!(inbound::record(&mut c, "slack", "Ev1", r#"{"n":9}"#, T0 + 2).await.expect("r1 again"), inbound::Seen::Duplicate);
        let pending = inbound::unhandled(&mut c).await.expect("unhandled");
        assert_eq!(pending, vec![
            ("slack".to_owned(), "Ev1".to_owned(), r#"{"n":1}"#.to_owned()),
            ("slack".to_owned(), "Ev2".to_owned(), r#"{"n":2}"#.to_owned()),
        ], "oldest first, the first payload kept");
        drop(c);
        // A transaction that marks and then rolls back leaves the event to be taken again.
        let mut tx = db.store.begin().await.expect("begin");
        inbound::mark_handled(tx.conn(), "slack", "Ev1", T0 + 3).await.expect("mark");
        drop(tx);
        let mut c = db.store.conn().await.expect("conn");
        assert_eq!(inbound::unhandled(&mut c).await.expect("unhandled").len(), 2, "rolled back");
        drop(c);
        let mut tx = db.store.begin().await.expect("begin");
        inbound::mark_handled(tx.conn(), "slack", "Ev1", T0 + 3).await.expect("mark");
        tx.commit().await.expect("commit");
        let mut c = db.store.conn().await.expect("conn");
        inbound::mark_handled(&mut c, "slack", "Ev1", T0 + 4).await.expect("twice is harmless");
        let pending = inbound::unhandled(&mut c).await.expect("unhandled");
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].1, "Ev2");
        assert_eq!(inbound::prune(&mut c, T0 + 100).await.expect("prune"), 1, "only the handled one");
    }

    async fn d1_concurrent_enqueue_and_two_claimers_deliver_each_action_once_in_order(db) {
        let convs: Vec<String> = [conversation(&db.store, "a").await, conversation(&db.store, "b").await, conversation(&db.store, "c").await].into();
        const PER_CONV: usize = 25;
        let delivered: Arc<Mutex<HashMap<String, Vec<usize>>>> = Arc::default();
        let producer = {
            let (store, convs) = (db.store.clone(), convs.clone());
            tokio::spawn(async move {
                for i in 0..PER_CONV {
                    for conv in &convs {
                        let mut tx = store.begin().await.expect("tx");
                        outbox::enqueue(tx.conn(), &action(conv, &i.to_string()), T0).await.expect("enqueue");
                        tx.commit().await.expect("commit");
                    }
                }
            })
        };
        let mut workers = Vec::new();
        for w in 0..2 {
            let (store, delivered) = (db.store.clone(), delivered.clone());
            workers.push(tokio::spawn(async move {
                let worker = format!("w{w}");
                let mut idle = 0;
                loop {
                    let mut c = store.conn().await.expect("conn");
                    match outbox::claim_next(&mut c, &worker, T0, Duration::from_secs(60)).await.expect("claim") {
                        Some(a) => {
                            idle = 0;
                            delivered.lock().unwrap().entry(a.conversation_id.clone()).or_default().push(a.action.parse().expect("n"));
                            assert!(outbox::mark_delivered(&mut c, a.id, &worker, T0).await.expect("mark"));
                        }
                        None => {
                            let total: usize = delivered.lock().unwrap().values().map(Vec::len).sum();
                            if total == 3 * PER_CONV { break; }
                            idle += 1;
                            assert!(idle < 2000, "stuck at {total}");
                            tokio::time::sleep(Duration::from_millis(2)).await;
                        }
                    }
                }
            }));
        }
        producer.await.expect("producer");
        for w in workers { w.await.expect("worker"); }
        let delivered = delivered.lock().unwrap().clone();
        for conv in &convs {
            assert_eq!(delivered[conv], (0..PER_CONV).collect::<Vec<_>>(), "conversation {conv}: once each, in order");
        }
        let mut c = db.store.conn().await.expect("conn");
        assert_eq!(outbox::stats(&mut c, T0).await.expect("stats"), outbox::Stats { pending: 0, oldest_pending_age_ms: 0, dead: 0 });
    }

    async fn d1_a_claim_in_flight_does_not_hold_back_another_conversations_head(db) {
        let (a, b) = (conversation(&db.store, "a").await, conversation(&db.store, "b").await);
        let mut c = db.store.conn().await.expect("conn");
        outbox::enqueue(&mut c, &action(&a, "a0"), T0).await.expect("e");
        outbox::enqueue(&mut c, &action(&a, "a1"), T0).await.expect("e");
        outbox::enqueue(&mut c, &action(&b, "b0"), T0).await.expect("e");
        drop(c);
        let lease = Duration::from_secs(60);
        match db.store.backend() {
            Backend::Postgres => {
                // One worker's claim not yet committed (its row locked): another worker takes the
                // other conversation's head at once, never a's second action, and never waits on it.
                let mut first = db.store.begin().await.expect("tx");
                let held = outbox::claim_next(first.conn(), "w1", T0, lease).await.expect("claim").expect("a head");
                assert_eq!(held.action, "a0");
                let mut c = db.store.conn().await.expect("conn");
                let other = tokio::time::timeout(Duration::from_secs(5), outbox::claim_next(&mut c, "w2", T0, lease))
                    .await
                    .expect("the second claim does not wait for the first")
                    .expect("claim")
                    .expect("the other head");
                assert_eq!(other.action, "b0");
                assert_eq!(outbox::claim_next(&mut c, "w3", T0, lease).await.expect("claim"), None, "a1 waits behind a0");
                first.commit().await.expect("commit");
            }
            Backend::Sqlite => {
                let mut c = db.store.conn().await.expect("conn");
                let one = outbox::claim_next(&mut c, "w1", T0, lease).await.expect("claim").expect("a head");
                let two = outbox::claim_next(&mut c, "w2", T0, lease).await.expect("claim").expect("the other head");
                assert_eq!((one.action.as_str(), two.action.as_str()), ("a0", "b0"));
                assert_eq!(outbox::claim_next(&mut c, "w3", T0, lease).await.expect("claim"), None, "a1 waits behind a0");
            }
        }
    }

    async fn d1_failures_back_off_rate_limits_wait_without_counting_and_dead_letters_unblock(db) {
        let conv = conversation(&db.store, "a").await;
        let mut c = db.store.conn().await.expect("conn");
        let first = match outbox::enqueue(&mut c, &action(&conv, "first"), T0).await.expect("e") { Enqueued::Inserted(id) => id, other => panic!("{other:?}") };
        outbox::enqueue(&mut c, &action(&conv, "second"), T0).await.expect("e");
        let policy = RetryPolicy { base: Duration::from_secs(1), cap: Duration::from_secs(60), max_attempts: 3 };
        let lease = Duration::from_secs(30);

        let a = outbox::claim_next(&mut c, "w", T0, lease).await.expect("claim").expect("first");
        assert_eq!(a.id, first);
        assert_eq!(outbox::retry(&mut c, a.id, "w", &Failure::Error("HTTP 500"), &policy, T0).await.expect("retry"), Retry::At(T0 + 1000));
        assert_eq!(outbox::claim_next(&mut c, "w", T0 + 999, lease).await.expect("claim"), None, "not due; and 'second' waits behind it");
        let a = outbox::claim_next(&mut c, "w", T0 + 1000, lease).await.expect("claim").expect("due");
        assert_eq!(a.attempts, 1);
        let r = outbox::retry(&mut c, a.id, "w", &Failure::RateLimited { retry_after: Duration::from_secs(7) }, &policy, T0 + 1000).await.expect("429");
        assert_eq!(r, Retry::At(T0 + 8000));
        let a = outbox::claim_next(&mut c, "w", T0 + 8000, lease).await.expect("claim").expect("after retry-after");
        assert_eq!(a.attempts, 1, "a rate limit is not the action's failure");
        assert_eq!(outbox::retry(&mut c, a.id, "w", &Failure::Error("HTTP 500"), &policy, T0 + 8000).await.expect("r"), Retry::At(T0 + 10_000), "second failure: 2 s");
        let a = outbox::claim_next(&mut c, "w", T0 + 10_000, lease).await.expect("claim").expect("again");
        assert_eq!(outbox::retry(&mut c, a.id, "w", &Failure::Error("channel_not_found"), &policy, T0 + 10_000).await.expect("r"), Retry::DeadLettered);
        let next = outbox::claim_next(&mut c, "w", T0 + 10_000, lease).await.expect("claim").expect("unblocked");
        assert_eq!(next.action, "second");
        let stats = outbox::stats(&mut c, T0 + 10_000).await.expect("stats");
        assert_eq!((stats.pending, stats.dead, stats.oldest_pending_age_ms), (1, 1, 10_000));
        let dead = outbox::dead_letters(&mut c, 10).await.expect("dead");
        assert_eq!(dead.len(), 1);
        assert_eq!((dead[0].attempts, dead[0].last_error.as_deref()), (3, Some("channel_not_found")));
    }

    async fn p2_a_result_written_with_its_last_heartbeats_counts_them_in_one_statement(db) {
        let conv = conversation(&db.store, "1.2").await;
        let mut c = db.store.conn().await.expect("conn");
        let id = tool_calls::start(&mut c, &conv, None, "call_1", "make", None, T0).await.expect("start");
        assert!(tool_calls::progress(&mut c, &conv, "call_1", 3, Some(r#"{"elapsedMs":3000}"#), T0 + 3_000).await.expect("p"));
        let f = tool_calls::Finish { outcome: "completed", summary: None, output: "ok", exit_code: Some(0), signal: None };
        let done = tool_calls::finish_counted(&mut c, &conv, "call_1", &f, 2, Some(r#"{"elapsedMs":5000}"#), T0 + 5_000).await.expect("finish");
        assert_eq!(done, Some(id.clone()));
        let row = tool_calls::get(&mut c, &id).await.expect("get").expect("row");
        assert_eq!((row.status.as_str(), row.heartbeats, row.last_progress.as_deref()), ("completed", 5, Some(r#"{"elapsedMs":5000}"#)));
        assert_eq!((row.progress_at, row.finished_at), (Some(T0 + 5_000), Some(T0 + 5_000)));
        let again = tool_calls::finish_counted(&mut c, &conv, "call_1", &f, 4, Some(r#"{"elapsedMs":9}"#), T0 + 9_000).await.expect("dup");
        assert_eq!(again, None, "never twice");
        let row = tool_calls::get(&mut c, &id).await.expect("get").expect("row");
        assert_eq!((row.heartbeats, row.last_progress.as_deref(), row.finished_at), (5, Some(r#"{"elapsedMs":5000}"#), Some(T0 + 5_000)), "a terminal call is left as it was");
        // Without counts the progress stays as the last flush left it.
        tool_calls::start(&mut c, &conv, None, "call_2", "ls", None, T0).await.expect("start");
        assert!(tool_calls::progress(&mut c, &conv, "call_2", 1, Some(r#"{"elapsedMs":1}"#), T0 + 1).await.expect("p"));
        let id2 = tool_calls::finish(&mut c, &conv, "call_2", &f, T0 + 7).await.expect("finish").expect("finished");
        let row = tool_calls::get(&mut c, &id2).await.expect("get").expect("row");
        assert_eq!((row.heartbeats, row.last_progress.as_deref(), row.progress_at), (1, Some(r#"{"elapsedMs":1}"#), Some(T0 + 1)));
    }

    async fn d1_actions_queued_together_keep_their_order_and_never_replace_a_waiting_edit(db) {
        let conv = conversation(&db.store, "a").await;
        let mut c = db.store.conn().await.expect("conn");
        let edit = NewAction { conversation_id: &conv, kind: Kind::Edit, coalesce_key: Some("tool:1"), action: "progress" };
        let Enqueued::Inserted(waiting) = outbox::enqueue(&mut c, &edit, T0).await.expect("edit") else { panic!("inserted") };
        let result = outbox::insert(&mut c, &NewAction { action: "result", ..edit.clone() }, T0).await.expect("insert");
        assert!(result > waiting, "a row of its own, after the waiting edit");
        let marks: Vec<NewAction<'_>> = ["unmark", "mark", "third"]
            .into_iter()
            .map(|action| NewAction { conversation_id: &conv, kind: Kind::Other, coalesce_key: None, action })
            .collect();
        outbox::insert_all(&mut c, &marks, T0 + 1).await.expect("insert all");
        let mut delivered = Vec::new();
        while let Some(a) = outbox::claim_next(&mut c, "w", T0 + 2, Duration::from_secs(30)).await.expect("claim") {
            delivered.push(a.action.clone());
            assert!(outbox::mark_delivered(&mut c, a.id, "w", T0 + 2).await.expect("mark"));
        }
        assert_eq!(delivered, ["progress", "result", "unmark", "mark", "third"]);
    }

    async fn d1_pending_edits_of_one_message_coalesce_but_not_once_claimed(db) {
        let conv = conversation(&db.store, "a").await;
        let mut c = db.store.conn().await.expect("conn");
        let edit = |body: &'static str| NewAction { conversation_id: "", kind: Kind::Edit, coalesce_key: Some("tool:1"), action: body };
        let e1 = outbox::enqueue(&mut c, &NewAction { conversation_id: &conv, ..edit("v1") }, T0).await.expect("e1");
        let e2 = outbox::enqueue(&mut c, &NewAction { conversation_id: &conv, ..edit("v2") }, T0).await.expect("e2");
        let Enqueued::Inserted(id) = e1 else { panic!("{e1:?}") };
        assert_eq!(e2, Enqueued::Coalesced(id));
        let other = NewAction { conversation_id: &conv, coalesce_key: Some("tool:2"), ..edit("x") };
        assert!(matches!(outbox::enqueue(&mut c, &other, T0).await.expect("other"), Enqueued::Inserted(_)), "another message does not coalesce");
        let claimed = outbox::claim_next(&mut c, "w", T0, Duration::from_secs(30)).await.expect("claim").expect("head");
        assert_eq!((claimed.id, claimed.action.as_str()), (id, "v2"));
        let e3 = outbox::enqueue(&mut c, &NewAction { conversation_id: &conv, ..edit("v3") }, T0).await.expect("e3");
        assert!(matches!(e3, Enqueued::Inserted(n) if n != id), "an edit in flight is not rewritten: {e3:?}");
    }

    async fn d3_an_expired_claim_is_taken_over_and_a_live_one_blocks_its_conversation(db) {
        let conv = conversation(&db.store, "a").await;
        let mut c = db.store.conn().await.expect("conn");
        outbox::enqueue(&mut c, &action(&conv, "one"), T0).await.expect("e");
        outbox::enqueue(&mut c, &action(&conv, "two"), T0).await.expect("e");
        let lease = Duration::from_secs(10);
        let a = outbox::claim_next(&mut c, "crashed", T0, lease).await.expect("claim").expect("one");
        assert_eq!(outbox::claim_next(&mut c, "w2", T0 + 5_000, lease).await.expect("claim"), None, "order: 'two' waits for 'one'");
        let b = outbox::claim_next(&mut c, "w2", T0 + 10_001, lease).await.expect("claim").expect("taken over");
        assert_eq!((b.id, b.action.as_str()), (a.id, "one"));
        assert!(!outbox::mark_delivered(&mut c, a.id, "crashed", T0 + 10_002).await.expect("stale"), "the old claim is void");
        assert!(outbox::mark_delivered(&mut c, b.id, "w2", T0 + 10_002).await.expect("mark"));
    }

    async fn d2_a_turn_recorded_without_its_commits_answer_is_found_again_by_its_message(db) {
        // The runner looks for the open turn of the message whose recording seemed to fail.
        let (a, b) = (conversation(&db.store, "a").await, conversation(&db.store, "b").await);
        let mut c = db.store.conn().await.expect("conn");
        let first = turns::start_for(&mut c, &a, "make", "U1", Some("m1"), T0).await.expect("turn");
        turns::start_for(&mut c, &a, "ls", "U1", Some("m2"), T0 + 1).await.expect("turn");
        let found = turns::open_for_message(&mut c, &a, "m1").await.expect("find").expect("open");
        assert_eq!((found.id.as_str(), found.prompt.as_str()), (first.id.as_str(), "make"));
        assert_eq!(turns::open_for_message(&mut c, &b, "m1").await.expect("find"), None, "another thread's");
        assert_eq!(turns::open_for_message(&mut c, &a, "m3").await.expect("find"), None);
        let ended = turns::Ending { status: "ended", ..Default::default() };
        assert!(turns::finish(&mut c, &first.id, &ended, T0 + 2).await.expect("finish"));
        assert_eq!(turns::open_for_message(&mut c, &a, "m1").await.expect("find"), None, "an ended turn is not taken again");
    }

    async fn d1_a_claim_whose_answer_was_lost_is_taken_again_by_its_worker_at_once(db) {
        // The connection cut after the claim's commit: the worker never read which row it holds.
        // Its next claim takes that row again, not a lease later; other workers still wait.
        let (a, b) = (conversation(&db.store, "a").await, conversation(&db.store, "b").await);
        let mut c = db.store.conn().await.expect("conn");
        outbox::enqueue(&mut c, &action(&a, "a1"), T0).await.expect("e");
        let lease = Duration::from_secs(60);
        let lost = outbox::claim_next(&mut c, "w", T0, lease).await.expect("claim").expect("a1");
        assert_eq!(outbox::claim_next(&mut c, "v", T0 + 1, lease).await.expect("claim"), None, "held by w");
        let again = outbox::claim_next(&mut c, "w", T0 + 1, lease).await.expect("claim").expect("taken again");
        assert_eq!((again.id, again.action.as_str()), (lost.id, "a1"));
        assert!(outbox::mark_delivered(&mut c, again.id, "w", T0 + 2).await.expect("mark"));
        if db.store.backend() == Backend::Postgres {
            // The same after a delivery's record that claimed with it (the statement's answer lost).
            outbox::enqueue(&mut c, &action(&b, "b1"), T0).await.expect("e");
            outbox::enqueue(&mut c, &action(&b, "b2"), T0).await.expect("e");
            let b1 = outbox::claim_next(&mut c, "w", T0 + 3, lease).await.expect("claim").expect("b1");
            outbox::enqueue(&mut c, &action(&a, "a2"), T0 + 3).await.expect("e");
            let of_b1 = outbox::Delivered { id: b1.id, conversation_id: b.as_str(), remember: None };
            let lost = outbox::delivered_and_claim_next(&mut c, of_b1, "w", T0 + 4, lease, 0).await.expect("record").claimed.expect("a2");
            // Its next claims, well within the lease, take b2 (b1's conversation's next, an older id)
            // and then the row the lost answer named.
            let mut taken = Vec::new();
            while let Some(row) = outbox::claim_next(&mut c, "w", T0 + 5, lease).await.expect("claim") {
                assert!(outbox::mark_delivered(&mut c, row.id, "w", T0 + 5).await.expect("mark"));
                taken.push(row.action);
            }
            assert_eq!(taken, ["b2", "a2"]);
            assert_eq!(lost.action, "a2");
        }
    }

    async fn d3_pending_outbox_rows_and_open_turns_survive_closing_and_reopening(db) {
        let conv = conversation(&db.store, "a").await;
        let turn_id = {
            let mut tx = db.store.begin().await.expect("tx");
            let t = turns::start(tx.conn(), &conv, "sleep 60", "U1", T0).await.expect("turn");
            outbox::enqueue(tx.conn(), &action(&conv, "tool message"), T0).await.expect("e");
            tx.commit().await.expect("commit");
            t.id
        };
        // A transaction that never commits leaves nothing behind.
        {
            let mut tx = db.store.begin().await.expect("tx");
            outbox::enqueue(tx.conn(), &action(&conv, "rolled back"), T0).await.expect("e");
        }
        db.store.close().await;
        let reopened = Store::open(&db.url).await.expect("reopen");
        let mut c = reopened.conn().await.expect("conn");
        let open = turns::open(&mut c).await.expect("open");
        assert_eq!(open.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), [turn_id.as_str()]);
        let a = outbox::claim_next(&mut c, "w", T0, Duration::from_secs(5)).await.expect("claim").expect("pending row");
        assert_eq!(a.action, "tool message");
        assert!(outbox::mark_delivered(&mut c, a.id, "w", T0).await.expect("mark"));
        assert_eq!(outbox::claim_next(&mut c, "w", T0, Duration::from_secs(5)).await.expect("claim"), None, "the rolled-back row never existed");
        drop(c);
        reopened.close().await;
    }

    async fn r6_permission_requests_are_decided_once_or_expire(db) {
        let conv = conversation(&db.store, "a").await;
        let mut c = db.store.conn().await.expect("conn");
        let new = |expires_at| permissions::NewRequest {
            conversation_id: "", turn_id: None, request_id: r#""_qwen_perm_x_1""#, call_id: Some("call_1"),
            title: "rm -rf build", options: r#"[{"optionId":"proceed_once"}]"#, requester: "U1", expires_at,
        };
        let a = permissions::create(&mut c, &permissions::NewRequest { conversation_id: &conv, ..new(T0 + 600_000) }, T0).await.expect("a");
        let b = permissions::create(&mut c, &permissions::NewRequest { conversation_id: &conv, ..new(T0 + 1_000) }, T0).await.expect("b");
        let decided = permissions::resolve(&mut c, &a, "U2", "proceed_once", T0 + 10).await.expect("resolve").expect("pending");
        assert_eq!((decided.status.as_str(), decided.decider.as_deref()), ("decided", Some("U2")));
        assert_eq!(permissions::resolve(&mut c, &a, "U3", "cancel", T0 + 11).await.expect("again"), None, "first decision wins");
        assert!(permissions::expire_due(&mut c, T0 + 999).await.expect("early").is_empty());
        let expired = permissions::expire_due(&mut c, T0 + 1_000).await.expect("expire");
        assert_eq!(expired.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(), [b.as_str()]);
        assert_eq!(permissions::resolve(&mut c, &b, "U1", "proceed_once", T0 + 1_001).await.expect("late"), None, "an expired request cannot be decided");
        assert_eq!(permissions::get(&mut c, &b).await.expect("get").expect("b").status, "expired");
    }

    async fn history_lists_with_filters_and_cursor_pages(db) {
        let mut c = db.store.conn().await.expect("conn");
        let specs = [("slack", "C1", "U1"), ("slack", "C2", "U2"), ("discord", "D1", "U1"), ("slack", "C1", "U3"), ("console", "-", "local"), ("slack", "C1", "U1"), ("discord", "D1", "U2")];
        let mut ids = Vec::new();
        for (i, (platform, channel, user)) in specs.iter().enumerate() {
            let k = Key { platform, workspace: "W", channel, thread: &i.to_string() };
            ids.push(conversations::find_or_create(&mut c, &k, user, "t", T0 + i as i64 * 1000).await.expect("conv").0.id);
        }
        let mut seen = Vec::new();
        let mut cursor = None;
        loop {
            let page = history::list(&mut c, &Filter { limit: Some(3), cursor: cursor.clone(), ..Filter::default() }).await.expect("page");
            assert!(page.items.len() <= 3);
            seen.extend(page.items.iter().map(|i| i.id.clone()));
            match page.next_cursor { Some(next) => cursor = Some(next), None => break }
        }
        let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
        assert_eq!(seen, newest_first, "every conversation once, newest first");
        let slack_c1 = history::list(&mut c, &Filter { platform: Some("slack".into()), channel: Some("C1".into()), ..Filter::default() }).await.expect("f");
        assert_eq!(slack_c1.items.len(), 3);
        let u1_window = history::list(&mut c, &Filter { user: Some("U1".into()), since: Some(T0 + 1000), until: Some(T0 + 5000), ..Filter::default() }).await.expect("f");
        assert_eq!(u1_window.items.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(), [ids[2].as_str()]);
        let closed = history::list(&mut c, &Filter { status: Some("closed".into()), ..Filter::default() }).await.expect("f");
        assert!(closed.items.is_empty());
        let bad = history::list(&mut c, &Filter { cursor: Some("nonsense".into()), ..Filter::default() }).await;
        assert!(matches!(bad, Err(HistoryError::BadCursor(_))), "{bad:?}");
    }

    async fn issue17_conversations_belong_to_a_project_and_history_filters_by_it(db) {
        let mut c = db.store.conn().await.expect("conn");
        let (old, _) = conversations::find_or_create(&mut c, &key("0.1"), "U1", "t", T0).await.expect("default");
        assert_eq!(old.project, conversations::DEFAULT_PROJECT, "the one-project case");
        let k = |thread| Key { platform: "discord", workspace: "G", channel: "98765", thread };
        let (a, created) = conversations::find_or_create_in(&mut c, &k("1"), "api", "U1", "t", T0 + 1).await.expect("api");
        assert!(created);
        let (web, _) = conversations::find_or_create_in(&mut c, &k("2"), "web", "U1", "t", T0 + 2).await.expect("web");
        let (again, created) = conversations::find_or_create_in(&mut c, &k("1"), "web", "U2", "t", T0 + 3).await.expect("again");
        assert!(!created && again.id == a.id && again.project == "api", "a conversation keeps its project");
        let ids = |page: history::Page| page.items.into_iter().map(|i| (i.id, i.project)).collect::<Vec<_>>();
        let api = history::list(&mut c, &Filter { project: Some("api".into()), ..Filter::default() }).await.expect("f");
        assert_eq!(ids(api), [(a.id.clone(), "api".to_owned())]);
        let web_page = history::list(&mut c, &Filter { project: Some("web".into()), platform: Some("discord".into()), ..Filter::default() }).await.expect("f");
        assert_eq!(ids(web_page), [(web.id.clone(), "web".to_owned())]);
        let default = history::list(&mut c, &Filter { project: Some(conversations::DEFAULT_PROJECT.into()), ..Filter::default() }).await.expect("f");
        assert_eq!(ids(default), [(old.id.clone(), "default".to_owned())]);
        let all = history::list(&mut c, &Filter::default()).await.expect("f");
        assert_eq!(all.items.len(), 3, "no filter: every project");
        let none = history::list(&mut c, &Filter { project: Some("nope".into()), ..Filter::default() }).await.expect("f");
        assert!(none.items.is_empty());
        let detail = history::detail(&mut c, &web.id).await.expect("detail").expect("found");
        assert_eq!(detail.conversation.project, "web");
    }

    async fn history_detail_and_search_give_the_same_results_on_both_backends(db) {
        let conv = conversation(&db.store, "a").await;
        let mut c = db.store.conn().await.expect("conn");
        let t = turns::start(&mut c, &conv, "Run the BUILD please", "U1", T0).await.expect("turn");
        let end = turns::Ending { status: "ended", stop_reason: Some("end_turn"), end_cause: None, answer: Some("The build failed with 50% of tests") };
        turns::finish(&mut c, &t.id, &end, T0 + 5).await.expect("finish");
        let call = tool_calls::start(&mut c, &conv, Some(&t.id), "call_1", "cargo build", Some("execute"), T0 + 1).await.expect("call");
        let f = tool_calls::Finish { outcome: "failed", summary: Some("exit 101"), output: "error[E0308]: mismatched types\nBuild FAILED", exit_code: Some(101), signal: None };
        tool_calls::finish(&mut c, &conv, "call_1", &f, T0 + 4).await.expect("finish");
        transcript::append(&mut c, &conv, &NewEntry { turn_id: Some(&t.id), kind: "prompt", actor: Some("U1"), body: "Run the BUILD please", tool_call_id: None }, T0).await.expect("tx");
        transcript::append(&mut c, &conv, &NewEntry { turn_id: Some(&t.id), kind: "tool_finished", actor: Some("agent"), body: "failed", tool_call_id: Some(&call) }, T0 + 4).await.expect("tx");

        let d = history::detail(&mut c, &conv).await.expect("detail").expect("found");
        assert_eq!((d.turns.len(), d.transcript.len(), d.tool_calls.len()), (1, 2, 1));
        assert_eq!(d.tool_calls[0].output.as_deref(), Some("error[E0308]: mismatched types\nBuild FAILED"));
        assert!(history::detail(&mut c, "missing").await.expect("detail").is_none());

        let fields = |hits: Vec<history::Hit>| hits.into_iter().map(|h| h.field).collect::<Vec<_>>();
        assert_eq!(fields(history::search(&mut c, "build", 50).await.expect("s")), ["tool_output", "tool_title", "answer", "prompt"], "newest first");
        assert_eq!(fields(history::search(&mut c, "MISMATCHED", 50).await.expect("s")), ["tool_output"]);
        assert_eq!(fields(history::search(&mut c, "50%", 50).await.expect("s")), ["answer"], "% is literal");
        assert!(history::search(&mut c, "5_%", 50).await.expect("s").is_empty(), "_ is literal");
        assert_eq!(history::search(&mut c, "build", 2).await.expect("s").len(), 2);
    }

    async fn d5_the_leader_lease_is_exclusive_on_postgres_and_free_after_release_or_death(db) {
        let first = leader::try_acquire(&db.store, 42).await.expect("acquire").expect("first holds");
        let second = leader::try_acquire(&db.store, 42).await.expect("acquire");
        match db.store.backend() {
            Backend::Sqlite => assert!(second.is_some(), "one node: always the leader"),
            Backend::Postgres => {
                assert!(second.is_none(), "exclusive");
                first.release().await;
                let mut again = leader::try_acquire(&db.store, 42).await.expect("acquire").expect("free after release");
                assert!(again.check().await);
                // A replica that dies (its connection drops) frees the lease without a release.
                drop(again);
                let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                loop {
                    if let Some(l) = leader::try_acquire(&db.store, 42).await.expect("acquire") { l.release().await; break; }
                    assert!(tokio::time::Instant::now() < deadline, "lease freed after the holder's connection died");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    async fn a_database_migrated_by_a_newer_version_refuses_to_start(db) {
        let checksum = match db.store.backend() { Backend::Postgres => "'\\x00'::bytea", Backend::Sqlite => "X'00'" };
        let insert = format!("INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) VALUES (99990101000000, 'from the future', TRUE, {checksum}, 0)");
        sqlx::query(sqlx::AssertSqlSafe(insert)).execute(db.store.statements()).await.expect("fake future migration");
        let err = Store::open(&db.url).await.expect_err("must refuse");
        assert!(matches!(err, StoreError::NewerSchema { found: 99990101000000, .. }), "{err:?}");
        assert!(err.to_string().contains("migrated by a newer chat-bridge"), "{err}");
    }
}

#[tokio::test]
async fn an_unknown_scheme_or_an_unreachable_database_is_one_clear_error_with_the_password_masked()
{
    let err = Store::open("mysql://root:hunter2@localhost/db")
        .await
        .expect_err("unsupported");
    assert!(matches!(err, StoreError::UnknownScheme { .. }));
    let msg = err.to_string();
    assert!(
        msg.contains("mysql://root:***@localhost/db") && !msg.contains("hunter2"),
        "{msg}"
    );

    let err = Store::open("postgres://bridge:hunter2@127.0.0.1:1/cb")
        .await
        .expect_err("unreachable");
    assert!(matches!(err, StoreError::Unreachable { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("postgres://bridge:***@127.0.0.1:1/cb") && !msg.contains("hunter2"),
        "{msg}"
    );
}

#[test]
fn test_database_urls_swap_only_the_database_name() {
    assert_eq!(
        support::with_database("postgres://u@127.0.0.1:5/postgres", "x"),
        "postgres://u@127.0.0.1:5/x"
    );
    assert_eq!(
        support::with_database("postgres://u@h/postgres?sslmode=disable", "x"),
        "postgres://u@h/x?sslmode=disable"
    );
}

on_both! {
    async fn d3_claims_of_a_previous_run_are_released_at_start_up(db) {
        let conv = conversation(&db.store, "a").await;
        let mut c = db.store.conn().await.expect("conn");
        outbox::enqueue(&mut c, &action(&conv, "one"), T0).await.expect("e");
        outbox::claim_next(&mut c, "dead", T0, Duration::from_secs(600)).await.expect("claim").expect("one");
        assert_eq!(outbox::claim_next(&mut c, "new", T0, Duration::from_secs(60)).await.expect("claim"), None);
        assert_eq!(outbox::release_claims(&mut c).await.expect("release"), 1);
        assert!(outbox::claim_next(&mut c, "new", T0, Duration::from_secs(60)).await.expect("claim").is_some());
    }
}

/// D1 on SQLite, the one-node default: many transactions at once — from this store's tasks and from
/// a second store on the same file (another process, such as `chat-bridge history`) — that each read
/// and then write are all committed: none is refused with SQLITE_BUSY ("database is locked") half-way
/// and no write is lost. Each transaction takes the write lock when it begins; this store's own
/// transactions queue for its one write connection. Reads on the read-only connections see every
/// commit and cannot write.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn d1_concurrent_writers_on_sqlite_are_never_refused_as_locked_and_lose_no_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("writers.db").display());
    let store = Store::open(&url).await.expect("open");
    let other = Store::open(&url).await.expect("open a second time");
    let conv = conversation(&store, "writers").await;
    const TASKS: usize = 32;
    const EACH: usize = 25;
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..TASKS {
        let (store, conv) = (
            if t % 4 == 0 {
                other.clone()
            } else {
                store.clone()
            },
            conv.clone(),
        );
        tasks.spawn(async move {
            for i in 0..EACH {
                let mut tx = store.begin().await?;
                // Read, then write, in one transaction: a deferred BEGIN's read snapshot goes stale
                // when another connection commits, and its first write is then refused at once.
                outbox::stats(tx.conn(), T0).await?;
                outbox::enqueue(tx.conn(), &action(&conv, &format!("{t}-{i}")), T0).await?;
                tx.commit().await?;
            }
            Ok::<_, StoreError>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        if let Err(e) = done.expect("task") {
            panic!("a write was refused: {e}");
        }
    }
    let mut r = store.read_conn().await.expect("read conn");
    assert_eq!(
        outbox::stats(&mut r, T0).await.expect("stats").pending,
        i64::try_from(TASKS * EACH).expect("fits"),
        "every committed write is there and seen by the readers"
    );
    assert!(
        outbox::enqueue(&mut r, &action(&conv, "no"), T0)
            .await
            .is_err(),
        "a read connection refuses writes"
    );
    drop(r);
    other.close().await;
    store.close().await;
}

/// D1 on SQLite: code that holds a connection (a few statements that need not be atomic) and then
/// begins a transaction — the inbox's dead-letter path, start-up's sweep of open turns — is not
/// made to wait for itself by the one transaction connection: the transaction starts at once and
/// both see each other's commits.
#[tokio::test]
async fn d1_a_transaction_begun_while_holding_a_connection_on_sqlite_does_not_wait_for_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("nested.db").display());
    let store = Store::open(&url).await.expect("open");
    let conv = conversation(&store, "nested").await;
    let mut held = store.conn().await.expect("a connection");
    outbox::enqueue(&mut held, &action(&conv, "held"), T0)
        .await
        .expect("a write on the held connection");
    // Well under the pool's 5 s acquire timeout: a transaction that had to wait for the held
    // connection would time out here.
    let nested = tokio::time::timeout(Duration::from_secs(2), async {
        let mut tx = store.begin().await?;
        outbox::enqueue(tx.conn(), &action(&conv, "nested"), T0).await?;
        tx.commit().await
    })
    .await
    .expect("the transaction began and committed while the connection was held");
    nested.expect("the nested transaction committed");
    assert_eq!(
        outbox::stats(&mut held, T0).await.expect("stats").pending,
        2,
        "the held connection sees the transaction's write"
    );
    drop(held);
    store.close().await;
}

/// D1 on SQLite: a full disk in the middle of a transaction leaves the one writer connection usable
/// once there is space again. SQLite rolls such a transaction back by itself, sqlx's own rollback
/// then fails, and sqlx went on counting the connection inside a transaction: every later `BEGIN`
/// on it was refused ("begin_with at non-zero transaction depth") — every write of the bridge, for
/// good (an outside tester filled a small tmpfs under the embedded default; freeing space did not
/// help, the thread never answered again). A full disk is a transient fault: what waits for the
/// database is held, not dropped (the tester's messages typed meanwhile were lost).
#[tokio::test]
async fn d1_after_a_full_disk_mid_transaction_the_sqlite_writer_takes_transactions_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("full.db").display());
    let store = Store::open(&url).await.expect("open");
    let conv = conversation(&store, "full").await;
    // The disk fills: the writer connection may grow the database by two pages only.
    {
        let mut c = store.write_conn().await.expect("the writer");
        sqlx::query("CREATE TABLE filler (x TEXT)")
            .execute(&mut *c)
            .await
            .expect("a table to fill");
        let (pages,): (i64,) = sqlx::query_as("PRAGMA page_count")
            .only(&mut *c)
            .await
            .expect("page count");
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "PRAGMA max_page_count = {}",
            pages + 2
        )))
        .execute(&mut *c)
        .await
        .expect("a page limit");
    }
    let big = "x".repeat(3_000);
    let full = async {
        let mut tx = store.begin().await?;
        outbox::enqueue(tx.conn(), &action(&conv, "lost with its transaction"), T0).await?;
        for _ in 0..100 {
            sqlx::query("INSERT INTO filler (x) VALUES ($1)")
                .arg(big.as_str())
                .execute(tx.conn())
                .await?;
        }
        tx.commit().await
    }
    .await;
    let e = full.expect_err("the transaction fails: the database is full");
    assert!(e.to_string().contains("full"), "{e}");
    assert!(
        e.is_transient(),
        "a full disk is waited out (an operator frees space), not a reason to drop what waits: {e}"
    );
    // Space again (a connection opened now has no page limit): transactions and single writes
    // go through, in time.
    tokio::time::timeout(Duration::from_secs(10), async {
        let mut tx = store.begin().await?;
        outbox::enqueue(tx.conn(), &action(&conv, "after"), T0).await?;
        tx.commit().await?;
        let mut c = store.write_conn().await?;
        outbox::enqueue(&mut c, &action(&conv, "and after"), T0).await
    })
    .await
    .expect("in time")
    .expect("writes after the disk was full");
    let mut c = store.conn().await.expect("conn");
    assert_eq!(
        outbox::stats(&mut c, T0).await.expect("stats").pending,
        2,
        "the two writes after it, none of the failed transaction's"
    );
    drop(c);
    store.close().await;
}

/// P2 on SQLite (item 1): writes outside a transaction — delivery claims and marks, heartbeat
/// counts, inbox entries, message intents — queue for the one transaction connection with the
/// transactions. On connections of their own they contended with it for SQLite's write lock, and
/// whichever lost slept in SQLite's busy handler (1, 2, 5 … 100 ms a try: ~10,000 such sleeps in
/// one P2 run at 1,000 sessions, none after). Reads keep their own connections.
#[tokio::test]
async fn p2_writes_outside_a_transaction_on_sqlite_queue_for_the_one_writer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("writer.db").display());
    let store = Store::open(&url).await.expect("open");
    let conv = conversation(&store, "writer").await;
    let mut tx = store.begin().await.expect("a transaction holds the writer");
    outbox::enqueue(tx.conn(), &action(&conv, "in the transaction"), T0)
        .await
        .expect("a write in the transaction");
    for (which, waited) in [
        (
            "write_conn",
            tokio::time::timeout(Duration::from_millis(300), store.write_conn())
                .await
                .is_err(),
        ),
        (
            "relaxed_conn",
            tokio::time::timeout(Duration::from_millis(300), store.relaxed_conn())
                .await
                .is_err(),
        ),
    ] {
        assert!(
            waited,
            "{which} was handed a connection while a transaction held the writer: a second writer"
        );
    }
    let mut reader = tokio::time::timeout(Duration::from_secs(2), store.conn())
        .await
        .expect("a read never waits for the writer")
        .expect("a connection");
    assert_eq!(
        outbox::stats(&mut reader, T0).await.expect("stats").pending,
        0,
        "the reader sees the last commit, not the open transaction"
    );
    drop(reader);
    let queued = {
        let store = store.clone();
        let conv = conv.clone();
        tokio::spawn(async move {
            let mut c = store.write_conn().await?;
            outbox::enqueue(&mut c, &action(&conv, "queued"), T0).await
        })
    };
    tx.commit().await.expect("commit");
    tokio::time::timeout(Duration::from_secs(2), queued)
        .await
        .expect("the queued write gets the writer once the transaction commits")
        .expect("task")
        .expect("the queued write");
    let mut c = store.conn().await.expect("conn");
    assert_eq!(
        outbox::stats(&mut c, T0).await.expect("stats").pending,
        2,
        "both writes are in"
    );
    drop(c);
    store.close().await;
}

/// P2 on SQLite: a commit does not copy the write-ahead log back into the database (SQLite's
/// default every 1,000 pages put milliseconds on the commit that crossed it); the store's
/// checkpoint, which the bridge runs every second off the writers' path, does.
#[tokio::test]
async fn p2_commits_on_sqlite_leave_the_checkpoint_to_the_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("wal.db").display());
    let store = Store::open(&url).await.expect("open");
    let conv = conversation(&store, "wal").await;
    // Past SQLite's default of 1,000 pages (4 KiB each) and short of the store's 10,000: about
    // 2,500 pages of outbox rows and their indexes.
    let text = "x".repeat(3_000);
    for i in 0..500 {
        let mut tx = store.begin().await.expect("begin");
        outbox::enqueue(tx.conn(), &action(&conv, &format!("{i}{text}")), T0)
            .await
            .expect("enqueue");
        tx.commit().await.expect("commit");
    }
    let (wal, db) = (dir.path().join("wal.db-wal"), dir.path().join("wal.db"));
    let size = |p: &std::path::Path| std::fs::metadata(p).expect("file").len();
    let (log, kept) = (size(&wal), size(&db));
    assert!(
        log > 1_200 * 4096,
        "the commits left {log} bytes in the log: more than SQLite's default checkpoint would"
    );
    assert!(
        kept < 1_000_000,
        "the database file holds {kept} bytes: the commits copied the log back themselves"
    );
    store.checkpoint().await.expect("checkpoint");
    assert!(
        size(&db) > kept + 1_500_000,
        "after the store's checkpoint the database file holds the rows ({} bytes, was {kept})",
        size(&db)
    );
    store.close().await;
}

/// D1: a write that returns its row is not reported done before PostgreSQL has finished it. The
/// tool result's one statement (a data-modifying `WITH`) sends its row before its transcript and
/// outbox inserts are checked and before it commits; read with `fetch_optional` through sqlx's
/// `Any` driver the call returned that row — "written" — and a failure after it (here a deferred
/// constraint failing the commit; in an outside tester's run PostgreSQL stopped at that moment)
/// surfaced only on the connection's next statement: the result was lost while the thread was told
/// the tool finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_a_write_that_returns_a_row_is_done_only_once_the_statement_has_finished() {
    let db = support::TestDb::new(Backend::Postgres).await;
    let conv = conversation(&db.store, "1.1").await;
    let mut c = db.store.conn().await.expect("conn");
    let turn = turns::start(&mut c, &conv, "make", "U1", T0)
        .await
        .expect("turn");
    let id = tool_calls::start(
        &mut c,
        &conv,
        Some(&turn.id),
        "s/call_1",
        "make",
        Some("execute"),
        T0,
    )
    .await
    .expect("start");
    for ddl in [
        "CREATE FUNCTION refuse_outbox() RETURNS trigger AS $$ BEGIN
             RAISE EXCEPTION 'the outbox refuses this row' USING ERRCODE = 'P0001';
         END $$ LANGUAGE plpgsql",
        // Checked at the commit, after the statement has sent its row: as a commit that fails, or
        // never comes because PostgreSQL stops, looks to the caller.
        "CREATE CONSTRAINT TRIGGER refuse_outbox AFTER INSERT ON outbox DEFERRABLE INITIALLY DEFERRED
             FOR EACH ROW EXECUTE FUNCTION refuse_outbox()",
    ] {
        sqlx::query(ddl).execute(&mut *c).await.expect("trigger");
    }
    let finish = tool_calls::Finish {
        outcome: "completed",
        summary: Some("exit 0"),
        output: "built\n",
        exit_code: Some(0),
        signal: None,
    };
    let entry = NewEntry {
        turn_id: Some(&turn.id),
        kind: "tool_finished",
        actor: Some("agent"),
        body: "exit 0",
        tool_call_id: Some(&id),
    };
    let edit = NewAction {
        conversation_id: &conv,
        kind: Kind::Edit,
        coalesce_key: Some("tool:s/call_1"),
        action: r#"{"edit":1}"#,
    };
    let written = tool_calls::finish_with_result(
        &mut c,
        &conv,
        "s/call_1",
        &id,
        &finish,
        0,
        None,
        &entry,
        &edit,
        None,
        T0 + 10,
    )
    .await;
    assert!(
        written.is_err(),
        "the statement failed after its row: {written:?}"
    );
    let row = tool_calls::get(&mut c, &id)
        .await
        .expect("the connection answers the next statement")
        .expect("row");
    assert_eq!(row.status, "running", "nothing of it was written");
    drop(c);
    db.cleanup().await;
}
