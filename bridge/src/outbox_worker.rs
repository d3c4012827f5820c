//! The outbox worker (D1): delivers chat actions in order per conversation through the channel,
//! retrying with backoff, honouring rate limits, dead-lettering what cannot be delivered.
//!
//! It never holds a transaction across a network call: claim (short), deliver (network), then record
//! the platform message id and mark delivered together (short).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::channel::{Channel, ChatAction, DeliveryError, Message, Target, Tone};
use crate::clock::{Clock, SystemClock};
use crate::store::outbox::{self, Failure, Retry, RetryPolicy};
use crate::store::{Backend, Store, StoreError, message_map, now_ms};

/// What one step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing was due.
    Idle,
    /// An action was delivered.
    Delivered,
    /// An action failed and was rescheduled (or dead-lettered).
    Failed,
    /// A progress-line edit was dropped to keep within its budget (a later edit or the result
    /// supersedes it).
    Skipped,
}

/// The budget for progress-line edits: at most one per platform channel per `every`, and none while
/// that channel is rate-limited — so they never delay results, which have no such limit.
#[derive(Debug)]
pub struct ProgressBudget {
    every: Duration,
    next: std::sync::Mutex<std::collections::HashMap<String, tokio::time::Instant>>,
}

impl ProgressBudget {
    /// One progress edit per channel per `every`.
    #[must_use]
    pub fn new(every: Duration) -> Self {
        Self {
            every,
            next: std::sync::Mutex::default(),
        }
    }

    /// No limit (tests that step the worker by hand).
    #[must_use]
    pub fn unlimited() -> Self {
        Self::new(Duration::ZERO)
    }

    fn take(&self, channel: &str) -> bool {
        let now = tokio::time::Instant::now();
        let mut next = self
            .next
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match next.get(channel) {
            Some(at) if *at > now => false,
            _ => {
                next.insert(channel.to_owned(), now + self.every);
                true
            }
        }
    }

    fn back_off(&self, channel: &str, d: Duration) {
        let mut next = self
            .next
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        next.insert(
            channel.to_owned(),
            tokio::time::Instant::now() + d.max(self.every),
        );
    }
}

/// Delivers one due action, if any.
///
/// # Errors
/// Store errors (the action stays pending and is retried).
pub async fn deliver_once(
    store: &Store,
    channel: &dyn Channel,
    worker: &str,
    policy: &RetryPolicy,
) -> Result<Step, StoreError> {
    deliver_once_budgeted(store, channel, worker, policy, &ProgressBudget::unlimited()).await
}

/// Delivers one due action, keeping progress-line edits within `budget`.
///
/// # Errors
/// Store errors (the action stays pending and is retried).
pub async fn deliver_once_budgeted(
    store: &Store,
    channel: &dyn Channel,
    worker: &str,
    policy: &RetryPolicy,
    budget: &ProgressBudget,
) -> Result<Step, StoreError> {
    let cx = StepContext {
        worker,
        policy,
        budget,
        clock: &SystemClock,
        give_up: &CancellationToken::new(),
        queued: None,
        next: None,
    };
    deliver_step(store, channel, &cx).await
}

/// What one delivery step needs besides the store and the channel.
#[derive(Debug, Clone, Copy)]
pub struct StepContext<'a> {
    /// This worker's claim name.
    pub worker: &'a str,
    /// Backoff and dead-lettering.
    pub policy: &'a RetryPolicy,
    /// The progress-line edit budget.
    pub budget: &'a ProgressBudget,
    /// "Now", for claims, retry times and the message map.
    pub clock: &'a dyn Clock,
    /// Cancelled when waiting for the database to record a delivery must end (the drain deadline).
    pub give_up: &'a CancellationToken,
    /// Set when the step claimed a row that had been due for [`QUEUE_AFTER`] or more: the rows
    /// are queueing, and a resting worker should take from them too.
    pub queued: Option<&'a AtomicBool>,
    /// Where a delivery's record leaves what it found when it claims with it (PostgreSQL,
    /// [`outbox::delivered_and_claim_next`]); the next step starts from that. `None`: each step
    /// claims for itself.
    pub next: Option<&'a std::sync::Mutex<Next>>,
}

/// What the next step starts from ([`StepContext::next`]).
#[derive(Debug, Default)]
pub enum Next {
    /// A claim of its own.
    #[default]
    Claim,
    /// The action the last delivery's record claimed.
    Deliver(outbox::Claimed),
    /// Nothing: the last delivery's record found nothing due — a row queued since wakes the
    /// worker, a retry's time comes with its next look.
    Rest,
}

