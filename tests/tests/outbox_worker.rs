//! D1 through the worker: a channel's 429 (`Retry-After`) delays delivery and loses nothing; a
//! temporary failure is retried; a permanent one is dead-lettered and stops blocking the thread.

use std::sync::Mutex;
use std::time::Duration;

use chat_bridge::channel::{
    BoxFuture, Capabilities, Channel, ChatAction, DeliveryError, Message, Target, Tone,
};
use chat_bridge::clock::{Clock, ManualClock};
use chat_bridge::outbox_worker::{ProgressBudget, Step, StepContext, deliver_once, deliver_step};
use chat_bridge::store::bind::BindExt;
use chat_bridge::store::bind::FetchExt;
use chat_bridge::store::conversations::{self, Key};
use chat_bridge::store::outbox::{self, Kind, NewAction, RetryPolicy};
use chat_bridge::store::{Store, now_ms};
use chat_bridge_tests::on_both;
use tokio_util::sync::CancellationToken;

/// A platform that answers each call with the next scripted result.
struct Flaky {
    script: Mutex<Vec<Result<(), DeliveryError>>>,
    delivered: Mutex<Vec<String>>,
}

impl Flaky {
    fn new(mut script: Vec<Result<(), DeliveryError>>) -> Self {
        script.reverse();
        Self {
            script: Mutex::new(script),
            delivered: Mutex::default(),
        }
    }
    fn next(&self, title: &str) -> Result<(), DeliveryError> {
        let r = self.script.lock().expect("lock").pop().unwrap_or(Ok(()));
        if r.is_ok() {
            self.delivered.lock().expect("lock").push(title.to_owned());
        }
        r
    }
}

impl Channel for Flaky {
    fn platform(&self) -> &'static str {
        "console"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            max_message_len: 4000,
            answer_len: 4000,
            output_cap: 3500,
            can_edit: true,
            has_buttons: false,
            has_threads: true,
            has_reactions: false,
            takes_requests: false,
        }
    }
    fn post<'a>(
        &'a self,
        _t: &'a Target,
        m: &'a Message,
    ) -> BoxFuture<'a, Result<String, DeliveryError>> {
        Box::pin(async move { self.next(&m.title).map(|()| format!("id-{}", m.title)) })
    }
    fn edit<'a>(
        &'a self,
        _t: &'a Target,
        _id: &'a str,
        m: &'a Message,
    ) -> BoxFuture<'a, Result<(), DeliveryError>> {
        Box::pin(async move { self.next(&m.title) })
    }
}

fn target() -> Target {
    Target {
        workspace: "w".into(),
        channel: "c".into(),
        thread: "t".into(),
    }
}

/// Queues `action` the way the core does (coalescing on its message key).
async fn queue(store: &Store, conv: &str, action: &ChatAction, kind: Kind) {
    let json = serde_json::to_string(action).expect("json");
    let mut c = store.conn().await.expect("conn");
    let new = NewAction {
        conversation_id: conv,
        kind,
        coalesce_key: action.key(),
        action: &json,
    };
    outbox::enqueue(&mut c, &new, now_ms())
        .await
        .expect("enqueue");
}

/// One delivery step as of `clock`.
async fn step_at(
    store: &Store,
    channel: &dyn Channel,
    policy: &RetryPolicy,
    clock: &ManualClock,
) -> Step {
    let cx = StepContext {
        worker: "w",
        policy,
        budget: &ProgressBudget::unlimited(),
        clock,
        give_up: &CancellationToken::new(),
        queued: None,
        next: None,
    };
    deliver_step(store, channel, &cx).await.expect("step")
}

async fn enqueue(store: &Store, conv: &str, title: &str) {
    let action = ChatAction::Post {
        target: target(),
        key: format!("k:{title}"),
        message: Message::text(Tone::Neutral, title),
    };
    queue(store, conv, &action, Kind::Post).await;
}

async fn conversation(store: &Store) -> String {
    conversation_in(store, "t").await
}

