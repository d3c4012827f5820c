//! The bridge end to end, on real PostgreSQL and on SQLite, with the real shell-agent at short
//! intervals (or a scripted daemon for silence), delivering to a recording chat platform.

use std::sync::Arc;
use std::time::Duration;

use chat_bridge::app::Application;
use chat_bridge::channel::{Tone, console};
use chat_bridge::core::OnStall;
use chat_bridge::store::bind::BindExt;
use chat_bridge::store::bind::FetchExt;
use chat_bridge::store::{tool_calls, turns};
use chat_bridge_tests::bridge::{config, settle};
use chat_bridge_tests::on_both;
use chat_bridge_tests::recorder::Recorder;
use chat_bridge_tests::scripted::{Peer, ScriptedDaemon};
use serde_json::json;

on_both! {
    async fn l1_l2_a_silent_command_longer_than_the_idle_limit_is_one_message_edited_once_and_never_stalls(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&config(&db.url, dir.path()), rec.clone()).await.expect("build");
        app.core.accept(console::inbound("sleep 1.2; echo 42")).await.expect("accept");
        settle(&app).await;
        let posts = rec.posts();
        assert_eq!(posts.len(), 1, "one tool message, nothing else (no stall notice, no heartbeat message): {:#?}", rec.calls());
        let (id, first) = &posts[0];
        assert_eq!(first.tone, Tone::Running);
        assert_eq!(rec.edits_of(id), 1, "edited once, with the result");
        let (_, last) = &rec.latest()[0];
        assert_eq!(last.tone, Tone::Success);
        assert!(last.title.starts_with("✅ sleep 1.2; echo 42"), "{}", last.title);
        assert_eq!(last.code.as_deref(), Some("42"));
        let mut c = app.store.conn().await.expect("conn");
        let conv = chat_bridge::store::history::list(&mut c, &Default::default()).await.expect("list").items.remove(0);
        let calls = tool_calls::of_conversation(&mut c, &conv.id).await.expect("calls");
        assert!(calls[0].heartbeats >= 3, "the heartbeats arrived ({}), and none made a message", calls[0].heartbeats);
        let t = &turns::of_conversation(&mut c, &conv.id).await.expect("turns")[0];
        assert_eq!((t.status.as_str(), t.end_cause.as_deref()), ("ended", None));
        drop(c);
        app.shutdown().await;
    }

    async fn f1_heartbeat_counts_reach_the_store_while_a_silent_command_runs_and_add_up_after_it(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let mut cfg = config(&db.url, dir.path());
        cfg.liveness.progress_flush = Duration::from_millis(300);
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        app.core.accept(console::inbound("sleep 2.5; echo counted")).await.expect("accept");
        // While it runs: the store already counts heartbeats (written in batches by the writer).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        let mut seen_running = 0;
        while tokio::time::Instant::now() < deadline && seen_running == 0 {
            let mut c = app.store.conn().await.expect("conn");
            let listed = chat_bridge::store::history::list(&mut c, &Default::default()).await.expect("list").items;
            if let Some(conv) = listed.first() {
                let calls = tool_calls::of_conversation(&mut c, &conv.id).await.expect("calls");
                if let Some(call) = calls.iter().find(|c| c.status == "running" && c.heartbeats > 0) {
                    seen_running = call.heartbeats;
                }
            }
            drop(c);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(seen_running > 0, "heartbeat counts were written while the command ran");
        settle(&app).await;
        let mut c = app.store.conn().await.expect("conn");
        let conv = chat_bridge::store::history::list(&mut c, &Default::default()).await.expect("list").items.remove(0);
        let calls = tool_calls::of_conversation(&mut c, &conv.id).await.expect("calls");
        assert_eq!(calls[0].status, "completed");
        // The shell agent heartbeats every 200 ms in these tests: about 12 over 2.5 s.
        assert!((8..=14).contains(&calls[0].heartbeats) && calls[0].heartbeats > seen_running, "every heartbeat counted once: {} (seen {seen_running} while running)", calls[0].heartbeats);
        assert_eq!(rec.posts().len(), 1, "and none made a message");
        drop(c);
        app.shutdown().await;
    }

    async fn f1_heartbeat_counts_not_yet_written_are_written_when_the_bridge_stops_mid_command(db) {
        // Counts go to the store every `progress_flush`; one that never comes in this test leaves
        // every count in the conversation until the shutdown, which must not lose them (an outside
        // tester: SIGTERM 14 s into `sleep 60` left the call at 0 heartbeats for good).
        let dir = tempfile::tempdir().expect("tmp");
        let mut cfg = config(&db.url, dir.path());
        cfg.liveness.progress_flush = Duration::from_secs(3600);
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        app.core.accept(console::inbound("sleep 30")).await.expect("accept");
        // Until the live board shows heartbeats of the running call (the shell agent beats every
        // 200 ms in these tests).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let mut live = 0;
        while live < 3 {
            assert!(tokio::time::Instant::now() < deadline, "heartbeats reached the live board");
            live = app.core.live().snapshot().turns.iter().flat_map(|t| &t.tools).map(|t| t.heartbeats).max().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        app.shutdown().await;
        let store = chat_bridge::store::Store::open(&db.url).await.expect("store");
        let mut c = store.conn().await.expect("conn");
        let conv = chat_bridge::store::history::list(&mut c, &Default::default()).await.expect("list").items.remove(0);
        let calls = tool_calls::of_conversation(&mut c, &conv.id).await.expect("calls");
        assert_eq!(calls.len(), 1);
        assert!(
            calls[0].heartbeats >= i64::try_from(live).expect("count"),
            "the counts the conversation held were written at shutdown: {} stored, {live} seen live",
            calls[0].heartbeats
        );
    }

    async fn r3_timeouts_show_as_errors_with_the_partial_output_or_the_no_output_sentence(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&config(&db.url, dir.path()), rec.clone()).await.expect("build");
        app.core.accept(console::inbound("timeout=1s echo partial; sleep 30")).await.expect("accept");
        app.core.accept(console::inbound("timeout=1s sleep 30")).await.expect("accept");
        settle(&app).await;
        let latest = rec.latest();
        assert_eq!(latest.len(), 2, "{latest:#?}");
        let (partial, silent) = (&latest[0].1, &latest[1].1);
        for m in [partial, silent] {
            assert_eq!(m.tone, Tone::Error);
            assert!(m.title.contains("timed out"), "{}", m.title);
            assert!(m.footer.as_deref().is_some_and(|f| f.contains("chat-bridge history show")), "{m:?}");
        }
        assert_eq!(partial.code.as_deref(), Some("partial"));
        assert_eq!(silent.code, None);
        assert!(silent.body.as_deref().is_some_and(|b| b.contains("There was no output before it timed out.")), "{silent:?}");
        app.shutdown().await;
    }

    async fn l3_a_daemon_that_goes_quiet_is_reported_stalled_once_and_cancelled_with_on_stall_cancel(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let daemon = ScriptedDaemon::start(|mut peer: Peer| async move {
            let prompt = peer.open_and_prompted("quiet").await;
            peer.send(json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"quiet","update":
                {"sessionUpdate":"tool_call","toolCallId":"c1","title":"make deploy","kind":"execute","status":"in_progress"}}})).await;
            // Then nothing — no heartbeats — until the bridge cancels.
            peer.expect("session/cancel").await;
            peer.send(json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"quiet","update":
                {"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"failed","rawOutput":{"outcome":"cancelled","output":""}}}})).await;
            peer.reply(&prompt, json!({"stopReason": "cancelled"})).await;
            let _ = peer.recv().await;
        })
        .await;
        let mut cfg = config(&db.url, dir.path());
        cfg.daemon.url = Some(daemon.url.clone());
        cfg.daemon.token = Some(daemon.token.clone().into());
        cfg.liveness.on_stall = OnStall::Cancel;
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        app.core.accept(console::inbound("make deploy")).await.expect("accept");
        settle(&app).await;
        let warnings = rec.with_tone(Tone::Warning);
        assert_eq!(warnings.len(), 1, "one stall notice: {:#?}", rec.calls());
        // The idle limit is 500 ms; the notice says how long it has been, which a loaded machine
        // stretches by a few tens of milliseconds.
        let quiet_ms = warnings[0]
            .title
            .strip_prefix("No word from the agent for ")
            .and_then(|rest| rest.split("ms").next())
            .and_then(|n| n.parse::<u64>().ok());
        assert!(quiet_ms.is_some_and(|ms| (500..2_000).contains(&ms)), "{}", warnings[0].title);
        assert!(warnings[0].title.ends_with("— the turn is still open; `/cancel` stops it."), "{}", warnings[0].title);
        assert!(rec.latest().iter().any(|(_, m)| m.title.starts_with("⏹ make deploy — cancelled")));
        let mut c = app.store.conn().await.expect("conn");
        let conv = chat_bridge::store::history::list(&mut c, &Default::default()).await.expect("list").items.remove(0);
        let t = &turns::of_conversation(&mut c, &conv.id).await.expect("turns")[0];
        assert_eq!((t.status.as_str(), t.end_cause.as_deref()), ("stalled", Some("stalled_idle")), "a stall then a cancel is a stall (L3)");
        drop(c);
        app.shutdown().await;
    }

    async fn l3_with_on_stall_notify_the_turn_stays_open_after_the_notice(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let daemon = ScriptedDaemon::start(|mut peer: Peer| async move {
            let _prompt = peer.open_and_prompted("quiet").await;
            let _ = peer.recv().await;
        })
        .await;
        let (rec, app) = on_scripted(&db.url, dir.path(), &daemon).await;
        app.core.accept(console::inbound("make deploy")).await.expect("accept");
        rec.wait_for("the stall notice", |r| !r.with_tone(Tone::Warning).is_empty()).await;
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(rec.with_tone(Tone::Warning).len(), 1, "one notice per silence");
        assert_eq!(app.core.busy(), 1, "the turn is still open");
        app.shutdown().await;
    }

    async fn commands_queue_and_status_are_answered_in_the_thread(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&config(&db.url, dir.path()), rec.clone()).await.expect("build");
        app.core.accept(console::inbound("sleep 0.5; echo first")).await.expect("accept");
        app.core.accept(console::inbound("echo second")).await.expect("accept");
        app.core.accept(console::inbound("/status")).await.expect("accept");
        settle(&app).await;
        let titles: Vec<String> = rec.latest().into_iter().map(|(_, m)| m.title).collect();
        assert!(titles.iter().any(|t| t.starts_with("A turn is running")), "{titles:?}");
        let first = titles.iter().position(|t| t.starts_with("✅ sleep 0.5; echo first")).expect("first");
        let second = titles.iter().position(|t| t.starts_with("✅ echo second")).expect("second");
        assert!(first < second, "queued messages run in order: {titles:?}");
        app.shutdown().await;
    }

    async fn a_full_queue_names_the_message_it_refuses_and_the_queued_ones_run_in_order(db) {
        // Five wait behind the running turn; a sixth is refused with a notice that says which
        // message it was (several refused in a row would otherwise read alike).
        let dir = tempfile::tempdir().expect("tmp");
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&config(&db.url, dir.path()), rec.clone()).await.expect("build");
        app.core.accept(console::inbound("sleep 1; echo running")).await.expect("accept");
        for n in 1..=5 {
            app.core.accept(console::inbound(&format!("echo queued-{n}"))).await.expect("accept");
        }
        app.core.accept(console::inbound("echo refused-6\nsecond line")).await.expect("accept");
        settle(&app).await;
        let latest = rec.latest();
        let refusals: Vec<_> = latest.iter().filter(|(_, m)| m.title.contains("was not queued")).map(|(_, m)| m.title.clone()).collect();
        assert_eq!(refusals.len(), 1, "{latest:#?}");
        assert!(refusals[0].starts_with("The queue is full (5 messages waiting for the running turn); “echo refused-6…” was not queued."), "{refusals:?}");
        let ran: Vec<String> = latest.iter().filter(|(_, m)| m.tone == Tone::Success).map(|(_, m)| m.title.clone()).collect();
        let order: Vec<usize> = (1..=5).map(|n| ran.iter().position(|t| t.starts_with(&format!("✅ echo queued-{n}"))).expect("ran")).collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "in order: {ran:?}");
        assert!(!ran.iter().any(|t| t.contains("refused-6")), "{ran:?}");
        app.shutdown().await;
    }
}

fn as_user(line: &str, user: &str) -> chat_bridge::channel::Inbound {
    let mut m = console::inbound(line);
    m.user = user.to_owned();
    m
}

fn click(value: &str, user: &str) -> chat_bridge::channel::Inbound {
    let mut m = console::inbound("");
    m.user = user.to_owned();
    m.kind = chat_bridge::channel::InboundKind::Action(value.to_owned());
    m
}