/// How long a claim holds its action: a worker that stops mid-delivery frees it then.
const LEASE: Duration = Duration::from_secs(60);

/// How long a claimed row may have been due before the claim says the rows are queueing (a row
/// claimed as it is queued waited about a millisecond).
pub const QUEUE_AFTER: Duration = Duration::from_millis(20);

/// Delivers one due action, if any, as of `cx.clock`.
///
/// # Errors
/// Store errors (the action stays pending and is retried).
pub async fn deliver_step(
    store: &Store,
    channel: &dyn Channel,
    cx: &StepContext<'_>,
) -> Result<Step, StoreError> {
    let next = cx.next.map_or(Next::Claim, |next| {
        std::mem::take(
            &mut *next
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    });
    let claimed = match next {
        Next::Deliver(a) => Some(a),
        Next::Rest => None,
        Next::Claim => {
            let mut c = store.relaxed_conn().await?;
            let floor = store.claim_floor(&mut c).await?;
            outbox::claim_next_from(&mut c, cx.worker, cx.clock.now_ms(), LEASE, floor).await?
        }
    };
    let Some(a) = claimed else {
        return Ok(Step::Idle);
    };
    if let Some(queued) = cx.queued {
        let waited = cx.clock.now_ms().saturating_sub(a.due_at);
        queued.store(waited >= crate::store::ms(QUEUE_AFTER), Ordering::Relaxed);
    }
    // One process may serve several platforms: the conversation's own delivers it.
    let channel = a
        .platform
        .as_deref()
        .and_then(|p| channel.route(p))
        .unwrap_or(channel);
    let action: ChatAction = match serde_json::from_str(&a.action) {
        Ok(action) => action,
        Err(e) => {
            let mut c = store.relaxed_conn().await?;
            let dead = RetryPolicy {
                max_attempts: 0,
                ..*cx.policy
            };
            outbox::retry(
                &mut c,
                a.id,
                cx.worker,
                &Failure::Error(&format!("undecodable action: {e}")),
                &dead,
                cx.clock.now_ms(),
            )
            .await?;
            return Ok(Step::Failed);
        }
    };
    let progress_channel = match &action {
        ChatAction::Edit {
            target,
            progress: true,
            ..
        } => Some(target.channel.clone()),
        _ => None,
    };
    if let Some(ch) = &progress_channel
        && !cx.budget.take(ch)
    {
        let mut c = store.relaxed_conn().await?;
        outbox::mark_delivered(&mut c, a.id, cx.worker, cx.clock.now_ms()).await?;
        metrics::counter!("chatbridge_deliveries_total", "result" => "skipped").increment(1);
        return Ok(Step::Skipped);
    }
    let Some(key) = action.key().map(str::to_owned) else {
        // Ephemeral replies have no message to remember.
        let delivered = match &action {
            ChatAction::Ephemeral { target, user, text } => {
                channel.ephemeral(target, user, text).await
            }
            ChatAction::React {
                target,
                message_id,
                name,
                add,
            } => channel.react(target, message_id, name, *add).await,
            ChatAction::Post { .. } | ChatAction::Edit { .. } => return Ok(Step::Idle),
        };
        return finish(
            store,
            cx,
            a.id,
            &a.conversation_id,
            None,
            delivered.map(|()| String::new()),
        )
        .await;
    };
    // The claim read the map for its row's message (one round trip less a delivery, P2); a row
    // whose key is not its action's is looked up.
    let known = if a.coalesce_key.as_deref() == Some(key.as_str()) {
        a.mapped.clone()
    } else {
        let known = async {
            let mut c = store.relaxed_conn().await?;
            message_map::get(&mut c, &a.conversation_id, &key).await
        };
        match known.await {
            Ok(known) => known,
            Err(e) => return Err(give_back(store, cx, a.id, e).await),
        }
    };
    let (ChatAction::Post {
        target, message, ..
    }
    | ChatAction::Edit {
        target, message, ..
    }) = &action
    else {
        return Ok(Step::Idle);
    };
    let idempotency = idempotency_key(&a.conversation_id, &key);
    // The id the map already holds for this message: an edit of it need not write it again.
    let mapped = known.clone().filter(|id| !id.is_empty());
    let known = match known {
        // An earlier attempt to create it may have reached the platform before a crash: ask.
        Some(id) if id.is_empty() => match channel.find_posted(target, &idempotency).await {
            Ok(found) => {
                if found.is_some() {
                    tracing::info!(
                        action = a.id,
                        "found the message an interrupted attempt posted; not posting it again"
                    );
                }
                found
            }
            Err(e) => {
                return finish(store, cx, a.id, &a.conversation_id, Some(&key), Err(e)).await;
            }
        },
        Some(id) => Some(id),
        None => {
            // The intent, committed before the platform sees anything (D1/Q1).
            let intent = async {
                let mut c = store.write_conn().await?;
                message_map::put(&mut c, &a.conversation_id, &key, "", cx.clock.now_ms()).await
            };
            if let Err(e) = intent.await {
                return Err(give_back(store, cx, a.id, e).await);
            }
            None
        }
    };
    let started = std::time::Instant::now();
    let method = if known.is_some() { "edit" } else { "post" };
    let result = match known {
        Some(id) => channel.edit(target, &id, message).await.map(|()| id),
        None => channel.post_keyed(target, message, &idempotency).await,
    };
    metrics::histogram!("chatbridge_chat_api_seconds", "platform" => channel.platform(), "method" => method)
        .record(started.elapsed().as_secs_f64());
    if let Err(e) = &result {
        metrics::counter!("chatbridge_chat_api_errors_total", "platform" => channel.platform(), "method" => method, "error" => crate::metrics::delivery_error(e))
            .increment(1);
    }
    // A file the platform will never take (too large, an upload address we refuse): the message
    // still arrives, its file's text posted as messages instead.
    let result = match result {
        Err(DeliveryError::Permanent(why)) if method == "post" && message.file.is_some() => {
            tracing::warn!(action = a.id, error = %why, "a file could not be uploaded; posting its text as messages");
            post_instead_of_file(
                store,
                channel,
                cx,
                &a.conversation_id,
                &key,
                target,
                message,
                &why,
            )
            .await
        }
        r => r,
    };
    if let (Some(ch), Err(DeliveryError::RateLimited(d))) = (&progress_channel, &result) {
        // A progress edit never waits in line ahead of results: drop it and rest the channel.
        cx.budget.back_off(ch, *d);
        let mut c = store.relaxed_conn().await?;
        outbox::mark_delivered(&mut c, a.id, cx.worker, cx.clock.now_ms()).await?;
        metrics::counter!("chatbridge_deliveries_total", "result" => "skipped").increment(1);
        return Ok(Step::Skipped);
    }
    let remember = match (&mapped, &result) {
        (Some(held), Ok(id)) if held == id => None,
        _ => Some(key.as_str()),
    };
    finish(store, cx, a.id, &a.conversation_id, remember, result).await
}

/// A store error before the platform saw anything of the claimed action `id`: the claim is given
/// back — on the bookkeeping connections, which conversations holding every transaction connection
/// do not hold up — so the action goes out at the next step, not a lease (60 s) later. If that
/// fails too, the lease still frees it. Returns `e`.
async fn give_back(store: &Store, cx: &StepContext<'_>, id: i64, e: StoreError) -> StoreError {
    let released = async {
        let mut c = store.relaxed_conn().await?;
        outbox::release(&mut c, id, cx.worker).await
    };
    if let Err(r) = released.await {
        tracing::debug!(action = id, error = %r, "could not give a claim back; its lease frees it");
    }
    e
}

/// At most this many messages carry a file's text when its upload failed for good.
pub const FALLBACK_PARTS: usize = 10;

/// The messages that stand in for `message` when its file cannot be uploaded: a notice saying so (in
/// `message`'s place), then the file's text split as an answer is (at most [`FALLBACK_PARTS`]
/// messages; a non-Markdown file in a code block).
#[must_use]
pub fn fallback_messages(message: &Message, why: &str, part_len: usize) -> Vec<Message> {
    let Some(file) = &message.file else {
        return Vec::new();
    };
    let markdown = file.name.ends_with(".md");
    let text = if markdown {
        file.content.clone()
    } else {
        format!("```\n{}\n```", file.content.trim_end())
    };
    let parts = crate::channel::text::split_markdown(&text, part_len);
    let n = parts.len();
    let shown = n.min(FALLBACK_PARTS);
    let why = crate::channel::text::truncate_chars(why, 300);
    let follows = if shown < n {
        format!("; the first {shown} of its {n} parts follow (the rest is too long for messages)")
    } else if n == 1 {
        ", so it follows as a message".to_owned()
    } else {
        format!(", so it follows in {n} messages")
    };
    let mut notice = message.clone();
    notice.file = None;
    notice.tone = Tone::Warning;
    notice.markdown = false;
    notice.code = None;
    notice.body = Some(format!(
        "⚠️ The file {} ({}) could not be uploaded ({why}){follows}.",
        file.name,
        crate::conversation::files::human_bytes(file.content.len() as u64)
    ));
    let mut out = vec![notice];
    for (i, body) in parts.into_iter().take(shown).enumerate() {
        let title = if n == 1 {
            file.name.clone()
        } else {
            format!("{} ({}/{n})", file.name, i + 1)
        };
        let mut m = Message::text(Tone::Neutral, title);
        m.body = Some(body);
        m.markdown = true;
        out.push(m);
    }
    out
}

/// Posts [`fallback_messages`] in order, each under its own key (`<key>#<n>`) with the same
/// crash-safety as any post: its intent recorded first, and a post an interrupted attempt made found
/// again by its idempotency key rather than posted twice. Returns the notice's platform id.
#[allow(clippy::too_many_arguments)]
async fn post_instead_of_file(
    store: &Store,
    channel: &dyn Channel,
    cx: &StepContext<'_>,
    conversation_id: &str,
    key: &str,
    target: &Target,
    message: &Message,
    why: &str,
) -> Result<String, DeliveryError> {
    let store_error = |e: StoreError| DeliveryError::Temporary(format!("the database: {e}"));
    let mut first = None;
    for (i, m) in fallback_messages(message, why, channel.capabilities().answer_len)
        .iter()
        .enumerate()
    {
        let part_key = format!("{key}#{i}");
        let idempotency = idempotency_key(conversation_id, &part_key);
        let known = {
            let mut c = store.relaxed_conn().await.map_err(store_error)?;
            message_map::get(&mut c, conversation_id, &part_key)
                .await
                .map_err(store_error)?
        };
        let id = match known {
            Some(id) if !id.is_empty() => id,
            Some(_) => match channel.find_posted(target, &idempotency).await? {
                Some(id) => id,
                None => channel.post_keyed(target, m, &idempotency).await?,
            },
            None => {
                let mut c = store.write_conn().await.map_err(store_error)?;
                message_map::put(&mut c, conversation_id, &part_key, "", cx.clock.now_ms())
                    .await
                    .map_err(store_error)?;
                drop(c);
                channel.post_keyed(target, m, &idempotency).await?
            }
        };
        let mut c = store.relaxed_conn().await.map_err(store_error)?;
        message_map::put(&mut c, conversation_id, &part_key, &id, cx.clock.now_ms())
            .await
            .map_err(store_error)?;
        first.get_or_insert(id);
    }
    first.ok_or_else(|| DeliveryError::Permanent("nothing to post".into()))
}

/// The idempotency key of a logical message: stable across attempts and restarts, short enough for
/// every platform (Discord's nonce takes 25 characters).
#[must_use]
pub fn idempotency_key(conversation: &str, key: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{conversation}\0{key}").as_bytes());
    format!("cb{}", hex::encode(&digest[..11]))
}

/// How often recording a delivery is retried while the database is unreachable (about ten minutes).
const RECORD_RETRIES: u32 = 130;

async fn record_delivered(
    store: &Store,
    cx: &StepContext<'_>,
    id: i64,
    conversation_id: &str,
    key: Option<&str>,
    platform_id: &str,
) -> Result<(), StoreError> {
    // Relaxed: lost only with a database crash, and then the delivery is repeated harmlessly (the
    // post is found again by its idempotency key; edits and reactions repeat themselves).
    if let Some(next) = cx.next
        && store.backend() == Backend::Postgres
    {
        // The record and the next claim, one statement (P2).
        let mut c = store.relaxed_conn().await?;
        let floor = store.claim_floor(&mut c).await?;
        let delivered = outbox::Delivered {
            id,
            conversation_id,
            remember: key.map(|k| (k, platform_id)),
        };
        let after = outbox::delivered_and_claim_next(
            &mut c,
            delivered,
            cx.worker,
            cx.clock.now_ms(),
            LEASE,
            floor,
        )
        .await?;
        *next
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = match after {
            outbox::AfterDelivery {
                claimed: Some(a), ..
            } => Next::Deliver(a),
            // Its conversation's next row: the statement could not claim it; a claim will.
            outbox::AfterDelivery {
                more_in_its_conversation: true,
                ..
            } => Next::Claim,
            _ => Next::Rest,
        };
        return Ok(());
    }
    let Some(key) = key else {
        // Nothing to remember (a reaction, or an edit of a message the map already holds): the
        // mark alone, one statement.
        let mut c = store.relaxed_conn().await?;
        outbox::mark_delivered(&mut c, id, cx.worker, cx.clock.now_ms()).await?;
        return Ok(());
    };
    let mut tx = store.relaxed_begin().await?;
    message_map::put(
        tx.conn(),
        conversation_id,
        key,
        platform_id,
        cx.clock.now_ms(),
    )
    .await?;
    outbox::mark_delivered(tx.conn(), id, cx.worker, cx.clock.now_ms()).await?;
    tx.commit().await?;
    Ok(())
}

/// Records a delivery's outcome: the platform id and "delivered" together, or a retry.
async fn finish(
    store: &Store,
    cx: &StepContext<'_>,
    id: i64,
    conversation_id: &str,
    key: Option<&str>,
    result: Result<String, DeliveryError>,
) -> Result<Step, StoreError> {
    match result {
        Ok(platform_id) => {
            // The platform has it: recording that must not be given up while the database is
            // briefly away, or the action would be delivered again.
            let recorded = crate::store::retry_transient(
                RECORD_RETRIES,
                cx.give_up,
                |e| tracing::warn!(action = id, error = %e, "delivered, but the database is unavailable; recording it when it answers"),
                || record_delivered(store, cx, id, conversation_id, key, &platform_id),
            )
            .await;
            match recorded {
                Some(Ok(())) => {}
                Some(Err(e)) => return Err(e),
                None => {
                    tracing::warn!(
                        action = id,
                        "stopping before a delivery could be recorded; the next active replica finds it by its idempotency key"
                    );
                    return Ok(Step::Failed);
                }
            }
            metrics::counter!("chatbridge_deliveries_total", "result" => "ok").increment(1);
            Ok(Step::Delivered)
        }
        Err(e) => {
            let failure = match &e {
                DeliveryError::RateLimited(d) => Failure::RateLimited { retry_after: *d },
                DeliveryError::Temporary(m) | DeliveryError::Permanent(m) => Failure::Error(m),
            };
            let policy = match e {
                DeliveryError::Permanent(_) => RetryPolicy {
                    max_attempts: 0,
                    ..*cx.policy
                },
                _ => *cx.policy,
            };
            let mut c = store.relaxed_conn().await?;
            match outbox::retry(&mut c, id, cx.worker, &failure, &policy, cx.clock.now_ms()).await?
            {
                Retry::DeadLettered => {
                    metrics::counter!("chatbridge_deliveries_total", "result" => "dead_lettered")
                        .increment(1);
                    tracing::error!(action = id, conversation = %conversation_id, error = %e, "chat action dead-lettered")
                }
                Retry::At(at) => {
                    let result = if matches!(failure, Failure::RateLimited { .. }) {
                        "rate_limited"
                    } else {
                        "retried"
                    };
                    metrics::counter!("chatbridge_deliveries_total", "result" => result)
                        .increment(1);
                    tracing::warn!(action = id, error = %e, retry_at = at, "chat action will be retried")
                }
            }
            Ok(Step::Failed)
        }
    }
}

/// Delivers until `stop`, waking on `wake` or every 250 ms. On stop it drains what is due (bounded by
/// `drain`), so SIGTERM does not lose posted results; at `drain` after `stop` every wait ends (a
/// delivery whose recording waits for the database is left to the next replica, which finds it by its
/// idempotency key).
#[allow(clippy::too_many_arguments)]
pub async fn run(
    store: Store,
    channel: Arc<dyn Channel>,
    wake: Arc<Notify>,
    stop: CancellationToken,
    drain: Duration,
    policy: RetryPolicy,
    workers: usize,
    clock: Arc<dyn Clock>,
) {
    // Several workers deliver in parallel across conversations (each claim is the head of one
    // conversation's queue, so order within a conversation holds); one delivery costs a few commits,
    // so one worker alone is bound by the database's commit latency.
    let budget = Arc::new(ProgressBudget::new(Duration::from_secs(3)));
    let give_up = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..workers.max(1) {
        tasks.spawn(worker_loop(
            Worker {
                store: store.clone(),
                channel: channel.clone(),
                policy,
                budget: budget.clone(),
                clock: clock.clone(),
                give_up: give_up.clone(),
                queued: AtomicBool::new(false),
                next: std::sync::Mutex::default(),
            },
            wake.clone(),
            stop.clone(),
            drain,
        ));
    }
    let deadline = async {
        stop.cancelled().await;
        tokio::time::sleep(drain).await;
    };
    tokio::select! {
        () = async { while tasks.join_next().await.is_some() {} } => return,
        () = deadline => give_up.cancel(),
    }
    while tasks.join_next().await.is_some() {}
}

/// One worker's share of [`run`].
struct Worker {
    store: Store,
    channel: Arc<dyn Channel>,
    policy: RetryPolicy,
    budget: Arc<ProgressBudget>,
    clock: Arc<dyn Clock>,
    give_up: CancellationToken,
    /// Whether its last claim found the rows queueing ([`StepContext::queued`]).
    queued: AtomicBool,
    /// The claim its last delivery's record made ([`StepContext::next`]).
    next: std::sync::Mutex<Next>,
}

impl Worker {
    async fn step(&self, name: &str) -> Result<Step, StoreError> {
        let cx = StepContext {
            worker: name,
            policy: &self.policy,
            budget: &self.budget,
            clock: self.clock.as_ref(),
            give_up: &self.give_up,
            queued: Some(&self.queued),
            next: Some(&self.next),
        };
        deliver_step(&self.store, self.channel.as_ref(), &cx).await
    }
}

/// Every worker's failed steps (each worker retries on its own while the database is away): one
/// line every few seconds, with how many were left out.
static STEP_FAILED: crate::log_budget::Repeats = crate::log_budget::Repeats::new();

async fn worker_loop(w: Worker, wake: Arc<Notify>, stop: CancellationToken, drain: Duration) {
    let name = format!("worker-{}", uuid::Uuid::new_v4().simple());
    loop {
        match w.step(&name).await {
            Ok(Step::Delivered | Step::Failed | Step::Skipped) => {
                // Rows queueing: let a resting sibling take from them too. A row claimed as it was
                // queued means none wait; the worker looks again itself, and a sibling woken then
                // mostly found nothing (P2: at 10,000 sessions two claims in three came back empty).
                if w.queued.load(Ordering::Relaxed) {
                    wake.notify_one();
                }
                continue;
            }
            Ok(Step::Idle) => {}
            Err(e) => {
                if let Some(left_out) = STEP_FAILED.due(std::time::Instant::now()) {
                    tracing::warn!(error = %e, left_out, "outbox step failed; retrying");
                }
            }
        }
        tokio::select! {
            () = stop.cancelled() => break,
            () = wake.notified() => {}
            () = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
    }
    // Draining (SIGTERM): deliver what is pending, waiting out retry delays and rate limits, until
    // nothing is left or `drain` has passed; what is left stays in the store for the next replica.
    let until = tokio::time::Instant::now() + drain;
    while tokio::time::Instant::now() < until && !w.give_up.is_cancelled() {
        match w.step(&name).await {
            Ok(Step::Delivered | Step::Failed | Step::Skipped) => continue,
            Ok(Step::Idle) if drained_at(&w.store, w.clock.now_ms()).await.unwrap_or(true) => break,
            Ok(Step::Idle) => {}
            Err(e) => {
                if let Some(left_out) = STEP_FAILED.due(std::time::Instant::now()) {
                    tracing::warn!(error = %e, left_out, "outbox step failed while draining");
                }
            }
        }
        let next = tokio::time::Instant::now() + Duration::from_millis(100);
        tokio::select! {
            () = w.give_up.cancelled() => break,
            () = tokio::time::sleep_until(next.min(until)) => {}
        }
    }
    // A claim the last delivery's record made and no step took: given back, not held for its lease.
    let left = std::mem::take(
        &mut *w
            .next
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    if let Next::Deliver(a) = left {
        let released = async {
            let mut c = w.store.relaxed_conn().await?;
            outbox::release(&mut c, a.id, &name).await
        };
        if let Err(e) = released.await {
            tracing::debug!(action = a.id, error = %e, "could not give a claim back; its lease frees it");
        }
    }
}

/// Whether nothing is left to deliver right now.
///
/// # Errors
/// Store errors.
pub async fn drained(store: &Store) -> Result<bool, StoreError> {
    drained_at(store, now_ms()).await
}

/// Whether nothing is left to deliver as of `now_ms`.
///
/// # Errors
/// Store errors.
pub async fn drained_at(store: &Store, now_ms: i64) -> Result<bool, StoreError> {
    let mut c = store.conn().await?;
    Ok(outbox::stats(&mut c, now_ms).await?.pending == 0)
}