async fn conversation_in(store: &Store, thread: &str) -> String {
    let mut c = store.conn().await.expect("conn");
    let key = Key {
        platform: "console",
        workspace: "w",
        channel: "c",
        thread,
    };
    conversations::find_or_create(&mut c, &key, "u", "t", now_ms())
        .await
        .expect("conv")
        .0
        .id
}

on_both! {
    async fn d1_a_429_delays_delivery_in_order_and_loses_nothing(db) {
        let conv = conversation(&db.store).await;
        enqueue(&db.store, &conv, "first").await;
        enqueue(&db.store, &conv, "second").await;
        let channel = Flaky::new(vec![Err(DeliveryError::RateLimited(Duration::from_millis(300)))]);
        let policy = RetryPolicy::default();
        let clock = ManualClock::at(now_ms());
        assert_eq!(step_at(&db.store, &channel, &policy, &clock).await, Step::Failed);
        assert_eq!(step_at(&db.store, &channel, &policy, &clock).await, Step::Idle, "waits out Retry-After; 'second' waits behind 'first'");
        clock.advance(Duration::from_millis(299));
        assert_eq!(step_at(&db.store, &channel, &policy, &clock).await, Step::Idle, "Retry-After is kept to the millisecond");
        clock.advance(Duration::from_millis(1));
        assert_eq!(step_at(&db.store, &channel, &policy, &clock).await, Step::Delivered, "due exactly 300 ms later");
        assert_eq!(step_at(&db.store, &channel, &policy, &clock).await, Step::Delivered);
        assert_eq!(*channel.delivered.lock().expect("lock"), ["first", "second"]);
        assert!(chat_bridge::outbox_worker::drained(&db.store).await.expect("drained"));
    }

    async fn d1_temporary_failures_retry_and_permanent_ones_dead_letter_without_blocking(db) {
        let conv = conversation(&db.store).await;
        enqueue(&db.store, &conv, "doomed").await;
        enqueue(&db.store, &conv, "fine").await;
        let channel = Flaky::new(vec![Err(DeliveryError::Temporary("HTTP 502".into())), Err(DeliveryError::Permanent("channel_not_found".into()))]);
        let policy = RetryPolicy { base: Duration::from_millis(50), cap: Duration::from_millis(400), max_attempts: 5 };
        let clock = ManualClock::at(now_ms());
        assert_eq!(step_at(&db.store, &channel, &policy, &clock).await, Step::Failed);
        clock.advance(Duration::from_millis(49));
        assert_eq!(step_at(&db.store, &channel, &policy, &clock).await, Step::Idle, "the first retry waits the base delay, to the millisecond");
        clock.advance(Duration::from_millis(1));
        assert_eq!(step_at(&db.store, &channel, &policy, &clock).await, Step::Failed, "permanent: dead-lettered at once");
        assert_eq!(step_at(&db.store, &channel, &policy, &clock).await, Step::Delivered, "the thread is not blocked");
        assert_eq!(*channel.delivered.lock().expect("lock"), ["fine"]);
        let mut c = db.store.conn().await.expect("conn");
        let dead = outbox::dead_letters(&mut c, 10).await.expect("dead");
        assert_eq!((dead.len(), dead[0].last_error.as_deref()), (1, Some("channel_not_found")), "kept and counted, not dropped");
    }
}

async fn enqueue_edit(store: &Store, conv: &str, key: &str, title: &str, progress: bool) {
    let action = ChatAction::Edit {
        target: target(),
        key: key.into(),
        message: Message::text(Tone::Running, title),
        progress,
    };
    queue(store, conv, &action, Kind::Edit).await;
}