on_both! {
    async fn r6_approvals_need_the_requester_or_an_approver_and_the_decision_is_shown_and_stored(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let mut cfg = config(&db.url, dir.path());
        cfg.shell_agent.require_approval = true;
        cfg.approvals.approvers = vec!["oncall".into()];
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        app.core.accept(as_user("echo approved", "alice")).await.expect("accept");
        rec.wait_for("the approval message", |r| r.posts().iter().any(|(_, m)| !m.buttons.is_empty())).await;
        let (perm_id, perm) = rec.posts().into_iter().find(|(_, m)| !m.buttons.is_empty()).expect("buttons");
        assert!(perm.title.contains("approval needed: echo approved"), "{}", perm.title);
        let labels: Vec<&str> = perm.buttons.iter().map(|b| b.label.as_str()).collect();
        assert_eq!(labels, ["Allow once", "Allow always", "Reject"]);
        let allow = perm.buttons[0].value.clone();

        app.core.accept(click(&allow, "mallory")).await.expect("accept");
        rec.wait_for("the refusal", |r| r.with_tone(Tone::Warning).iter().any(|m| m.title.contains("mallory: You are not allowed to answer"))).await;
        assert_eq!(rec.edits_of(&perm_id), 0, "an outsider's click changes nothing");

        app.core.accept(click(&allow, "oncall")).await.expect("accept");
        settle(&app).await;
        let latest = rec.latest();
        let decided = &latest.iter().find(|(id, _)| *id == perm_id).expect("perm").1;
        assert!(decided.buttons.is_empty() && decided.footer.as_deref() == Some("oncall chose: Allow once"), "{decided:?}");
        assert!(latest.iter().any(|(_, m)| m.title.starts_with("✅ echo approved")), "the command ran: {latest:#?}");

        let mut c = app.store.conn().await.expect("conn");
        let conv = chat_bridge::store::history::list(&mut c, &Default::default()).await.expect("list").items.remove(0);
        let detail = chat_bridge::store::history::detail(&mut c, &conv.id).await.expect("detail").expect("found");
        assert!(detail.transcript.iter().any(|e| e.kind == "permission" && e.actor.as_deref() == Some("oncall")), "the decision is stored");
        drop(c);
        app.shutdown().await;
    }

    // R6 (an outside tester): an approval's answer typed just before a crash is taken again from
    // the inbox after the restart, which lapsed the approval; a bare number typed after an approval
    // expired is the same. It is not a prompt — to an agent "1" reads as "go ahead" — and the
    // thread is told it was not sent.
    async fn r6_a_numbered_answer_with_no_approval_waiting_any_more_is_not_sent_as_a_prompt(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let mut cfg = config(&db.url, dir.path());
        cfg.shell_agent.require_approval = true;
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        app.core.accept(as_user("echo asked", "alice")).await.expect("accept");
        rec.wait_for("the approval message", |r| r.posts().iter().any(|(_, m)| !m.buttons.is_empty())).await;
        app.shutdown().await;

        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        settle(&app).await;
        app.core.accept(as_user("1", "alice")).await.expect("accept");
        settle(&app).await;
        assert!(
            format!("{:?}", rec.calls()).contains("No approval is waiting any more — the last one lapsed with a restart, expired or was closed — so `1` was not sent"),
            "the thread is told: {:#?}", rec.calls()
        );
        let mut c = app.store.conn().await.expect("conn");
        let conv = chat_bridge::store::history::list(&mut c, &Default::default()).await.expect("list").items.remove(0);
        let prompts: Vec<String> = turns::of_conversation(&mut c, &conv.id).await.expect("turns").into_iter().map(|t| t.prompt).collect();
        drop(c);
        assert_eq!(prompts, ["echo asked"], "no turn for the late answer");
        // Any other message still goes to the agent.
        app.core.accept(as_user("echo after", "alice")).await.expect("accept");
        rec.wait_for("the next approval", |r| r.posts().iter().any(|(_, m)| m.title.contains("approval needed: echo after"))).await;
        app.shutdown().await;
    }

    async fn r6_cancel_while_an_approval_waits_closes_it_and_the_next_message_runs(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let mut cfg = config(&db.url, dir.path());
        cfg.shell_agent.require_approval = true;
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        app.core.accept(as_user("echo f", "alice")).await.expect("accept");
        rec.wait_for("the approval message", |r| r.posts().iter().any(|(_, m)| !m.buttons.is_empty())).await;
        let (first, _) = rec.posts().into_iter().find(|(_, m)| !m.buttons.is_empty()).expect("buttons");
        app.core.accept(as_user("/cancel", "alice")).await.expect("accept");
        rec.wait_for("the approval closed", |r| {
            r.latest().iter().any(|(id, m)| *id == first && m.buttons.is_empty() && m.title.starts_with("⏹ Not needed"))
        })
        .await;
        // The thread is free: the next message asks its own question, and runs once allowed.
        app.core.accept(as_user("echo g", "alice")).await.expect("accept");
        rec.wait_for("a second approval", |r| r.latest().iter().any(|(id, m)| *id != first && !m.buttons.is_empty())).await;
        let (_, second) = rec.latest().into_iter().find(|(id, m)| *id != first && !m.buttons.is_empty()).expect("buttons");
        assert!(second.title.contains("echo g"), "{}", second.title);
        app.core.accept(click(&second.buttons[0].value, "alice")).await.expect("accept");
        settle(&app).await;
        assert!(rec.latest().iter().any(|(_, m)| m.title.starts_with("✅ echo g")), "{:#?}", rec.latest());
        app.shutdown().await;
    }

    // An outside tester's finding: a message sent right after `/new` or `/cancel`, while the
    // cancelled turn still had a question open, was refused as "an approval is waiting" and lost.
    // The cancel closes the turn's questions at once and the agent hears "cancelled" for each (as
    // ACP has it); this daemon ends the cancelled turn only once it hears that, as a daemon
    // waiting on its question would.
    async fn r6_a_message_right_after_new_or_cancel_while_an_approval_waits_is_queued_not_refused(db) {
        for command in ["/new", "/cancel"] {
            let dir = tempfile::tempdir().expect("tmp");
            let (heard_tx, mut heard) = tokio::sync::mpsc::unbounded_channel::<serde_json::Value>();
            let daemon = ScriptedDaemon::start(move |mut peer: Peer| {
                let heard = heard_tx.clone();
                async move {
                    peer.handshake().await;
                    let mut sessions = 0;
                    let mut waiting: Option<serde_json::Value> = None;
                    while let Some(msg) = peer.recv().await {
                        match msg["method"].as_str() {
                            Some("session/new") => {
                                sessions += 1;
                                peer.reply(&msg, json!({"sessionId": format!("s{sessions}")})).await;
                            }
                            Some("session/prompt") if waiting.is_none() && sessions == 1 && msg["params"]["prompt"].to_string().contains("first") => {
                                peer.send(json!({"jsonrpc":"2.0","id":"perm-1","method":"session/request_permission","params":{
                                    "sessionId":"s1","toolCall":{"toolCallId":"c1","title":"rm -rf build","kind":"execute"},
                                    "options":[{"optionId":"once","kind":"allow_once","name":"Allow once"},{"optionId":"no","kind":"reject_once","name":"Reject"}]}})).await;
                                waiting = Some(msg);
                            }
                            Some("session/prompt") => peer.reply(&msg, json!({"stopReason": "end_turn"})).await,
                            // Ignored: the turn waits on its question.
                            Some("session/cancel") => {}
                            None if msg["id"] == "perm-1" => {
                                let _ = heard.send(msg.clone());
                                if let Some(prompt) = waiting.take() {
                                    peer.reply(&prompt, json!({"stopReason": "cancelled"})).await;
                                }
                            }
                            Some(_) if msg.get("id").is_some() => peer.reply(&msg, json!({})).await,
                            _ => {}
                        }
                    }
                }
            })
            .await;
            let (rec, app) = on_scripted(&db.url, dir.path(), &daemon).await;
            // Each command in a thread of its own (the database is the same).
            let say = |text: &str| {
                let mut m = as_user(text, "alice");
                m.target.thread = command.into();
                m
            };
            app.core.accept(say("first")).await.expect("accept");
            rec.wait_for("the approval message", |r| r.posts().iter().any(|(_, m)| !m.buttons.is_empty())).await;
            app.core.accept(say(command)).await.expect("accept");
            app.core.accept(say("second")).await.expect("accept");
            let answer = tokio::time::timeout(Duration::from_secs(5), heard.recv()).await.ok().flatten();
            assert_eq!(
                answer.as_ref().map(|a| a["result"]["outcome"]["outcome"].clone()),
                Some(json!("cancelled")),
                "{command}: the agent heard its question cancelled"
            );
            settle(&app).await;
            let refused: Vec<_> = rec.with_tone(Tone::Warning).into_iter().filter(|m| m.title.contains("An approval is waiting")).collect();
            assert!(refused.is_empty(), "{command}: the message was not refused: {refused:#?}");
            let mut c = app.store.conn().await.expect("conn");
            let conv = chat_bridge::store::history::list(&mut c, &Default::default()).await.expect("list").items.into_iter().find(|c| c.thread == command).expect("the thread");
            let ts = turns::of_conversation(&mut c, &conv.id).await.expect("turns");
            drop(c);
            assert_eq!(
                ts.iter().map(|t| (t.prompt.as_str(), t.status.as_str())).collect::<Vec<_>>(),
                [("first", "cancelled"), ("second", "ended")],
                "{command}: the message ran after the cancelled turn"
            );
            assert!(rec.latest().iter().all(|(_, m)| m.buttons.is_empty()), "{command}: no question left open");
            app.shutdown().await;
        }
    }

    async fn r6_an_approval_asked_before_a_restart_lapses_visibly_instead_of_waiting_for_clicks(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let mut cfg = config(&db.url, dir.path());
        cfg.shell_agent.require_approval = true;
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        app.core.accept(as_user("echo before the restart", "alice")).await.expect("accept");
        rec.wait_for("the approval message", |r| r.posts().iter().any(|(_, m)| !m.buttons.is_empty())).await;
        let (perm_id, perm) = rec.posts().into_iter().find(|(_, m)| !m.buttons.is_empty()).expect("buttons");
        tokio::time::timeout(Duration::from_secs(10), async {
            while !chat_bridge::outbox_worker::drained(&app.store).await.expect("store") {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("delivered");
        app.shutdown().await;

        // Restarted: the agent's question went with the old connection, so the resumed turn's
        // approval lapses visibly instead of keeping buttons nobody can usefully press.
        let again = Application::build(&cfg, rec.clone()).await.expect("build again");
        rec.wait_for("the lapsed approval", |r| {
            r.latest().iter().any(|(id, m)| *id == perm_id && m.buttons.is_empty() && m.footer.as_deref() == Some("lapsed: the bridge restarted while this waited"))
        })
        .await;
        assert!(!perm.buttons.is_empty());
        assert!(
            !rec.posts().iter().any(|(_, m)| m.title.contains("could not run this turn")),
            "a shutdown does not fail the running turn: {:#?}",
            rec.posts()
        );
        again.shutdown().await;
    }

    async fn an_idle_conversation_is_let_go_from_memory_and_its_next_message_continues_the_same_session(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let mut cfg = config(&db.url, dir.path());
        cfg.service.conversation_idle = Duration::from_millis(300);
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        app.core.accept(console::inbound("echo first")).await.expect("accept");
        settle(&app).await;
        assert_eq!(app.core.conversations_in_memory(), 1);
        tokio::time::timeout(Duration::from_secs(10), async {
            while app.core.conversations_in_memory() > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the idle conversation was let go");
        let mut c = app.store.conn().await.expect("conn");
        let conv = chat_bridge::store::history::list(&mut c, &Default::default()).await.expect("list").items.remove(0);
        let before = chat_bridge::store::conversations::get(&mut c, &conv.id).await.expect("get").expect("conv").daemon_session;
        drop(c);
        // The thread's next message loads it again: same conversation, same agent session.
        app.core.accept(console::inbound("echo second")).await.expect("accept");
        settle(&app).await;
        let latest = rec.latest();
        assert!(latest.iter().any(|(_, m)| m.title.starts_with("✅ echo first")), "{latest:#?}");
        assert!(latest.iter().any(|(_, m)| m.title.starts_with("✅ echo second")), "{latest:#?}");
        let mut c = app.store.conn().await.expect("conn");
        let convs = chat_bridge::store::history::list(&mut c, &Default::default()).await.expect("list").items;
        assert_eq!(convs.len(), 1, "one conversation");
        let after = chat_bridge::store::conversations::get(&mut c, &conv.id).await.expect("get").expect("conv").daemon_session;
        assert!(before.is_some());
        assert_eq!(before, after, "the same agent session, loaded again");
        assert_eq!(turns::of_conversation(&mut c, &conv.id).await.expect("turns").len(), 2);
        drop(c);
        app.shutdown().await;
    }

    async fn new_sticks_a_thread_let_go_from_memory_after_new_starts_a_new_session_not_the_old_one(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let mut cfg = config(&db.url, dir.path());
        cfg.service.conversation_idle = Duration::from_millis(300);
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        app.core.accept(console::inbound("echo first")).await.expect("accept");
        settle(&app).await;
        let mut c = app.store.conn().await.expect("conn");
        let conv = chat_bridge::store::history::list(&mut c, &Default::default()).await.expect("list").items.remove(0);
        let first = chat_bridge::store::conversations::get(&mut c, &conv.id).await.expect("get").expect("conv").daemon_session;
        assert!(first.is_some());
        drop(c);
        app.core.accept(console::inbound("/new")).await.expect("accept");
        settle(&app).await;
        let mut c = app.store.conn().await.expect("conn");
        let forgotten = chat_bridge::store::conversations::get(&mut c, &conv.id).await.expect("get").expect("conv").daemon_session;
        assert_eq!(forgotten, None, "/new lets the session go in the store too");
        drop(c);
        tokio::time::timeout(Duration::from_secs(10), async {
            while app.core.conversations_in_memory() > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the idle conversation was let go");
        app.core.accept(console::inbound("echo second")).await.expect("accept");
        settle(&app).await;
        assert!(rec.latest().iter().any(|(_, m)| m.title.starts_with("✅ echo second")));
        let mut c = app.store.conn().await.expect("conn");
        let second = chat_bridge::store::conversations::get(&mut c, &conv.id).await.expect("get").expect("conv").daemon_session;
        assert!(second.is_some());
        assert_ne!(first, second, "after /new the thread runs in a new agent session, even once let go from memory");
        drop(c);
        app.shutdown().await;
    }

    async fn r6_a_numbered_answer_decides_and_an_unanswered_request_expires_as_rejected(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let mut cfg = config(&db.url, dir.path());
        cfg.shell_agent.require_approval = true;
        cfg.approvals.timeout = Duration::from_millis(700);
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        let user = console::user();
        app.core.accept(as_user("echo one", &user)).await.expect("accept");
        rec.wait_for("the first approval", |r| r.posts().iter().filter(|(_, m)| !m.buttons.is_empty()).count() == 1).await;
        app.core.accept(as_user("3", &user)).await.expect("accept"); // 3) Reject
        settle(&app).await;
        assert!(rec.latest().iter().any(|(_, m)| m.title.contains("echo one") && m.tone == Tone::Error), "rejected: {:#?}", rec.latest());

        app.core.accept(as_user("echo two", &user)).await.expect("accept");
        settle(&app).await;
        let latest = rec.latest();
        assert!(latest.iter().any(|(_, m)| m.footer.as_deref() == Some("expired unanswered — rejected")), "{latest:#?}");
        assert!(!latest.iter().any(|(_, m)| m.title.starts_with("✅ echo two")), "an expired request never runs the command");
        app.shutdown().await;
    }
}

on_both! {
    async fn late_work_a_daemon_update_after_the_turn_ended_is_posted_once_and_kept(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let daemon = ScriptedDaemon::start(|mut peer: Peer| async move {
            let update = |u: serde_json::Value| json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"bg","update":u}});
            let prompt = peer.open_and_prompted("bg").await;
            peer.send(update(json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Started the backup in the background."}}))).await;
            peer.reply(&prompt, json!({"stopReason": "end_turn"})).await;
            // The turn is over; the background work reports later.
            tokio::time::sleep(Duration::from_millis(200)).await;
            peer.send(update(json!({"sessionUpdate":"tool_call","toolCallId":"b1","title":"nightly backup","kind":"execute","status":"in_progress"}))).await;
            peer.send(update(json!({"sessionUpdate":"tool_call_update","toolCallId":"b1","status":"completed","rawOutput":{"output":"42 files","exitCode":0}}))).await;
            peer.send(update(json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Backup finished: "}}))).await;
            peer.send(update(json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"42 files."}}))).await;
            let _ = peer.recv().await;
        })
        .await;
        let (rec, app) = on_scripted(&db.url, dir.path(), &daemon).await;
        app.core.accept(console::inbound("back up everything")).await.expect("accept");
        let late = |r: &Recorder| r.posts().into_iter().filter(|(_, m)| m.title.starts_with("💬 later")).collect::<Vec<_>>();
        rec.wait_for("the late message", |r| !late(r).is_empty()).await;
        // Longer than the quiet and far less than the rate limit: a second post would show.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        settle(&app).await;
        let posted = late(&rec);
        assert_eq!(posted.len(), 1, "posted once: {:#?}", rec.calls());
        let body = posted[0].1.body.clone().unwrap_or_default();
        assert!(body.contains("✅ nightly backup"), "{body}");
        assert!(body.ends_with("Backup finished: 42 files."), "{body}");
        let answers: Vec<_> = rec.posts().into_iter().filter(|(_, m)| m.title == "💬 answer").collect();
        assert_eq!(answers.len(), 1, "the turn's own answer stays the turn's");
        assert!(!answers[0].1.body.clone().unwrap_or_default().contains("Backup finished"));
        let mut c = app.store.conn().await.expect("conn");
        let conv = chat_bridge::store::history::list(&mut c, &Default::default()).await.expect("list").items.remove(0);
        let kept: Vec<_> = chat_bridge::store::transcript::list(&mut c, &conv.id).await.expect("transcript")
            .into_iter().filter(|e| e.kind == "late").collect();
        assert_eq!(kept.len(), 1, "recorded in the transcript");
        assert!(kept[0].body.contains("Backup finished: 42 files."));
        drop(c);
        app.shutdown().await;
    }
}

// Found by an outside tester: the daemon answered the prompt while a command it had started
// still ran; its result, later, was posted as late work and the command's "⏳" message and
// stored row stayed running for good. Now the result finishes the call where it is shown,
// with every heartbeat counted.
on_both! {
    async fn f1_a_result_after_its_turn_ended_finishes_its_call_where_it_is_shown(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
        let go_rx = std::sync::Mutex::new(Some(go_rx));
        let daemon = ScriptedDaemon::start(move |mut peer: Peer| {
            let go = go_rx.lock().expect("lock").take();
            async move {
                let update = |u: serde_json::Value| json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":u}});
                let beat = || update(json!({"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress","_meta":{"shellProgress":{"elapsedMs":1}}}));
                let prompt = peer.open_and_prompted("s1").await;
                peer.send(update(json!({"sessionUpdate":"tool_call","toolCallId":"c1","title":"make release","kind":"execute","status":"in_progress"}))).await;
                for _ in 0..3 {
                    peer.send(beat()).await;
                }
                peer.reply(&prompt, json!({"stopReason": "end_turn"})).await;
                if let Some(go) = go {
                    let _ = go.await;
                }
                for _ in 0..2 {
                    peer.send(beat()).await;
                }
                peer.send(update(json!({"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed","rawOutput":{"output":"built","exitCode":0}}))).await;
                let _ = peer.recv().await;
            }
        })
        .await;
        let (rec, app) = on_scripted(&db.url, dir.path(), &daemon).await;
        app.core.accept(console::inbound("build it")).await.expect("accept");
        let conv = first_turn_ended(&app, &rec).await;
        go_tx.send(()).expect("the daemon waits");
        rec.wait_for("the command's result", |r| r.latest().iter().any(|(_, m)| m.title.starts_with("✅ make release"))).await;
        settle(&app).await;
        let late: Vec<_> = rec.posts().into_iter().filter(|(_, m)| m.title.starts_with("💬 later")).collect();
        assert!(late.is_empty(), "not posted again as late work: {late:#?}");
        let tool_posts: Vec<_> = rec.posts().into_iter().filter(|(_, m)| m.title.contains("make release")).collect();
        assert_eq!(tool_posts.len(), 1, "one message for the command, edited: {:#?}", rec.calls());
        let mut c = app.store.conn().await.expect("conn");
        let calls = tool_calls::of_conversation(&mut c, &conv.id).await.expect("calls");
        drop(c);
        assert_eq!(
            calls.iter().map(|t| (t.status.as_str(), t.heartbeats)).collect::<Vec<_>>(),
            [("completed", 5)],
            "finished, every heartbeat counted (three in the turn, two after it)"
        );
        app.shutdown().await;
    }
}

// The same across a restart (an outside tester's re-run): the calls the store still has running
// after their turn ended are kept when the conversation starts again, so the result finishes its
// call (the result wakes the conversation; heartbeats alone do not).
on_both! {
    async fn f1_a_result_after_its_turn_ended_and_a_restart_finishes_its_call_where_it_is_shown(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let daemon = ScriptedDaemon::start(|mut peer: Peer| async move {
            let update = |u: serde_json::Value| json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":u}});
            let beat = || update(json!({"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress","_meta":{"shellProgress":{"elapsedMs":1}}}));
            peer.handshake().await;
            if peer.number == 1 {
                let new = peer.expect("session/new").await;
                peer.reply(&new, json!({"sessionId": "s1"})).await;
                let prompt = peer.expect("session/prompt").await;
                peer.send(update(json!({"sessionUpdate":"tool_call","toolCallId":"c1","title":"make release","kind":"execute","status":"in_progress"}))).await;
                for _ in 0..3 {
                    peer.send(beat()).await;
                }
                peer.reply(&prompt, json!({"stopReason": "end_turn"})).await;
            } else {
                for _ in 0..2 {
                    peer.send(beat()).await;
                }
                peer.send(update(json!({"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"failed","rawOutput":{"output":"broke","exitCode":2}}))).await;
            }
            let _ = peer.recv().await;
        })
        .await;
        let (rec, app) = on_scripted(&db.url, dir.path(), &daemon).await;
        app.core.accept(console::inbound("build it")).await.expect("accept");
        let conv = first_turn_ended(&app, &rec).await;
        settle(&app).await;
        app.shutdown().await;
        let (rec, app) = on_scripted(&db.url, dir.path(), &daemon).await;
        rec.wait_for("the command's result", |r| r.calls().iter().any(|c| matches!(c, chat_bridge_tests::recorder::Call::Edit(_, m) if m.title.starts_with("❌ make release")))).await;
        settle(&app).await;
        let late: Vec<_> = rec.posts().into_iter().filter(|(_, m)| m.title.starts_with("💬 later")).collect();
        assert!(late.is_empty(), "not posted as late work: {late:#?}");
        let mut c = app.store.conn().await.expect("conn");
        let calls = tool_calls::of_conversation(&mut c, &conv.id).await.expect("calls");
        drop(c);
        assert_eq!(
            calls.iter().map(|t| (t.status.as_str(), t.heartbeats, t.exit_code)).collect::<Vec<_>>(),
            [("failed", 3, Some(2))],
            "finished with its counts; the two heartbeats since the restart came while its \
             conversation was not in memory, and a heartbeat wakes none (F1)"
        );
        app.shutdown().await;
    }
}

// Found by an outside tester: late work still gathering (the agent not quiet for a second yet)
// was lost when the bridge stopped. It is written at shutdown: recorded, its post in the outbox.
on_both! {
    async fn late_work_still_gathering_when_the_bridge_stops_is_written_not_lost(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let daemon = ScriptedDaemon::start(|mut peer: Peer| async move {
            let update = |u: serde_json::Value| json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"bg","update":u}});
            let prompt = peer.open_and_prompted("bg").await;
            peer.reply(&prompt, json!({"stopReason": "end_turn"})).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
            peer.send(update(json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Backup finished: 42 files."}}))).await;
            let _ = peer.recv().await;
        })
        .await;
        let (rec, app) = on_scripted(&db.url, dir.path(), &daemon).await;
        app.core.accept(console::inbound("back up everything")).await.expect("accept");
        let conv = first_turn_ended(&app, &rec).await;
        // The late text has come (the daemon sends it 200 ms after the turn); stop well inside
        // the second of quiet it would wait for.
        tokio::time::sleep(Duration::from_millis(400)).await;
        app.shutdown().await;
        let store = chat_bridge::store::Store::open(&db.url).await.expect("store");
        let mut c = store.conn().await.expect("conn");
        let kept: Vec<_> = chat_bridge::store::transcript::list(&mut c, &conv.id).await.expect("transcript")
            .into_iter().filter(|e| e.kind == "late").collect();
        drop(c);
        store.close().await;
        assert_eq!(kept.len(), 1, "recorded at shutdown: {kept:#?}");
        assert!(kept[0].body.contains("Backup finished: 42 files."));
    }
}

on_both! {
    async fn steer_a_new_message_cancels_the_long_command_and_runs_next(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let mut cfg = config(&db.url, dir.path());
        cfg.turns.while_busy = chat_bridge::conversation::busy::WhileBusy::Steer;
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        app.core.accept(console::inbound("sleep 30; echo never")).await.expect("accept");
        rec.wait_for("the long command running", |r| r.posts().iter().any(|(_, m)| m.title.contains("sleep 30"))).await;
        let started = std::time::Instant::now();
        app.core.accept(console::inbound("echo steered")).await.expect("accept");
        settle(&app).await;
        assert!(started.elapsed() < Duration::from_secs(20), "the long command did not run out");
        let titles: Vec<String> = rec.latest().into_iter().map(|(_, m)| m.title).collect();
        let cancelled = titles.iter().position(|t| t.starts_with("⏹ sleep 30; echo never")).unwrap_or_else(|| panic!("cancelled: {titles:?}"));
        let steered = titles.iter().position(|t| t.starts_with("✅ echo steered")).unwrap_or_else(|| panic!("ran: {titles:?}"));
        assert!(cancelled < steered, "{titles:?}");
        assert!(titles.iter().any(|t| t.starts_with("Steering: cancelling the running turn")), "{titles:?}");
        let mut c = app.store.conn().await.expect("conn");
        let conv = chat_bridge::store::history::list(&mut c, &Default::default()).await.expect("list").items.remove(0);
        let ts = turns::of_conversation(&mut c, &conv.id).await.expect("turns");
        let got: Vec<(&str, &str)> = ts.iter().map(|t| (t.prompt.as_str(), t.status.as_str())).collect();
        assert_eq!(got, [("sleep 30; echo never", "cancelled"), ("echo steered", "ended")]);
        drop(c);
        app.shutdown().await;
    }

    async fn collect_three_messages_sent_during_a_turn_run_as_one_prompt(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let mut cfg = config(&db.url, dir.path());
        cfg.turns.while_busy = chat_bridge::conversation::busy::WhileBusy::Collect;
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        app.core.accept(console::inbound("sleep 1; echo first")).await.expect("accept");
        for m in ["echo a", "echo b", "echo c"] {
            app.core.accept(console::inbound(m)).await.expect("accept");
        }
        settle(&app).await;
        let mut c = app.store.conn().await.expect("conn");
        let conv = chat_bridge::store::history::list(&mut c, &Default::default()).await.expect("list").items.remove(0);
        let ts = turns::of_conversation(&mut c, &conv.id).await.expect("turns");
        let got: Vec<&str> = ts.iter().map(|t| t.prompt.as_str()).collect();
        assert_eq!(got, ["sleep 1; echo first", "echo a\n\necho b\n\necho c"], "two turns, the second merged");
        let calls = tool_calls::of_conversation(&mut c, &conv.id).await.expect("calls");
        assert_eq!(calls.len(), 2, "{calls:#?}");
        let out = calls[1].output.clone().unwrap_or_default().replace('\r', "");
        assert_eq!(out.trim_end(), "a\nb\nc", "the built-in agent ran the three as one script");
        drop(c);
        app.shutdown().await;
    }
}

on_both! {
    async fn schedules_every_2s_runs_three_times_in_7s_survives_a_restart_and_makes_up_missed_runs_once(db) {
        use chat_bridge::clock::ManualClock;
        let dir = tempfile::tempdir().expect("tmp");
        let mut cfg = config(&db.url, dir.path());
        cfg.schedules.min_interval = Duration::from_secs(1);
        // The test moves a clock by hand and steps the scheduler itself.
        cfg.schedules.check_every = Duration::from_secs(3600);
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        app.core.accept(console::inbound("/every 2s echo tick")).await.expect("accept");
        settle(&app).await;
        let t0 = chat_bridge::store::now_ms();
        assert!(rec.latest().iter().any(|(_, m)| m.title.starts_with("Scheduled `")), "{:#?}", rec.calls());
        let clock = ManualClock::at(t0);
        let mut ran = 0;
        for _ in 0..7 {
            clock.advance(Duration::from_secs(1));
            ran += chat_bridge::schedules::run_due(&app.core, &clock).await.expect("run");
            settle(&app).await;
        }
        assert_eq!(ran, 3, "every 2 s for 7 s");
        let ticks = |r: &Recorder| r.latest().iter().filter(|(_, m)| m.title.starts_with("✅ echo tick")).count();
        assert_eq!(ticks(&rec), 3, "each run a normal turn with its result");
        app.core.accept(console::inbound("/schedules")).await.expect("accept");
        settle(&app).await;
        assert!(rec.latest().iter().any(|(_, m)| m.title.starts_with("1 schedule in this thread:") && m.title.contains("every 2s")), "{:#?}", rec.latest());
        app.shutdown().await;

        // Down for a minute: the missed runs are made up once, then it keeps its interval.
        let again = Application::build(&cfg, rec.clone()).await.expect("build again");
        clock.advance(Duration::from_secs(60));
        assert_eq!(chat_bridge::schedules::run_due(&again.core, &clock).await.expect("run"), 1, "missed runs once");
        assert_eq!(chat_bridge::schedules::run_due(&again.core, &clock).await.expect("run"), 0);
        // Not again a second after the catch-up run: one whole interval after it.
        clock.advance(Duration::from_secs(1));
        assert_eq!(chat_bridge::schedules::run_due(&again.core, &clock).await.expect("run"), 0, "no second run right after the catch-up");
        clock.advance(Duration::from_secs(1));
        assert_eq!(chat_bridge::schedules::run_due(&again.core, &clock).await.expect("run"), 1);
        settle(&again).await;
        assert_eq!(ticks(&rec), 5);
        let mut c = again.store.conn().await.expect("conn");
        let conv = chat_bridge::store::history::list(&mut c, &Default::default()).await.expect("list").items.remove(0);
        let id = chat_bridge::store::schedules::of(&mut c, &conv.id).await.expect("schedules")[0].id.clone();
        drop(c);
        again.core.accept(console::inbound(&format!("/unschedule {id}"))).await.expect("accept");
        settle(&again).await;
        clock.advance(Duration::from_secs(10));
        assert_eq!(chat_bridge::schedules::run_due(&again.core, &clock).await.expect("run"), 0, "removed");
        again.shutdown().await;
    }

    async fn schedules_a_thread_may_have_only_so_many_and_at_runs_once(db) {
        use chat_bridge::clock::ManualClock;
        let dir = tempfile::tempdir().expect("tmp");
        let mut cfg = config(&db.url, dir.path());
        cfg.schedules.per_thread = 2;
        cfg.schedules.check_every = Duration::from_secs(3600);
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        for m in ["/every 1h echo a", "/at 00:00 echo once", "/every 2h echo c"] {
            app.core.accept(console::inbound(m)).await.expect("accept");
        }
        settle(&app).await;
        let titles: Vec<String> = rec.latest().into_iter().map(|(_, m)| m.title).collect();
        assert_eq!(titles.iter().filter(|t| t.starts_with("Scheduled `")).count(), 2, "{titles:?}");
        assert!(titles.iter().any(|t| t.starts_with("This thread has 2 schedules, the most it may have")), "{titles:?}");
        let clock = ManualClock::at(chat_bridge::store::now_ms() + 86_400_000);
        assert_eq!(chat_bridge::schedules::run_due(&app.core, &clock).await.expect("run"), 2);
        settle(&app).await;
        let mut c = app.store.conn().await.expect("conn");
        let conv = chat_bridge::store::history::list(&mut c, &Default::default()).await.expect("list").items.remove(0);
        let left = chat_bridge::store::schedules::of(&mut c, &conv.id).await.expect("schedules");
        assert_eq!(left.len(), 1, "/at ran once and is gone");
        assert_eq!(left[0].prompt, "echo a");
        drop(c);
        app.shutdown().await;
    }
}

/// The console thread as a crash just after its prompt was sent leaves it: the daemon session `s1`
/// and an open turn ("echo cut"), asked for by the chat message `message` when given.
async fn crashed_mid_turn(
    url: &str,
    cwd: &std::path::Path,
    message: Option<&str>,
) -> (
    chat_bridge::store::Store,
    chat_bridge::store::conversations::Conversation,
) {
    use chat_bridge::store::conversations;
    let store = chat_bridge::store::Store::open(url).await.expect("store");
    let mut c = store.conn().await.expect("conn");
    let now = chat_bridge::store::now_ms();
    let key = conversations::Key {
        platform: "console",
        workspace: "local",
        channel: "console",
        thread: "main",
    };
    let (conv, _) = conversations::find_or_create(&mut c, &key, &console::user(), "", now)
        .await
        .expect("conversation");
    let cwd = cwd.display().to_string();
    conversations::set_session(&mut c, &conv.id, "s1", &cwd, now)
        .await
        .expect("session");
    turns::start_for(&mut c, &conv.id, "echo cut", &console::user(), message, now)
        .await
        .expect("an open turn");
    drop(c);
    (store, conv)
}

/// D6 (an outside tester's finding): a turn taken back after a restart and cut off there — the daemon
/// shows its prompt and ends it cancelled with nothing done — lets go of the thread's session in the
/// store, not only in memory. A bridge that stops before the thread's next message and starts again
/// opens a new session for it; it used to load the one holding the interrupted prompt, which qwen
/// folds into the next prompt (the interrupted command ran with the next message).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d6_a_session_let_go_after_an_interrupted_turn_stays_let_go_across_a_restart() {
    use chat_bridge::store::conversations;
    chat_bridge_tests::init_tracing();
    let dir = tempfile::tempdir().expect("tmp");
    let url = format!("sqlite://{}", dir.path().join("d6.db").display());
    let asked = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = asked.clone();
    let daemon = ScriptedDaemon::start(move |mut peer: Peer| {
        let seen = seen.clone();
        async move {
            let update = |u: serde_json::Value| json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":u}});
            peer.handshake().await;
            if peer.number == 1 {
                // The restarted bridge takes the open turn back.
                let load = peer.expect("session/load").await;
                peer.send(update(json!({"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"echo cut"}}))).await;
                peer.send(json!({"jsonrpc":"2.0","method":"_qwen/notify","params":{"kind":"turn_complete",
                    "data":{"sessionId":"s1","stopReason":"cancelled","promptId":"p1"}}})).await;
                peer.reply(&load, json!({})).await;
                let _ = peer.recv().await;
                return;
            }
            // The next run: whatever the bridge asks is noted.
            while let Some(req) = peer.recv().await {
                let method = req["method"].as_str().unwrap_or_default().to_owned();
                seen.lock().expect("lock").push(method.clone());
                match method.as_str() {
                    "session/load" => peer.reply(&req, json!({})).await,
                    "session/new" => peer.reply(&req, json!({"sessionId": "s2"})).await,
                    "session/prompt" => {
                        let session = req["params"]["sessionId"].clone();
                        peer.send(json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":session,"update":
                            {"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"fresh"}}}})).await;
                        peer.reply(&req, json!({"stopReason": "end_turn"})).await;
                    }
                    _ => {}
                }
            }
        }
    })
    .await;
    let mut cfg = config(&url, dir.path());
    cfg.daemon.url = Some(daemon.url.clone());
    cfg.daemon.token = Some(daemon.token.clone().into());

    // As a crash just after the prompt was sent leaves it: the thread's session and an open turn.
    let (store, conv) = crashed_mid_turn(&url, dir.path(), None).await;

    // The restart takes the turn back, hears it was cut off, and stops before any other message.
    let rec = Arc::new(Recorder::default());
    let app = Application::build(&cfg, rec.clone()).await.expect("build");
    settle(&app).await;
    assert!(
        rec.with_tone(Tone::Warning)
            .iter()
            .any(|m| format!("{m:?}").contains("was not re-run")),
        "the thread is told: {:#?}",
        rec.calls()
    );
    app.shutdown().await;
    let row = {
        let mut c = store.conn().await.expect("conn");
        conversations::get(&mut c, &conv.id)
            .await
            .expect("get")
            .expect("the conversation")
    };
    assert_eq!(
        row.daemon_session, None,
        "the session is let go in the store"
    );

    // Started again, the thread's next message runs in a new session.
    let rec = Arc::new(Recorder::default());
    let app = Application::build(&cfg, rec.clone()).await.expect("build");
    app.core
        .accept(console::inbound("echo next"))
        .await
        .expect("accept");
    settle(&app).await;
    assert!(
        rec.latest()
            .iter()
            .any(|(_, m)| m.body.as_deref() == Some("fresh")),
        "{:#?}",
        rec.calls()
    );
    app.shutdown().await;
    store.close().await;
    assert_eq!(
        *asked.lock().expect("lock"),
        ["session/new", "session/prompt"],
        "a new session, not the one holding the interrupted prompt"
    );
}

/// D3 (an outside tester's finding): a turn taken back after a restart still marks the message that
/// asked for it with its outcome — 👀 taken away, the outcome added — as a turn that never met a
/// restart does. The message's id was held only in memory, so a turn resumed and ended after a
/// restart left 👀 on the person's message for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d3_a_turn_taken_back_after_a_restart_marks_the_message_that_asked_for_it() {
    chat_bridge_tests::init_tracing();
    let dir = tempfile::tempdir().expect("tmp");
    let url = format!("sqlite://{}", dir.path().join("d3.db").display());
    let daemon = ScriptedDaemon::start(move |mut peer: Peer| async move {
        let update = |u: serde_json::Value| json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":u}});
        peer.handshake().await;
        // The restarted bridge takes the open turn back: the daemon shows its prompt and ends it
        // cancelled with nothing done (the turn is cut off: interrupted).
        let load = peer.expect("session/load").await;
        peer.send(update(json!({"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"echo cut"}}))).await;
        peer.send(json!({"jsonrpc":"2.0","method":"_qwen/notify","params":{"kind":"turn_complete",
            "data":{"sessionId":"s1","stopReason":"cancelled","promptId":"p1"}}})).await;
        peer.reply(&load, json!({})).await;
        while peer.recv().await.is_some() {}
    })
    .await;
    let mut cfg = config(&url, dir.path());
    cfg.daemon.url = Some(daemon.url.clone());
    cfg.daemon.token = Some(daemon.token.clone().into());

    // As a crash just after the prompt was sent leaves it: the session and an open turn, asked for
    // by message m-1 (which got 👀 when the turn started).
    let (store, conv) = crashed_mid_turn(&url, dir.path(), Some("m-1")).await;

    let rec = Arc::new(Recorder::default());
    let app = Application::build(&cfg, rec.clone()).await.expect("build");
    settle(&app).await;
    app.shutdown().await;
    let marks: Vec<String> = {
        let mut c = store.conn().await.expect("conn");
        sqlx::query_as::<_, (String,)>(
            "SELECT action FROM outbox WHERE conversation_id = $1 AND kind = 'other' ORDER BY id",
        )
        .arg(&conv.id)
        .fetch_all(&mut *c)
        .await
        .expect("outbox")
        .into_iter()
        .map(|(a,)| a)
        .collect()
    };
    store.close().await;
    let on_m1: Vec<serde_json::Value> = marks
        .iter()
        .map(|a| serde_json::from_str::<serde_json::Value>(a).expect("json"))
        .filter(|a| a.to_string().contains("\"m-1\""))
        .collect();
    assert_eq!(
        on_m1.len(),
        2,
        "👀 taken away and the outcome added on m-1: {marks:#?}"
    );
    let s = |v: &serde_json::Value| v.to_string();
    assert!(
        s(&on_m1[0]).contains("\"add\":false") && s(&on_m1[1]).contains("\"add\":true"),
        "{on_m1:#?}"
    );
}

/// The first conversation, once its first turn has ended.
async fn first_turn_ended(
    app: &Application,
    rec: &Recorder,
) -> chat_bridge::store::conversations::Conversation {
    let mut c = app.store.conn().await.expect("conn");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let list = chat_bridge::store::history::list(&mut c, &Default::default())
            .await
            .expect("list")
            .items;
        if let Some(conv) = list.into_iter().next()
            && turns::of_conversation(&mut c, &conv.id)
                .await
                .expect("turns")
                .iter()
                .any(|t| t.status == "ended")
        {
            return conv;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the turn ended: {:#?}",
            rec.calls()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A bridge on `url` talking to the scripted `daemon`, delivering to a recorder.
async fn on_scripted(
    url: &str,
    dir: &std::path::Path,
    daemon: &ScriptedDaemon,
) -> (Arc<Recorder>, Application) {
    let mut cfg = config(url, dir);
    cfg.daemon.url = Some(daemon.url.clone());
    cfg.daemon.token = Some(daemon.token.clone().into());
    let rec = Arc::new(Recorder::default());
    let app = Application::build(&cfg, rec.clone()).await.expect("build");
    (rec, app)
}

/// A bridge's set-up on a new SQLite file with a shell agent that outlives the bridge (heartbeats
/// every 200 ms): the directory, the database URL, the agent and the configuration.
async fn with_outliving_agent() -> (
    tempfile::TempDir,
    String,
    shell_agent::ShellAgent,
    chat_bridge::config::Config,
) {
    chat_bridge_tests::init_tracing();
    let dir = tempfile::tempdir().expect("tmp");
    let url = format!("sqlite://{}", dir.path().join("d6.db").display());
    let agent = shell_agent::ShellAgent::start(
        "127.0.0.1:0".parse().expect("addr"),
        None,
        shell_agent::AgentConfig {
            heartbeat_interval: Duration::from_millis(200),
            ..shell_agent::AgentConfig::default()
        },
    )
    .await
    .expect("agent");
    let mut cfg = config(&url, dir.path());
    cfg.daemon.url = Some(agent.url());
    cfg.daemon.token = Some(agent.token().to_owned().into());
    (dir, url, agent, cfg)
}

/// The store's only conversation and its first turn.
async fn the_conversation_and_its_first_turn(
    c: &mut sqlx::AnyConnection,
) -> (chat_bridge::store::conversations::Conversation, turns::Turn) {
    let conv = chat_bridge::store::history::list(c, &Default::default())
        .await
        .expect("list")
        .items
        .remove(0);
    let turn = turns::of_conversation(c, &conv.id)
        .await
        .expect("turns")
        .remove(0);
    (conv, turn)
}

/// The titles of the results (✅) the recorder was asked to edit in, in order.
fn results(rec: &Recorder) -> Vec<String> {
    rec.calls()
        .into_iter()
        .filter_map(|c| match c {
            chat_bridge_tests::recorder::Call::Edit(_, m) if m.title.starts_with('✅') => {
                Some(m.title)
            }
            _ => None,
        })
        .collect()
}

/// D6 (an outside tester's finding): a command that finishes while the bridge is down, on a shell
/// agent that outlives the bridge, ends its turn when the bridge comes back — the load's replay
/// shows the prompt, the result and the turn's end — instead of waiting for the idle limit and
/// being reported interrupted although it completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d6_a_turn_that_ended_while_the_bridge_was_down_ends_as_it_did_on_the_agent() {
    let (dir, url, agent, cfg) = with_outliving_agent().await;
    let marker = dir.path().join("ran");

    let rec = Arc::new(Recorder::default());
    let app = Application::build(&cfg, rec.clone()).await.expect("build");
    app.core
        .accept(console::inbound(&format!(
            "sleep 0.3; touch {}; echo finished",
            marker.display()
        )))
        .await
        .expect("accept");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    rec.wait_for("the command started", |r| {
        format!("{:?}", r.calls()).contains("sleep 0.3")
    })
    .await;
    // The bridge goes away while the command runs; the command finishes on the agent meanwhile.
    app.shutdown().await;
    while !marker.exists() {
        assert!(std::time::Instant::now() < deadline, "the command ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let rec = Arc::new(Recorder::default());
    let app = Application::build(&cfg, rec.clone()).await.expect("build");
    settle(&app).await;
    app.shutdown().await;
    // It ended while the bridge was away, at a time nobody here saw: its result says how it ended,
    // not a duration measured from the restart (it used to say "— 0ms").
    let results = results(&rec);
    assert!(
        results.len() == 1 && results[0].ends_with("echo finished"),
        "one result, without a duration: {results:?}"
    );
    let store = chat_bridge::store::Store::open(&url).await.expect("store");
    let mut c = store.conn().await.expect("conn");
    let (conv, turn) = the_conversation_and_its_first_turn(&mut c).await;
    let calls = tool_calls::of_conversation(&mut c, &conv.id)
        .await
        .expect("calls");
    drop(c);
    store.close().await;
    assert_eq!(
        (turn.status.as_str(), turn.end_cause.as_deref()),
        ("ended", None),
        "the turn ended on the agent while the bridge was down; notices: {:#?}",
        rec.calls()
    );
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].status, "completed");
    agent.shutdown().await;
}

/// D6 (a CI run of the Q1 crash suite): the bridge stopped after recording a prompt as sent and
/// before the agent got it. The agent outlives the bridge and replays the session's prompts on
/// load; the last is the turn before's, so the restarted bridge sends the prompt now — it runs
/// once and the turn ends — instead of waiting out the idle limit and reporting the message
/// interrupted although the agent never saw it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d6_a_prompt_recorded_as_sent_that_never_reached_the_agent_is_sent_after_the_restart() {
    never_reached_prompt(Before::Other).await;
}

/// D6 (outside tester): the same with the turn before of the same text (someone runs `make test`
/// again). The replay's prompt reads as this turn's own; the call stored for the turn before shows it
/// is not — the command runs now, once, instead of this turn being closed as "ended" with the turn
/// before's result while nothing ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d6_a_prompt_that_never_reached_the_agent_is_sent_though_the_turn_before_had_its_text() {
    never_reached_prompt(Before::SameText).await;
}

/// D6: the same, but the store's turn before is not the agent's last prompt (a turn the agent
/// never saw either): nothing proves where the prompt went, so it is not sent again — the idle
/// limit reports it interrupted, not re-run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d6_a_prompt_whose_turn_before_the_agent_did_not_see_is_not_sent_again() {
    never_reached_prompt(Before::Phantom).await;
}

/// What ran before the turn the agent never got.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Before {
    /// A command of other text.
    Other,
    /// A command of the same text.
    SameText,
    /// A command of other text, then a turn the agent never saw.
    Phantom,
}

/// An open turn the agent never got, after `before`; the bridge restarts.
async fn never_reached_prompt(before: Before) {
    let (dir, url, agent, cfg) = with_outliving_agent().await;
    let marker = dir.path().join("ran-two");
    let two = format!("echo two >> {}", marker.display());
    let rec = Arc::new(Recorder::default());
    let app = Application::build(&cfg, rec.clone()).await.expect("build");
    let first = if before == Before::SameText {
        two.clone()
    } else {
        "echo one".to_owned()
    };
    app.core
        .accept(console::inbound(&first))
        .await
        .expect("accept");
    settle(&app).await;
    app.shutdown().await;
    let ran_before = std::fs::read_to_string(&marker).unwrap_or_default();

    // What a kill between recording the prompt and sending it leaves: an open turn the agent never
    // got.
    let store = chat_bridge::store::Store::open(&url).await.expect("store");
    let mut c = store.conn().await.expect("conn");
    let (conv, first) = the_conversation_and_its_first_turn(&mut c).await;
    if before == Before::Phantom {
        let t = turns::start(&mut c, &conv.id, "echo phantom", &first.requested_by, 1)
            .await
            .expect("turn");
        let end = turns::Ending {
            status: "interrupted",
            stop_reason: None,
            end_cause: None,
            answer: None,
        };
        turns::finish(&mut c, &t.id, &end, 2).await.expect("end");
    }
    let open = turns::start(
        &mut c,
        &conv.id,
        &two,
        &first.requested_by,
        chat_bridge::store::now_ms(),
    )
    .await
    .expect("open turn");
    drop(c);

    let rec = Arc::new(Recorder::default());
    let app = Application::build(&cfg, rec.clone()).await.expect("build");
    settle(&app).await;
    app.shutdown().await;
    let ran = std::fs::read_to_string(&marker).unwrap_or_default();
    let ran = ran.strip_prefix(&ran_before).unwrap_or(&ran);
    if before == Before::Phantom {
        let said = format!("{:?}", rec.calls());
        assert!(
            ran.is_empty() && said.contains("marked interrupted and was not re-run"),
            "not sent again, reported interrupted: ran {ran:?}; {said}"
        );
        store.close().await;
        agent.shutdown().await;
        return;
    }
    assert_eq!(
        ran,
        "two\n",
        "the prompt ran once; the thread saw: {:#?}",
        rec.calls()
    );
    let said = format!("{:?}", rec.calls());
    assert!(
        said.contains("before your message reached the agent; it was sent now"),
        "the thread hears why it runs late: {said}"
    );
    assert!(
        !said.contains("interrupted"),
        "not reported interrupted: {said}"
    );
    let mut c = store.conn().await.expect("conn");
    let turn = turns::get(&mut c, &open.id)
        .await
        .expect("get")
        .expect("the turn");
    let calls = tool_calls::of_conversation(&mut c, &conv.id)
        .await
        .expect("calls");
    drop(c);
    store.close().await;
    assert_eq!(
        (turn.status.as_str(), turn.end_cause.as_deref()),
        ("ended", None)
    );
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(calls.iter().all(|c| c.status == "completed"), "{calls:?}");
    agent.shutdown().await;
}

/// D6 (outside tester): a command of the same text as the one before it is cut by a restart and
/// finishes on the agent while the bridge is down. The replay shows both prompts; the call stored
/// for the turn before tells its frames from this turn's, so this turn ends with its own result —
/// not with the turn before's end, its own call left `running` for good and its result never shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d6_a_command_with_the_text_of_the_one_before_cut_by_a_restart_ends_with_its_own_result() {
    use chat_bridge_tests::recorder::Call;
    let (dir, url, agent, cfg) = with_outliving_agent().await;
    let marker = dir.path().join("ran");
    let command = format!("sleep 0.3; echo x >> {}", marker.display());
    let rec = Arc::new(Recorder::default());
    let app = Application::build(&cfg, rec.clone()).await.expect("build");
    app.core
        .accept(console::inbound(&command))
        .await
        .expect("accept");
    settle(&app).await;
    app.core
        .accept(console::inbound(&command))
        .await
        .expect("accept");
    rec.wait_for("the second command started", |r| {
        r.calls()
            .iter()
            .filter(|c| matches!(c, Call::Post(_, m) if m.title.starts_with('⏳')))
            .count()
            == 2
    })
    .await;
    app.shutdown().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(&marker).unwrap_or_default() != "x\nx\n" {
        assert!(std::time::Instant::now() < deadline, "both commands ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let rec = Arc::new(Recorder::default());
    let app = Application::build(&cfg, rec.clone()).await.expect("build");
    settle(&app).await;
    app.shutdown().await;
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap_or_default(),
        "x\nx\n",
        "nothing ran again"
    );
    let results = results(&rec);
    assert_eq!(
        results.len(),
        1,
        "its own result is shown: {:#?}",
        rec.calls()
    );
    let store = chat_bridge::store::Store::open(&url).await.expect("store");
    let mut c = store.conn().await.expect("conn");
    let (conv, _) = the_conversation_and_its_first_turn(&mut c).await;
    let turns = turns::of_conversation(&mut c, &conv.id)
        .await
        .expect("turns");
    let calls = tool_calls::of_conversation(&mut c, &conv.id)
        .await
        .expect("calls");
    drop(c);
    store.close().await;
    assert!(
        turns.len() == 2 && turns.iter().all(|t| t.status == "ended"),
        "{turns:#?}"
    );
    assert!(
        calls.len() == 2 && calls.iter().all(|c| c.status == "completed"),
        "{calls:#?}"
    );
    agent.shutdown().await;
}

/// A command still running when the bridge came back is followed again as running since it
/// started: its result's duration counts from the command's start, not from the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d6_a_command_followed_again_after_a_restart_counts_its_duration_from_its_start() {
    let (_dir, _url, agent, cfg) = with_outliving_agent().await;
    let rec = Arc::new(Recorder::default());
    let app = Application::build(&cfg, rec.clone()).await.expect("build");
    app.core
        .accept(console::inbound("sleep 2.5; echo late"))
        .await
        .expect("accept");
    rec.wait_for("the command started", |r| {
        format!("{:?}", r.calls()).contains("sleep 2.5")
    })
    .await;
    // Away for over a second while the command runs; back before it ends.
    app.shutdown().await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let rec = Arc::new(Recorder::default());
    let app = Application::build(&cfg, rec.clone()).await.expect("build");
    rec.wait_for("the result", |r| !results(r).is_empty()).await;
    let result = results(&rec).remove(0);
    app.shutdown().await;
    agent.shutdown().await;
    let secs: Option<u64> = result
        .rsplit_once(" — ")
        .and_then(|(_, took)| took.strip_suffix('s'))
        .and_then(|n| n.parse().ok());
    assert!(
        secs.is_some_and(|s| s >= 2),
        "the 2.5 s command took at least 2 s, counted from its start: {result:?}"
    );
}

/// A trigger that fails the statements it fires on (`when`, e.g. `BEFORE INSERT ON turns`) as a
/// database going away fails them (57P01, transient) while the sequence `name` — counting the
/// tries, and not rolled back with the statement it fails — is at most `fails`. The sequence
/// starts at `start`: above `fails`, nothing fails until it is restarted at 1.
async fn transient_fault(
    c: &mut sqlx::AnyConnection,
    name: &str,
    when: &str,
    start: i64,
    fails: i64,
) {
    for ddl in [
        format!("CREATE SEQUENCE {name} START WITH {start}"),
        format!(
            "CREATE FUNCTION {name}() RETURNS trigger AS $$ BEGIN
                 IF nextval('{name}') <= {fails} THEN
                     RAISE EXCEPTION 'terminating connection due to administrator command' USING ERRCODE = '57P01';
                 END IF;
                 RETURN NEW;
             END $$ LANGUAGE plpgsql"
        ),
        format!("CREATE TRIGGER {name} {when} FOR EACH ROW EXECUTE FUNCTION {name}()"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(ddl))
            .execute(&mut *c)
            .await
            .expect("fault");
    }
}

/// A bridge on a new PostgreSQL database, delivering to a recorder (the database, its directory, the
/// recorder, the bridge).
async fn on_postgres() -> (
    chat_bridge_tests::db::TestDb,
    tempfile::TempDir,
    Arc<Recorder>,
    Application,
) {
    chat_bridge_tests::init_tracing();
    let db = chat_bridge_tests::db::TestDb::new(chat_bridge::store::Backend::Postgres).await;
    let dir = tempfile::tempdir().expect("tmp");
    let rec = Arc::new(Recorder::default());
    let app = Application::build(&config(&db.url, dir.path()), rec.clone())
        .await
        .expect("build");
    (db, dir, rec, app)
}

/// Slack answers each event within 3 s or delivers it again: a burst's later events are recorded
/// (and the platform told) while the earlier ones still wait to be handed to their conversations.
/// Recorded and handed on in one go, an outside tester's burst of 300 new threads had half its events
/// answered 503 — each waited for every earlier thread's conversation to be opened first (D2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_events_are_recorded_and_acknowledged_while_earlier_ones_wait_to_be_handed_on() {
    use chat_bridge::channel::Arrival;
    use sqlx::Connection;
    let (db, _dir, rec, app) = on_postgres().await;
    // No conversation can be opened meanwhile: another session holds the table.
    let mut blocker = sqlx::AnyConnection::connect(&db.url)
        .await
        .expect("connect");
    sqlx::query("BEGIN")
        .execute(&mut blocker)
        .await
        .expect("begin");
    sqlx::query("LOCK TABLE conversations IN EXCLUSIVE MODE")
        .execute(&mut blocker)
        .await
        .expect("lock");
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let stop = tokio_util::sync::CancellationToken::new();
    let burst = async {
        let mut acks = Vec::new();
        for i in 0..3 {
            let mut m = console::inbound(&format!("echo burst-{i}"));
            m.target.thread = format!("t{i}");
            let (arrival, recorded) = Arrival::acknowledged(m);
            tx.send(arrival).await.expect("pump");
            acks.push(recorded);
        }
        for (i, recorded) in acks.into_iter().enumerate() {
            tokio::time::timeout(Duration::from_secs(5), recorded)
                .await
                .unwrap_or_else(|_| {
                    panic!("event {i} was not recorded while the first waited to be handed on")
                })
                .expect("recorded");
        }
        let (opened,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM conversations")
            .only(&mut blocker)
            .await
            .expect("count");
        assert_eq!(opened, 0, "none was handed on yet");
        sqlx::query("COMMIT")
            .execute(&mut blocker)
            .await
            .expect("release");
        // Handed on once the table is free: each command runs once.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while rec.posts().len() < 3 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stop.cancel();
    };
    let (pumped, ()) = tokio::join!(app.pump(&mut rx, &stop), burst);
    pumped.expect("pump");
    settle(&app).await;
    let mut posted: Vec<String> = rec.posts().iter().map(|(_, m)| m.title.clone()).collect();
    posted.sort();
    assert_eq!(posted.len(), 3, "{:#?}", rec.calls());
    for (i, title) in posted.iter().enumerate() {
        assert!(title.contains(&format!("echo burst-{i}")), "{posted:?}");
    }
    app.shutdown().await;
}

/// Events are recorded several at once, but handed on in the order they came: a burst of messages
/// in one thread runs in the order it was sent (D2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_a_burst_in_one_thread_is_handed_on_in_the_order_it_came() {
    use chat_bridge::channel::Arrival;
    // One running and five queued: the most a thread takes at once.
    const BURST: usize = 6;
    let (_db, _dir, rec, app) = on_postgres().await;
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let stop = tokio_util::sync::CancellationToken::new();
    let burst = async {
        let mut acks = Vec::new();
        for i in 0..BURST {
            let (arrival, recorded) =
                Arrival::acknowledged(console::inbound(&format!("echo n{i:02}")));
            tx.send(arrival).await.expect("pump");
            acks.push(recorded);
        }
        for recorded in acks {
            recorded.await.expect("recorded");
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while rec.posts().len() < BURST && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stop.cancel();
    };
    let (pumped, ()) = tokio::join!(app.pump(&mut rx, &stop), burst);
    pumped.expect("pump");
    settle(&app).await;
    let ran: Vec<String> = rec
        .posts()
        .iter()
        .filter_map(|(_, m)| m.title.split("echo ").nth(1).map(str::to_owned))
        .collect();
    let sent: Vec<String> = (0..BURST).map(|i| format!("n{i:02}")).collect();
    assert_eq!(ran, sent, "{:#?}", rec.calls());
    app.shutdown().await;
}

/// A thread's messages queued behind a running command when the bridge stops are taken again from
/// the inbox at the next start in the order they were sent (D2). They are recorded several at once,
/// so the time of each insert is not their order, and a burst falls within one millisecond: before,
/// the restart ran them shuffled (outside tester: 4, 5, 6 typed, 5, 4, 6 run; on both backends).
async fn d2_queued_messages_taken_again_after_a_restart_run_in_the_order_sent(
    backend: chat_bridge::store::Backend,
    fault: bool,
) {
    use chat_bridge::channel::{Arrival, InboundKind};
    // One running and five queued: the most a thread takes at once.
    const QUEUED: usize = 5;
    chat_bridge_tests::init_tracing();
    let db = chat_bridge_tests::db::TestDb::new(backend).await;
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = config(&db.url, dir.path());
    let rec = Arc::new(Recorder::default());
    let app = Application::build(&cfg, rec.clone()).await.expect("build");
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let stop = tokio_util::sync::CancellationToken::new();
    let sent: Vec<String> = (0..QUEUED).map(|i| format!("echo q{i}")).collect();
    let queued_in_inbox = async {
        let (arrival, recorded) = Arrival::acknowledged(console::inbound("sleep 30"));
        tx.send(arrival).await.expect("pump");
        recorded.await.expect("recorded");
        rec.wait_for("the long command to run", |r| {
            r.posts().iter().any(|(_, m)| m.title.contains("sleep 30"))
        })
        .await;
        let mut acks = Vec::new();
        for line in &sent {
            let (arrival, recorded) = Arrival::acknowledged(console::inbound(line));
            tx.send(arrival).await.expect("pump");
            acks.push(recorded);
        }
        for recorded in acks {
            recorded.await.expect("recorded");
        }
        // What a restart takes again, in the order it takes it.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let waiting = loop {
            let mut c = app.store.conn().await.expect("conn");
            let waiting: Vec<String> = chat_bridge::store::inbound::unhandled(&mut c)
                .await
                .expect("inbox")
                .into_iter()
                .filter_map(|(_, _, payload)| {
                    match serde_json::from_str::<chat_bridge::channel::Inbound>(&payload)
                        .expect("payload")
                        .kind
                    {
                        InboundKind::Message(text) => Some(text),
                        _ => None,
                    }
                })
                .collect();
            if waiting.len() == QUEUED || tokio::time::Instant::now() > deadline {
                break waiting;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        stop.cancel();
        waiting
    };
    let (pumped, waiting) = tokio::join!(app.pump(&mut rx, &stop), queued_in_inbox);
    pumped.expect("pump");
    assert_eq!(waiting, sent, "the inbox keeps the order they were sent in");
    app.shutdown().await;
    if fault {
        // The first inbox write of the restart fails.
        let mut c = db.store.conn().await.expect("conn");
        transient_fault(
            &mut c,
            "inbox_faults",
            "BEFORE UPDATE ON inbound_events",
            1,
            1,
        )
        .await;
    }

    let rec = Arc::new(Recorder::default());
    let app = Application::build(&cfg, rec.clone())
        .await
        .expect("restart");
    rec.wait_for("the queued messages to run", |r| {
        r.latest()
            .iter()
            .filter(|(_, m)| m.title.starts_with("✅ echo q"))
            .count()
            == QUEUED
    })
    .await;
    let ran: Vec<String> = rec
        .posts()
        .iter()
        .filter_map(|(_, m)| m.title.find("echo q").map(|at| m.title[at..].to_owned()))
        .collect();
    assert_eq!(
        ran,
        sent,
        "run after the restart in the order sent: {:#?}",
        rec.calls()
    );
    if fault {
        let mut c = db.store.conn().await.expect("conn");
        let (tries,): (i64,) = sqlx::query_as("SELECT last_value FROM inbox_faults")
            .only(&mut *c)
            .await
            .expect("tries");
        assert!(tries >= 2, "the fault was met: {tries} tries");
    }
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_queued_messages_taken_again_after_a_restart_run_in_the_order_sent_on_postgres() {
    d2_queued_messages_taken_again_after_a_restart_run_in_the_order_sent(
        chat_bridge::store::Backend::Postgres,
        false,
    )
    .await;
}

/// The same with the first inbox write of the restart failing for a moment (the database going
/// away): that event is taken again before the next, not left for a later start — it ran after the
/// thread's messages behind it (outside tester: SIGKILLs with the bridge's connections cut, 4 of 4
/// threads out of order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_queued_messages_taken_again_after_a_restart_keep_their_order_when_the_database_fails_one_for_a_moment()
 {
    d2_queued_messages_taken_again_after_a_restart_run_in_the_order_sent(
        chat_bridge::store::Backend::Postgres,
        true,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_queued_messages_taken_again_after_a_restart_run_in_the_order_sent_on_sqlite() {
    d2_queued_messages_taken_again_after_a_restart_run_in_the_order_sent(
        chat_bridge::store::Backend::Sqlite,
        false,
    )
    .await;
}

// `/new` while a command runs: the old session's turn is cancelled at the agent, and what the
// agent then says of it — the command's end, the turn's — still finishes the command's message
// and its rows; the thread's next message, queued behind it, opens a new session. (Before: the
// session was let go at once, so the turn never heard its end — a stall notice, the turn open for
// good and the next message stuck behind it.)
on_both! {
    async fn l2_new_while_a_command_runs_ends_the_command_where_it_is_shown_and_the_next_message_opens_a_session(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&config(&db.url, dir.path()), rec.clone()).await.expect("build");
        app.core.accept(console::inbound("sleep 20; echo never")).await.expect("accept");
        rec.wait_for("the command's message", |r| r.posts().iter().any(|(_, m)| m.title.contains("sleep 20"))).await;
        let session_of = |app: &Application| {
            let store = app.store.clone();
            async move {
                let mut c = store.conn().await.expect("conn");
                chat_bridge::store::history::list(&mut c, &Default::default()).await.expect("list").items.remove(0)
            }
        };
        let before = session_of(&app).await;
        assert!(before.daemon_session.is_some(), "the command runs in a session");
        // Meant for the old session: dropped by `/new`, as `/cancel` drops them.
        app.core.accept(console::inbound("echo queued-1")).await.expect("accept");
        app.core.accept(console::inbound("echo queued-2")).await.expect("accept");
        app.core.accept(console::inbound("/new")).await.expect("accept");
        app.core.accept(console::inbound("echo after")).await.expect("accept");
        rec.wait_for("the next command's result", |r| r.latest().iter().any(|(_, m)| m.title.starts_with("✅ echo after"))).await;
        settle(&app).await;
        let (_, sleep) = rec.latest().into_iter().find(|(_, m)| m.title.contains("sleep 20")).expect("shown");
        assert!(sleep.title.starts_with("⏹ sleep 20; echo never — cancelled"), "the command's message ends: {sleep:#?}");
        let warnings: Vec<_> = rec.posts().into_iter().filter(|(_, m)| m.tone == Tone::Warning || m.tone == Tone::Error).collect();
        assert!(warnings.is_empty(), "no stall or error notice: {warnings:#?}");
        assert!(
            rec.posts().iter().any(|(_, m)| m.title == "Started over: cancelling the running turn (2 queued messages dropped); the next message opens a new agent session."),
            "{:#?}", rec.posts()
        );
        assert!(!rec.posts().iter().any(|(_, m)| m.title.contains("queued-")), "the queued messages never ran");
        let after = session_of(&app).await;
        assert!(after.daemon_session.is_some() && after.daemon_session != before.daemon_session, "the next message ran in a new session: {:?} then {:?}", before.daemon_session, after.daemon_session);
        let mut c = app.store.conn().await.expect("conn");
        let calls = tool_calls::of_conversation(&mut c, &after.id).await.expect("calls");
        let ts = turns::of_conversation(&mut c, &after.id).await.expect("turns");
        drop(c);
        assert_eq!(
            calls.iter().map(|t| (t.title.as_str(), t.status.as_str())).collect::<Vec<_>>(),
            [("sleep 20; echo never", "cancelled"), ("echo after", "completed")]
        );
        assert_eq!(
            ts.iter().map(|t| t.status.as_str()).collect::<Vec<_>>(),
            ["cancelled", "ended"],
            "the cancelled turn ended, then the next one ran"
        );
        app.shutdown().await;
    }
}

// On-call rotates the daemon's token (a Kubernetes Secret mounted as `daemon.token_file`) and the
// daemon is redeployed with it: the bridge, refused with the old token, reads the file again
// before each attempt and is let in once the file holds the new one — no restart. The message
// sent meanwhile is held and then runs.
on_both! {
    async fn l7_s1_a_daemon_token_rotated_in_its_file_is_taken_without_a_restart(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let daemon = ScriptedDaemon::start(|mut peer: Peer| async move {
            let first = peer.number == 1;
            peer.handshake().await;
            while let Some(msg) = peer.recv().await {
                match msg["method"].as_str() {
                    Some("session/new") => peer.reply(&msg, json!({"sessionId": "s1"})).await,
                    Some("session/load" | "session/set_mode") => peer.reply(&msg, json!({})).await,
                    Some("session/prompt") => {
                        peer.reply(&msg, json!({"stopReason": "end_turn"})).await;
                        if first {
                            // Redeployed with the rotated token.
                            peer.drop_connection();
                            return;
                        }
                    }
                    _ => {}
                }
            }
        })
        .await;
        let file = dir.path().join("daemon-token");
        std::fs::write(&file, format!("{}\n", daemon.token)).expect("write");
        let mut cfg = config(&db.url, dir.path());
        cfg.daemon.url = Some(daemon.url.clone());
        // As `Config::load` leaves it for a token read from `token_file`.
        cfg.daemon.token = Some(daemon.token.clone().into());
        cfg.daemon.token_file = Some(file.clone());
        cfg.daemon.token_from_file = true;
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        daemon.rotate_token("rotated-token");
        app.core.accept(console::inbound("first")).await.expect("accept");
        let conv = first_turn_ended(&app, &rec).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while daemon.refused() < 2 {
            assert!(tokio::time::Instant::now() < deadline, "the bridge tries to reconnect");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        app.core.accept(console::inbound("second")).await.expect("accept");
        std::fs::write(&file, "rotated-token\n").expect("rotate");
        settle(&app).await;
        let mut c = app.store.conn().await.expect("conn");
        let ts = turns::of_conversation(&mut c, &conv.id).await.expect("turns");
        drop(c);
        assert_eq!(
            ts.iter().map(|t| t.status.as_str()).collect::<Vec<_>>(),
            ["ended", "ended"],
            "the message sent while the token was refused ran once the file held the new one: {:#?}",
            rec.calls()
        );
        assert_eq!(daemon.connections(), 2);
        app.shutdown().await;
    }
}

/// D2 (outside tester, PostgreSQL stopped while a thread's queued messages were due): when a turn
/// ended and the next queued message's turn could not be recorded (the database away), the step's
/// retry skipped that message — the next one ran, and the skipped one waited in the inbox for a
/// restart (or the queue stood still, `/status` saying "Idle" with a message queued). Now the
/// message keeps its place and runs once the database answers, each exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_a_queued_message_whose_turn_cannot_be_recorded_keeps_its_place_until_the_database_answers()
 {
    let (db, _dir, rec, app) = on_postgres().await;
    let mut c = db.store.conn().await.expect("conn");
    // Armed below: then the next two turns' inserts fail.
    transient_fault(&mut c, "turn_faults", "BEFORE INSERT ON turns", 1000, 2).await;
    app.core
        .accept(console::inbound("sleep 1; echo first"))
        .await
        .expect("accept");
    rec.wait_for("the first command runs", |r| {
        r.posts().iter().any(|(_, m)| m.tone == Tone::Running)
    })
    .await;
    for text in ["echo second", "echo third"] {
        app.core
            .accept(console::inbound(text))
            .await
            .expect("accept");
    }
    sqlx::query("ALTER SEQUENCE turn_faults RESTART WITH 1")
        .execute(&mut *c)
        .await
        .expect("arm");
    settle(&app).await;
    let (tries,): (i64,) = sqlx::query_as("SELECT last_value FROM turn_faults")
        .only(&mut *c)
        .await
        .expect("tries");
    assert!(tries >= 3, "the faults were met: {tries} tries");
    drop(c);
    let ran: Vec<String> = rec
        .latest()
        .into_iter()
        .filter(|(_, m)| m.tone == Tone::Success)
        .map(|(_, m)| m.title)
        .collect();
    let at = |word: &str| {
        ran.iter()
            .position(|t| t.starts_with(&format!("✅ {word}")))
            .unwrap_or_else(|| panic!("{word} ran: {ran:?}"))
    };
    assert!(
        at("sleep 1; echo first") < at("echo second") && at("echo second") < at("echo third"),
        "in the order sent: {ran:?}"
    );
    assert_eq!(ran.len(), 3, "each once: {ran:?}");
    let mut c = app.store.conn().await.expect("conn");
    let conv = chat_bridge::store::history::list(&mut c, &Default::default())
        .await
        .expect("list")
        .items
        .remove(0);
    let stored: Vec<(String, String)> = turns::of_conversation(&mut c, &conv.id)
        .await
        .expect("turns")
        .into_iter()
        .map(|t| (t.prompt, t.status))
        .collect();
    assert_eq!(
        stored,
        [
            ("sleep 1; echo first".to_owned(), "ended".to_owned()),
            ("echo second".to_owned(), "ended".to_owned()),
            ("echo third".to_owned(), "ended".to_owned()),
        ],
        "one turn each, all ended"
    );
    drop(c);
    app.shutdown().await;
}

/// Makes the test database `name` read-only (or writable again) as a failover does: new sessions
/// take the setting, and every open connection is cut so the bridge's next ones have it.
async fn read_only(name: &str, on: bool) {
    let admin = chat_bridge::store::Store::connect(&chat_bridge_tests::db::admin_url())
        .await
        .expect("admin");
    let set = if on {
        format!("ALTER DATABASE {name} SET default_transaction_read_only = on")
    } else {
        format!("ALTER DATABASE {name} RESET default_transaction_read_only")
    };
    let cut = format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}' AND pid <> pg_backend_pid()"
    );
    for sql in [set, cut] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(admin.statements())
            .await
            .expect("admin statement");
    }
    admin.close().await;
}

/// A database that turns read-only for a while (a demoted primary, an operator's
/// `default_transaction_read_only`) refuses every write with 25006. Taken as refused for good, the
/// chat events that arrived meanwhile were answered as taken but never recorded — lost without a
/// trace — and every thread stood still until a restart (an outside tester's failover attack). The
/// events wait, unacknowledged, until the database takes writes again, and run in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_messages_that_arrive_while_the_database_is_read_only_wait_for_it_and_run_in_order() {
    let (db, _dir, rec, app) = on_postgres().await;
    let app = Arc::new(app);
    let name = db.url.rsplit('/').next().expect("database name").to_owned();
    app.core
        .accept(console::inbound("echo before"))
        .await
        .expect("accept");
    rec.wait_for("the first result", |r| {
        r.latest()
            .iter()
            .any(|(_, m)| m.title.starts_with("✅ echo before"))
    })
    .await;

    read_only(&name, true).await;
    let stop = tokio_util::sync::CancellationToken::new();
    let (acks_tx, mut acks) = tokio::sync::mpsc::unbounded_channel();
    let sender = tokio::spawn({
        let (app, stop) = (app.clone(), stop.clone());
        async move {
            for n in 1..=3 {
                let (arrival, recorded) = chat_bridge::channel::Arrival::acknowledged(
                    console::inbound(&format!("echo ro-{n}")),
                );
                let acks_tx = acks_tx.clone();
                tokio::spawn(async move {
                    if recorded.await.is_ok() {
                        let _ = acks_tx.send(n);
                    }
                });
                app.accept(arrival, &stop).await;
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        acks.try_recv().is_err(),
        "nothing is acknowledged while it cannot be recorded"
    );
    // The first ping may meet a connection the cut closed; the next is on a new, read-only one.
    app.store.ping().await;
    assert!(
        !app.store.ping().await,
        "/readyz: a read-only store is not ready"
    );
    read_only(&name, false).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !app.store.ping().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "ready again once it takes writes"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::timeout(Duration::from_secs(60), sender)
        .await
        .expect("the events are taken once the database takes writes")
        .expect("join");
    rec.wait_for("the three results", |r| {
        r.latest()
            .iter()
            .filter(|(_, m)| m.title.starts_with("✅ echo ro-"))
            .count()
            == 3
    })
    .await;
    let ran: Vec<String> = rec
        .posts()
        .iter()
        .filter_map(|(_, m)| {
            m.title
                .find("echo ro-")
                .map(|at| m.title[at..at + 9].to_owned())
        })
        .collect();
    assert_eq!(
        ran,
        ["echo ro-1", "echo ro-2", "echo ro-3"],
        "once each, in order: {:#?}",
        rec.calls()
    );
    let mut acked = Vec::new();
    while let Ok(n) = acks.try_recv() {
        acked.push(n);
    }
    assert_eq!(acked.len(), 3, "each acknowledged once recorded: {acked:?}");
    let app = Arc::into_inner(app).expect("the only owner");
    app.shutdown().await;
}

/// D2 (an outside tester's finding): a database connection cut while the bridge starts — here in
/// the middle of its migrations, the likeliest place, as a failover or an operator's
/// `pg_terminate_backend` does — is a fault of the moment: the step is taken again and the bridge
/// starts. It used to exit (status 1) on that one cut connection, with the error repeated three
/// times on one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_a_connection_cut_while_the_bridge_migrates_is_taken_again_not_an_exit() {
    use sqlx::Connection;
    chat_bridge_tests::init_tracing();
    let db = chat_bridge_tests::db::TestDb::new(chat_bridge::store::Backend::Postgres).await;
    let name = db.url.rsplit('/').next().expect("database name").to_owned();
    let dir = tempfile::tempdir().expect("tmp");
    // The migrations' table held: the starting bridge waits on it, where it can be seen and cut.
    let mut holder = chat_bridge_tests::db::hold_table(&db.url, "_sqlx_migrations").await;
    let cfg = config(&db.url, dir.path());
    let rec = Arc::new(Recorder::default());
    let starting = tokio::spawn(async move { Application::build(&cfg, rec).await });

    cut_the_waiting(&name, &mut holder).await;
    let app = tokio::time::timeout(Duration::from_secs(30), starting)
        .await
        .expect("started in time")
        .expect("join")
        .expect("the bridge starts after the cut connection");
    app.shutdown().await;
    holder.close().await.expect("close");
    db.cleanup().await;
}

/// D2: a message whose turn cannot be recorded for a moment — the connection writing it is cut
/// (a failover, `pg_terminate_backend`) — runs once when the database answers again: the step is
/// taken again as it was decided, not decided afresh from a state that already holds its turn
/// (queued behind itself, or started in memory and never sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_a_message_whose_turn_write_is_cut_runs_once_when_the_database_answers() {
    use sqlx::Connection;
    let (db, _dir, rec, app) = on_postgres().await;
    let name = db.url.rsplit('/').next().expect("database name").to_owned();
    // The turns' table held: the turn's transaction waits on it, where it can be seen and cut.
    let mut holder = chat_bridge_tests::db::hold_table(&db.url, "turns").await;
    app.core
        .accept(console::inbound("echo once-only"))
        .await
        .expect("accept");
    cut_the_waiting(&name, &mut holder).await;
    settle(&app).await;
    let results = rec
        .latest()
        .iter()
        .filter(|(_, m)| m.title.starts_with("✅ echo once-only"))
        .count();
    assert_eq!(results, 1, "the command ran once: {:#?}", rec.calls());
    let mut c = app.store.conn().await.expect("conn");
    let conv = chat_bridge::store::history::list(&mut c, &Default::default())
        .await
        .expect("list")
        .items
        .remove(0);
    let turns = turns::of_conversation(&mut c, &conv.id)
        .await
        .expect("turns");
    assert_eq!(turns.len(), 1, "one turn: {turns:#?}");
    assert_eq!(turns[0].status, "ended");
    drop(c);
    app.shutdown().await;
    holder.close().await.expect("close");
    db.cleanup().await;
}

/// P2, D1: a command's turn ends with its result — the shell agent sends the result and the
/// prompt's end back to back — and when both wait in the conversation's mailbox they are written
/// as one statement (one commit, not two: at 10,000 sessions the commits bound the results'
/// latency). Cut while it waits, that statement leaves nothing written, and the result and the
/// turn's end are then written one by one, each once: one result in the thread, one transcript
/// line, the turn ended. (A `/status` held at its write keeps the conversation busy while the
/// command finishes, so both frames are waiting when it takes the result.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p2_a_result_and_its_turns_end_are_written_together_and_once_each_when_that_is_cut() {
    use sqlx::Connection;
    let (db, dir, rec, app) = on_postgres().await;
    let name = db.url.rsplit('/').next().expect("database name").to_owned();
    let ran = dir.path().join("ran");
    let command = format!("sleep 1; touch {}; echo paired-once", ran.display());
    app.core
        .accept(console::inbound(&command))
        .await
        .expect("accept");
    rec.wait_for("the command's running message", |r| {
        r.posts().iter().any(|(_, m)| m.tone == Tone::Running)
    })
    .await;
    // The conversation busy with a `/status` that waits for the transcript's table while the
    // command finishes: its result and the prompt's end queue behind it.
    let mut transcript_held = chat_bridge_tests::db::hold_table(&db.url, "transcript").await;
    app.core
        .accept(console::inbound("/status"))
        .await
        .expect("accept");
    waits_on_a_lock(&name).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !ran.exists() {
        assert!(std::time::Instant::now() < deadline, "the command ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The agent sends the result and the prompt's end as the command exits.
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Writes to the turns' table held (reads pass), then the `/status` let go: the statement
    // that ends the turn waits where it can be seen and cut.
    let mut turns_held = sqlx::AnyConnection::connect(&db.url)
        .await
        .expect("connect");
    for statement in ["BEGIN", "LOCK TABLE turns IN EXCLUSIVE MODE"] {
        sqlx::query(statement)
            .execute(&mut turns_held)
            .await
            .expect("hold the turns' writes");
    }
    sqlx::query("COMMIT")
        .execute(&mut transcript_held)
        .await
        .expect("let the transcript go");
    let cut = cut_the_waiting(&name, &mut turns_held).await;
    assert!(
        cut.iter()
            .any(|q| q.contains("UPDATE tool_calls") && q.contains("UPDATE turns")),
        "the result and the turn's end were one statement: {cut:#?}"
    );
    settle(&app).await;
    let results = rec
        .latest()
        .iter()
        .filter(|(_, m)| m.tone == Tone::Success && m.title.contains("paired-once"))
        .count();
    assert_eq!(results, 1, "one result: {:#?}", rec.calls());
    one_result_stored(&app.store).await;
    app.shutdown().await;
    for held in [transcript_held, turns_held] {
        held.close().await.expect("close");
    }
    db.cleanup().await;
}

/// D2 (an outside tester's finding): a statement cut short by the database — `lock_timeout` while
/// another session holds a table, `statement_timeout`, an operator's `pg_cancel_backend` — leaves
/// nothing written and can pass, like a lost connection. Taken as refused for good, a command's
/// result was dropped: its message stayed "running", its call `running` in the store, and the turn
/// ended ✅ right after, so no restart put it right. The result now waits for the lock and is
/// written once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_a_result_whose_write_meets_a_lock_timeout_is_written_once_the_lock_is_let_go() {
    use sqlx::Connection;
    chat_bridge_tests::init_tracing();
    let db = chat_bridge_tests::db::TestDb::new(chat_bridge::store::Backend::Postgres).await;
    db.set_lock_timeout("100ms").await;
    let dir = tempfile::tempdir().expect("tmp");
    let rec = Arc::new(Recorder::default());
    let app = Application::build(&config(&db.url, dir.path()), rec.clone())
        .await
        .expect("build");
    app.core
        .accept(console::inbound("sleep 0.5; echo timed-once"))
        .await
        .expect("accept");
    rec.wait_for("the command's running message", |r| {
        r.posts().iter().any(|(_, m)| m.tone == Tone::Running)
    })
    .await;
    // The transcript's table held well past the command's end: the result's write meets the
    // lock timeout again and again.
    let mut holder = chat_bridge_tests::db::hold_table(&db.url, "transcript").await;
    tokio::time::sleep(Duration::from_millis(2000)).await;
    sqlx::query("COMMIT")
        .execute(&mut holder)
        .await
        .expect("let go");
    settle(&app).await;
    let results = rec
        .latest()
        .iter()
        .filter(|(_, m)| m.tone == Tone::Success && m.title.contains("timed-once"))
        .count();
    assert_eq!(results, 1, "the result shown once: {:#?}", rec.calls());
    let conv = one_result_stored(&app.store).await;
    let mut c = app.store.conn().await.expect("conn");
    let calls = tool_calls::of_conversation(&mut c, &conv)
        .await
        .expect("calls");
    assert_eq!(
        calls.iter().map(|t| t.status.as_str()).collect::<Vec<_>>(),
        ["completed"]
    );
    drop(c);
    app.shutdown().await;
    holder.close().await.expect("close");
    db.cleanup().await;
}

/// The store's one conversation holds one turn, ended, and its result's `tool_finished` line once.
/// Returns the conversation's id.
async fn one_result_stored(store: &chat_bridge::store::Store) -> String {
    use chat_bridge::store::transcript;
    let mut c = store.conn().await.expect("conn");
    let conv = chat_bridge::store::history::list(&mut c, &Default::default())
        .await
        .expect("list")
        .items
        .remove(0);
    let turns = turns::of_conversation(&mut c, &conv.id)
        .await
        .expect("turns");
    assert_eq!(turns.len(), 1, "one turn: {turns:#?}");
    assert_eq!(turns[0].status, "ended");
    let finished = transcript::list(&mut c, &conv.id)
        .await
        .expect("transcript")
        .into_iter()
        .filter(|e| e.kind == "tool_finished")
        .count();
    assert_eq!(finished, 1, "the result recorded once");
    conv.id
}

/// Terminates the backends of database `name` that wait on a lock (as `pg_terminate_backend` by an
/// operator or a failover does), once one does, then lets `holder`'s lock go. Returns the
/// statements they were running.
async fn cut_the_waiting(name: &str, holder: &mut sqlx::AnyConnection) -> Vec<String> {
    let cut = lock_waiters(name, true).await;
    sqlx::query("COMMIT")
        .execute(&mut *holder)
        .await
        .expect("commit");
    cut
}

/// Waits until a backend of database `name` waits on a lock.
async fn waits_on_a_lock(name: &str) {
    lock_waiters(name, false).await;
}

/// The statements of database `name`'s backends that wait on a lock, once one does (within 20 s);
/// with `terminate`, those backends are terminated.
async fn lock_waiters(name: &str, terminate: bool) -> Vec<String> {
    let admin = chat_bridge::store::Store::connect(&chat_bridge_tests::db::admin_url())
        .await
        .expect("admin");
    let waiting = format!(
        "SELECT query, CASE WHEN {terminate} THEN pg_terminate_backend(pid) ELSE false END FROM pg_stat_activity WHERE datname = '{name}' AND wait_event_type = 'Lock'"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let found = loop {
        let found: Vec<(String, bool)> = sqlx::query_as(sqlx::AssertSqlSafe(waiting.clone()))
            .fetch_all(admin.statements())
            .await
            .expect("pg_stat_activity");
        if !found.is_empty() {
            break found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "something waited on the held table"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    admin.close().await;
    found.into_iter().map(|(query, _)| query).collect()
}

/// D6 (an outside tester's finding): a turn taken back after a restart whose session the agent no
/// longer has (the agent restarted too: the real shell agent answers `unknown session`) ends as
/// interrupted and the store lets go of the session with it, as after any interrupted turn — it
/// kept it, so the next start tried the lost session again before opening a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d6_a_taken_back_turn_whose_session_the_agent_lost_lets_the_session_go_in_the_store() {
    use chat_bridge::store::conversations;
    chat_bridge_tests::init_tracing();
    let dir = tempfile::tempdir().expect("tmp");
    let url = format!("sqlite://{}", dir.path().join("d6.db").display());
    let agent = shell_agent::ShellAgent::start(
        "127.0.0.1:0".parse().expect("addr"),
        None,
        shell_agent::AgentConfig::default(),
    )
    .await
    .expect("agent");
    let mut cfg = config(&url, dir.path());
    cfg.daemon.url = Some(agent.url());
    cfg.daemon.token = Some(agent.token().into());
    // As a crash leaves it, with an agent that has restarted since: it does not know session s1.
    let (store, conv) = crashed_mid_turn(&url, dir.path(), None).await;
    let rec = Arc::new(Recorder::default());
    let app = Application::build(&cfg, rec.clone()).await.expect("build");
    settle(&app).await;
    app.shutdown().await;
    let mut c = store.conn().await.expect("conn");
    let turn = &turns::of_conversation(&mut c, &conv.id)
        .await
        .expect("turns")[0];
    assert_eq!(turn.status, "interrupted", "{:#?}", rec.calls());
    let row = conversations::get(&mut c, &conv.id)
        .await
        .expect("get")
        .expect("the conversation");
    assert_eq!(
        row.daemon_session, None,
        "the session is let go in the store"
    );
    drop(c);
    store.close().await;
    agent.shutdown().await;
}