on_both! {
    async fn p2_an_edit_of_a_mapped_message_does_not_write_its_mapping_again(db) {
        // The map is written when a post makes the id (and when an interrupted post is found
        // again); an edit of that id changes nothing in it, so it writes nothing there.
        let conv = conversation(&db.store).await;
        let channel = Flaky::new(vec![]);
        let policy = RetryPolicy::default();
        enqueue(&db.store, &conv, "one").await;
        let clock = ManualClock::at(now_ms());
        assert_eq!(step_at(&db.store, &channel, &policy, &clock).await, Step::Delivered);
        let posted_at = clock.now_ms();
        enqueue_edit(&db.store, &conv, "k:one", "one, edited", false).await;
        clock.advance(Duration::from_secs(5));
        assert_eq!(step_at(&db.store, &channel, &policy, &clock).await, Step::Delivered);
        assert_eq!(*channel.delivered.lock().expect("lock"), ["one", "one, edited"]);
        let mut c = db.store.conn().await.expect("conn");
        let (id, updated): (String, i64) = sqlx::query_as("SELECT platform_id, updated_at FROM message_map WHERE conversation_id = $1 AND logical_key = 'k:one'")
            .arg(&conv).only(&mut *c).await.expect("mapped");
        assert_eq!((id.as_str(), updated), ("id-one", posted_at), "the edit rewrote the mapping");
    }
}

on_both! {
    async fn d1_a_claim_whose_step_fails_before_delivery_is_given_back_at_once(db) {
        // A store error after the claim and before the platform call (the message map unreadable,
        // as when every connection is held): the action is not held for its lease.
        let conv = conversation(&db.store).await;
        enqueue(&db.store, &conv, "one").await;
        let clock = ManualClock::at(now_ms());
        let channel = Flaky::new(vec![]);
        let policy = RetryPolicy::default();
        let mut c = db.store.conn().await.expect("conn");
        sqlx::query("ALTER TABLE message_map RENAME TO message_map_away").execute(&mut *c).await.expect("rename");
        let cx = StepContext { worker: "w", policy: &policy, budget: &ProgressBudget::unlimited(), clock: &clock, give_up: &CancellationToken::new(), queued: None, next: None };
        assert!(deliver_step(&db.store, &channel, &cx).await.is_err(), "the map could not be read");
        sqlx::query("ALTER TABLE message_map_away RENAME TO message_map").execute(&mut *c).await.expect("rename back");
        let (claimed,): (Option<String>,) = sqlx::query_as("SELECT claimed_by FROM outbox WHERE conversation_id = $1")
            .arg(&conv).only(&mut *c).await.expect("row");
        assert_eq!(claimed, None, "the claim was kept after the failed step");
        drop(c);
        assert_eq!(step_at(&db.store, &channel, &policy, &clock).await, Step::Delivered, "taken again at once, not after the lease");
        assert_eq!(*channel.delivered.lock().expect("lock"), ["one"]);
    }
}

on_both! {
    async fn p2_a_claim_says_whether_its_row_waited_so_a_resting_worker_is_woken_only_for_a_queue(db) {
        use chat_bridge::outbox_worker::QUEUE_AFTER;
        use std::sync::atomic::{AtomicBool, Ordering};
        let conv = conversation(&db.store).await;
        let channel = Flaky::new(vec![]);
        let policy = RetryPolicy::default();
        let clock = ManualClock::at(0);
        let queued = AtomicBool::new(true);
        let cx = StepContext { worker: "w", policy: &policy, budget: &ProgressBudget::unlimited(), clock: &clock, give_up: &CancellationToken::new(), queued: Some(&queued), next: None };
        let due_at = || async {
            let mut c = db.store.conn().await.expect("conn");
            let (at,): (i64,) = sqlx::query_as("SELECT next_attempt_at FROM outbox WHERE conversation_id = $1 AND status = 'pending'")
                .arg(&conv).only(&mut *c).await.expect("row");
            at
        };
        // Claimed as it was queued: no queue, no sibling woken.
        enqueue(&db.store, &conv, "fresh").await;
        clock.set(due_at().await + 1);
        assert_eq!(deliver_step(&db.store, &channel, &cx).await.expect("step"), Step::Delivered);
        assert!(!queued.load(Ordering::Relaxed), "a row claimed as it was queued says nothing waits");
        // Claimed after waiting: the rows are queueing.
        enqueue(&db.store, &conv, "waited").await;
        clock.set(due_at().await + chat_bridge::store::ms(QUEUE_AFTER));
        assert_eq!(deliver_step(&db.store, &channel, &cx).await.expect("step"), Step::Delivered);
        assert!(queued.load(Ordering::Relaxed), "a row due {QUEUE_AFTER:?} before its claim says the rows queue");
        assert_eq!(*channel.delivered.lock().expect("lock"), ["fresh", "waited"]);
    }

    async fn p2_a_step_starts_from_what_the_last_delivery_claimed_and_each_conversation_keeps_its_order(db) {
        // On PostgreSQL a delivery's record claims the next action with it (one statement); the
        // next step delivers that one. SQLite claims in a statement of its own each step.
        use chat_bridge::outbox_worker::Next;
        let (a, b) = (conversation_in(&db.store, "a").await, conversation_in(&db.store, "b").await);
        for (conv, title) in [(&a, "a1"), (&a, "a2"), (&b, "b1")] {
            enqueue(&db.store, conv, title).await;
        }
        let channel = Flaky::new(vec![]);
        let policy = RetryPolicy::default();
        let clock = ManualClock::at(now_ms() + 1000);
        let next = Mutex::new(Next::Claim);
        let cx = StepContext { worker: "w", policy: &policy, budget: &ProgressBudget::unlimited(), clock: &clock, give_up: &CancellationToken::new(), queued: None, next: Some(&next) };
        let postgres = db.store.backend() == chat_bridge::store::Backend::Postgres;
        let left = |next: &Mutex<Next>| match &*next.lock().expect("lock") {
            Next::Claim => "claim".to_owned(),
            Next::Deliver(row) => serde_json::from_str::<ChatAction>(&row.action).expect("action").key().expect("key").to_owned(),
            Next::Rest => "rest".to_owned(),
        };
        assert_eq!(deliver_step(&db.store, &channel, &cx).await.expect("step"), Step::Delivered);
        // a2 waits behind a1 as the record saw it: the record claims b1.
        assert_eq!(left(&next), if postgres { "k:b1" } else { "claim" });
        assert_eq!(deliver_step(&db.store, &channel, &cx).await.expect("step"), Step::Delivered);
        assert_eq!(deliver_step(&db.store, &channel, &cx).await.expect("step"), Step::Delivered);
        let delivered = channel.delivered.lock().expect("lock").clone();
        assert_eq!(delivered, if postgres { ["a1", "b1", "a2"] } else { ["a1", "a2", "b1"] });
        // The last record found nothing due: the next step rests without a claim (a row queued
        // meanwhile wakes the worker, whose step after that claims it).
        assert_eq!(left(&next), if postgres { "rest" } else { "claim" });
        enqueue(&db.store, &b, "b2").await;
        if postgres {
            assert_eq!(deliver_step(&db.store, &channel, &cx).await.expect("step"), Step::Idle);
        }
        assert_eq!(deliver_step(&db.store, &channel, &cx).await.expect("step"), Step::Delivered);
        assert_eq!(deliver_step(&db.store, &channel, &cx).await.expect("step"), Step::Idle);
        let mut c = db.store.conn().await.expect("conn");
        assert_eq!(outbox::stats(&mut c, clock.now_ms()).await.expect("stats").pending, 0, "every row recorded delivered");
        assert_eq!(channel.delivered.lock().expect("lock").len(), 4, "each delivered once");
    }

    async fn progress_edits_have_a_smaller_budget_and_never_delay_results(db) {
        use chat_bridge::outbox_worker::deliver_once_budgeted;
        let conv = conversation(&db.store).await;
        // A result edit behind a pending progress edit of the *same* message replaces it (coalescing);
        // the budget is about progress edits of other messages in the same channel.
        enqueue_edit(&db.store, &conv, "tool:a", "progress a", true).await;
        enqueue_edit(&db.store, &conv, "tool:b", "progress b", true).await;
        enqueue_edit(&db.store, &conv, "tool:z", "result a", false).await;
        let channel = Flaky::new(Vec::new());
        let budget = ProgressBudget::new(Duration::from_secs(60));
        let policy = RetryPolicy::default();
        let mut steps = Vec::new();
        for _ in 0..3 {
            steps.push(deliver_once_budgeted(&db.store, &channel, "w", &policy, &budget).await.expect("step"));
        }
        assert_eq!(steps, [Step::Delivered, Step::Skipped, Step::Delivered], "one progress edit per channel per window; results always");
        assert_eq!(*channel.delivered.lock().expect("lock"), ["progress a", "result a"]);

        // A 429 on a progress edit drops it and rests the channel's progress; the result still goes at once.
        enqueue_edit(&db.store, &conv, "tool:c", "progress c", true).await;
        enqueue_edit(&db.store, &conv, "tool:d", "result c", false).await;
        let channel = Flaky::new(vec![Err(DeliveryError::RateLimited(Duration::from_secs(30)))]);
        let budget = ProgressBudget::new(Duration::ZERO);
        assert_eq!(deliver_once_budgeted(&db.store, &channel, "w", &policy, &budget).await.expect("step"), Step::Skipped);
        assert_eq!(deliver_once_budgeted(&db.store, &channel, "w", &policy, &budget).await.expect("step"), Step::Delivered);
        assert_eq!(*channel.delivered.lock().expect("lock"), ["result c"]);
        assert!(chat_bridge::outbox_worker::drained(&db.store).await.expect("drained"));
    }
}

on_both! {
    async fn q1_a_post_whose_outcome_a_crash_hid_is_found_on_slack_not_sent_twice(db) {
        use chat_bridge::channel::slack::Slack;
        use chat_bridge::channel::slack::api::{SlackToken, WebApi};
        use chat_bridge::store::message_map;
        daemon_client::install_crypto_provider();
        let fake = chat_bridge_tests::fake_slack::FakeSlack::start().await;
        let slack = Slack::new(WebApi::new(&fake.base_url, SlackToken::new("xoxb-test")).expect("api"));
        let conv = conversation(&db.store).await;
        let target = Target { workspace: "T1".into(), channel: "C1".into(), thread: "1700.000100".into() };
        let message = Message::text(Tone::Running, "⏳ make test");
        let action = ChatAction::Post { target: target.clone(), key: "tool:c1".into(), message: message.clone() };
        queue(&db.store, &conv, &action, Kind::Post).await;
        // The attempt a SIGKILL interrupted: its intent was recorded and Slack took the post, but the
        // process died before recording the delivery.
        let mut c = db.store.conn().await.expect("conn");
        message_map::put(&mut c, &conv, "tool:c1", "", now_ms()).await.expect("intent");
        drop(c);
        let key = chat_bridge::outbox_worker::idempotency_key(&conv, "tool:c1");
        let ts = slack.post_keyed(&target, &message, &key).await.expect("the interrupted post");
        assert_eq!(fake.posted().len(), 1);
        assert_eq!(fake.posted()[0]["metadata"]["event_payload"]["key"], key.as_str());

        // The restarted worker finds it and does not post again.
        let step = deliver_once(&db.store, &slack, "after-restart", &RetryPolicy::default()).await.expect("step");
        assert_eq!(step, Step::Delivered);
        assert_eq!(fake.posted().len(), 1, "not sent twice");
        assert_eq!(fake.calls_of("conversations.replies").len(), 1, "looked it up once");
        let mut c = db.store.conn().await.expect("conn");
        assert_eq!(message_map::get(&mut c, &conv, "tool:c1").await.expect("get").as_deref(), Some(ts.as_str()));
        drop(c);

        // Without a trace on Slack (the post never left), the next attempt posts it.
        let other = ChatAction::Post { target: target.clone(), key: "tool:c2".into(), message: message.clone() };
        queue(&db.store, &conv, &other, Kind::Post).await;
        let mut c = db.store.conn().await.expect("conn");
        message_map::put(&mut c, &conv, "tool:c2", "", now_ms()).await.expect("intent");
        drop(c);
        assert_eq!(deliver_once(&db.store, &slack, "after-restart", &RetryPolicy::default()).await.expect("step"), Step::Delivered);
        assert_eq!(fake.posted().len(), 2, "posted once, after looking");
    }
}

on_both! {
    async fn q1_an_upload_whose_outcome_a_crash_hid_is_found_on_slack_not_shared_twice(db) {
        use chat_bridge::channel::OutFile;
        use chat_bridge::channel::slack::Slack;
        use chat_bridge::channel::slack::api::{SlackToken, WebApi};
        use chat_bridge::store::message_map;
        use chat_bridge_tests::slack_emulate::{self, SlackEmulator};
        daemon_client::install_crypto_provider();
        // Slack written by others (npm emulate): it keeps the blocks a file share was completed with.
        let emulator = match SlackEmulator::start().await {
            Ok(e) => e,
            Err(e) => {
                eprintln!("!!! SKIPPED: the Slack emulator (npm emulate) could not be installed: {e:?} !!!");
                return;
            }
        };
        let channel = emulator.channel("general").await;
        let thread = emulator.post(&channel, None, "a thread").await;
        let slack = Slack::new(WebApi::new(&emulator.api_base, SlackToken::new(slack_emulate::TOKEN)).expect("api"));
        let conv = conversation(&db.store).await;
        let target = Target { workspace: "T1".into(), channel: channel.clone(), thread: thread.clone() };
        let mut message = Message::text(Tone::Neutral, "💬 answer");
        message.body = Some("A preview; the whole answer is in the file answer.md.".into());
        message.file = Some(OutFile { name: "answer.md".into(), content: "Paragraph.\n\n".repeat(3000) });
        let shares = async || {
            emulator.replies(&channel, &thread).await.into_iter()
                .filter(|m| m["files"].as_array().is_some_and(|f| !f.is_empty()))
                .count()
        };
        let action = ChatAction::Post { target: target.clone(), key: "answer:1".into(), message: message.clone() };
        queue(&db.store, &conv, &action, Kind::Post).await;
        // The attempt a SIGKILL interrupted: its intent was recorded and Slack completed the upload
        // (files.getUploadURLExternal, the bytes, files.completeUploadExternal), but the process died
        // before recording the delivery.
        let mut c = db.store.conn().await.expect("conn");
        message_map::put(&mut c, &conv, "answer:1", "", now_ms()).await.expect("intent");
        drop(c);
        let key = chat_bridge::outbox_worker::idempotency_key(&conv, "answer:1");
        let ts = slack.post_keyed(&target, &message, &key).await.expect("the interrupted upload");
        assert_eq!(shares().await, 1);

        // The restarted worker finds the share and does not upload it again.
        let step = deliver_once(&db.store, &slack, "after-restart", &RetryPolicy::default()).await.expect("step");
        assert_eq!(step, Step::Delivered);
        assert_eq!(shares().await, 1, "not shared twice");
        let mut c = db.store.conn().await.expect("conn");
        let recorded = message_map::get(&mut c, &conv, "answer:1").await.expect("get").expect("recorded");
        drop(c);
        let share_ts = emulator.replies(&channel, &thread).await.into_iter()
            .find(|m| m["files"].as_array().is_some_and(|f| !f.is_empty()))
            .and_then(|m| m["ts"].as_str().map(str::to_owned))
            .expect("the share");
        assert_eq!(recorded, share_ts, "the share's ts is remembered");
        assert!(ts == share_ts || ts.starts_with("file:"), "{ts} / {share_ts}");

        // Without a trace on Slack (the upload never completed), the next attempt uploads it.
        let other = ChatAction::Post { target: target.clone(), key: "answer:2".into(), message: message.clone() };
        queue(&db.store, &conv, &other, Kind::Post).await;
        let mut c = db.store.conn().await.expect("conn");
        message_map::put(&mut c, &conv, "answer:2", "", now_ms()).await.expect("intent");
        drop(c);
        assert_eq!(deliver_once(&db.store, &slack, "after-restart", &RetryPolicy::default()).await.expect("step"), Step::Delivered);
        assert_eq!(shares().await, 2, "uploaded once, after looking");
    }
}

/// A platform that refuses every file for good (Discord's 413 for a file past its size) and takes
/// plain messages.
struct NoFiles {
    posted: Mutex<Vec<Message>>,
}

impl Channel for NoFiles {
    fn platform(&self) -> &'static str {
        "console"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            max_message_len: 2000,
            answer_len: 1900,
            output_cap: 1500,
            can_edit: true,
            has_buttons: false,
            has_threads: true,
            has_reactions: false,
            takes_requests: false,
        }
    }
    fn post<'a>(
        &'a self,
        _t: &'a Target,
        m: &'a Message,
    ) -> BoxFuture<'a, Result<String, DeliveryError>> {
        Box::pin(async move {
            if m.file.is_some() {
                return Err(DeliveryError::Permanent(
                    "Discord answered 413 (code 40005): Request entity too large".into(),
                ));
            }
            let mut posted = self.posted.lock().expect("lock");
            posted.push(m.clone());
            Ok(format!("id-{}", posted.len()))
        })
    }
    fn edit<'a>(
        &'a self,
        _t: &'a Target,
        _id: &'a str,
        _m: &'a Message,
    ) -> BoxFuture<'a, Result<(), DeliveryError>> {
        Box::pin(async { Ok(()) })
    }
}

/// A long answer as the core sends it: a preview carrying the whole text as `answer.md`.
fn uploaded_answer(paragraphs: usize) -> (Message, String) {
    let whole: String = (0..paragraphs)
        .map(|i| format!("Paragraph {i} of the answer.\n\n"))
        .collect();
    let mut message = Message::text(Tone::Neutral, "💬 answer");
    message.body = Some("A preview; the whole answer is in the file answer.md.".into());
    message.markdown = true;
    message.file = Some(chat_bridge::channel::OutFile {
        name: "answer.md".into(),
        content: whole.clone(),
    });
    (message, whole)
}

on_both! {
    async fn an_answer_whose_file_upload_fails_for_good_still_arrives_as_messages_at_once(db) {
        let conv = conversation(&db.store).await;
        let (message, whole) = uploaded_answer(150);
        let action = ChatAction::Post { target: target(), key: "answer:t1".into(), message };
        queue(&db.store, &conv, &action, Kind::Post).await;
        enqueue(&db.store, &conv, "later").await;
        let channel = NoFiles { posted: Mutex::default() };
        let policy = RetryPolicy::default();
        let clock = ManualClock::at(now_ms());
        assert_eq!(step_at(&db.store, &channel, &policy, &clock).await, Step::Delivered, "not retried, not dead-lettered");
        assert_eq!(step_at(&db.store, &channel, &policy, &clock).await, Step::Delivered, "the thread is not held up");
        let posted = channel.posted.lock().expect("lock").clone();
        let notice = posted[0].body.as_deref().unwrap_or_default();
        assert!(notice.contains("answer.md") && notice.contains("could not be uploaded") && notice.contains("413"), "{notice}");
        assert_eq!(posted.last().map(|m| m.title.as_str()), Some("later"));
        let parts = &posted[1..posted.len() - 1];
        assert!(parts.len() > 1 && parts.iter().all(|m| m.file.is_none() && m.body.as_ref().is_some_and(|b| b.chars().count() <= 1900)));
        let joined: String = parts.iter().filter_map(|m| m.body.as_deref()).collect::<Vec<_>>().join("\n\n");
        assert_eq!(joined.split_whitespace().collect::<Vec<_>>(), whole.split_whitespace().collect::<Vec<_>>(), "the whole answer, in order");
        let mut c = db.store.conn().await.expect("conn");
        assert!(outbox::dead_letters(&mut c, 10).await.expect("dead").is_empty());
        assert_eq!(chat_bridge::store::message_map::get(&mut c, &conv, "answer:t1").await.expect("get").as_deref(), Some("id-1"), "the notice stands for the answer");
    }

    // An answer's file that Slack's file host refuses with a 4xx (413: too large) would be
    // refused again: the answer arrives as messages at once instead of waiting through retries. A
    // 5xx is the host failing this time: tried again.
    async fn slack_an_upload_the_file_host_refuses_is_not_retried_and_one_it_fails_is(db) {
        use chat_bridge::channel::slack::Slack;
        use chat_bridge::channel::slack::api::{SlackToken, WebApi};
        use chat_bridge_tests::fake_slack::FakeSlack;
        daemon_client::install_crypto_provider();
        let fake = FakeSlack::start().await;
        let slack = Slack::new(WebApi::new(&fake.base_url, SlackToken::new("xoxb-test")).expect("api"));
        let conv = conversation(&db.store).await;
        let policy = RetryPolicy::default();
        let (message, whole) = uploaded_answer(1200);
        queue(&db.store, &conv, &ChatAction::Post { target: target(), key: "answer:t1".into(), message }, Kind::Post).await;
        let clock = ManualClock::at(now_ms());
        fake.upload_answers(503);
        assert_eq!(step_at(&db.store, &slack, &policy, &clock).await, Step::Failed, "a 503 is tried again");
        assert!(fake.posted().is_empty(), "nothing posted instead of the file yet");
        fake.upload_answers(413);
        clock.advance(Duration::from_secs(600));
        assert_eq!(step_at(&db.store, &slack, &policy, &clock).await, Step::Delivered, "a 413 is not tried again");
        assert_eq!(fake.uploads(), 2, "one upload per attempt");
        let posted = fake.posted();
        let texts: Vec<String> = posted.iter().map(ToString::to_string).collect();
        assert!(texts[0].contains("could not be uploaded") && texts[0].contains("413"), "{}", texts[0]);
        let all = texts.join("");
        for i in [0, 599, 1199] {
            assert!(all.contains(&format!("Paragraph {i} of the answer")), "paragraph {i} arrived");
        }
        assert!(whole.len() > 30_000 && posted.len() > 2);
        let mut c = db.store.conn().await.expect("conn");
        assert!(outbox::dead_letters(&mut c, 10).await.expect("dead").is_empty());
    }

    async fn slack_an_upload_url_off_slacks_file_host_is_refused_once_and_the_answer_arrives_as_messages(db) {
        use chat_bridge::channel::slack::Slack;
        use chat_bridge::channel::slack::api::{SlackToken, WebApi};
        use chat_bridge_tests::slack_emulate::{self, SlackEmulator};
        daemon_client::install_crypto_provider();
        let emulator = match SlackEmulator::start().await {
            Ok(e) => e,
            Err(e) => {
                eprintln!("!!! SKIPPED: the Slack emulator (npm emulate) could not be installed: {e:?} !!!");
                return;
            }
        };
        let channel = emulator.channel("general").await;
        let thread = emulator.post(&channel, None, "a thread").await;
        // The bridge knows Slack as `localhost`; the emulator hands out upload URLs on `127.0.0.1`,
        // another host — refused (SSRF), and refused again on any retry.
        let base = emulator.api_base.replace("127.0.0.1", "localhost");
        let slack = Slack::new(WebApi::new(&base, SlackToken::new(slack_emulate::TOKEN)).expect("api"));
        let conv = conversation(&db.store).await;
        let target = Target { workspace: "T1".into(), channel: channel.clone(), thread: thread.clone() };
        let (message, whole) = uploaded_answer(1200);
        let action = ChatAction::Post { target: target.clone(), key: "answer:t1".into(), message };
        queue(&db.store, &conv, &action, Kind::Post).await;
        let policy = RetryPolicy::default();
        let clock = ManualClock::at(now_ms());
        assert_eq!(step_at(&db.store, &slack, &policy, &clock).await, Step::Delivered, "a refusal that cannot succeed is not retried");
        let replies = emulator.replies(&channel, &thread).await;
        assert!(replies.iter().all(|m| m["files"].as_array().is_none_or(Vec::is_empty)), "nothing was uploaded");
        let texts: Vec<String> = replies.iter().skip(1).map(|m| m.to_string()).collect();
        assert!(texts[0].contains("could not be uploaded") && texts[0].contains("not on Slack") , "{}", texts[0]);
        let all = texts.join("");
        for i in [0, 599, 1199] {
            assert!(all.contains(&format!("Paragraph {i} of the answer")), "paragraph {i} arrived");
        }
        assert!(texts.len() > 2, "split over several messages: {}", texts.len());
        assert!(whole.len() > 30_000);
        let mut c = db.store.conn().await.expect("conn");
        assert!(outbox::dead_letters(&mut c, 10).await.expect("dead").is_empty());
    }
}
