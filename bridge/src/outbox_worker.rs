//! The outbox worker (D1): delivers chat actions in order per conversation through the channel,
//! retrying with backoff, honouring rate limits, dead-lettering what cannot be delivered.
//!
//! It never holds a transaction across a network call: claim (short), deliver (network), then record
//! the platform message id and mark delivered together (short).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::channel::{Channel, ChatAction, DeliveryError};
use crate::store::outbox::{self, Failure, Retry, RetryPolicy};
use crate::store::{Store, StoreError, message_map, now_ms};

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
    let claimed = {
        let mut c = store.relaxed_conn().await?;
        outbox::claim_next(&mut c, worker, now_ms(), Duration::from_secs(60)).await?
    };
    let Some(a) = claimed else {
        return Ok(Step::Idle);
    };
    let action: ChatAction = match serde_json::from_str(&a.action) {
        Ok(action) => action,
        Err(e) => {
            let mut c = store.relaxed_conn().await?;
            let dead = RetryPolicy {
                max_attempts: 0,
                ..*policy
            };
            outbox::retry(
                &mut c,
                a.id,
                worker,
                &Failure::Error(&format!("undecodable action: {e}")),
                &dead,
                now_ms(),
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
        && !budget.take(ch)
    {
        let mut c = store.relaxed_conn().await?;
        outbox::mark_delivered(&mut c, a.id, worker, now_ms()).await?;
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
            worker,
            policy,
            a.id,
            &a.conversation_id,
            None,
            delivered.map(|()| String::new()),
        )
        .await;
    };
    let known = {
        let mut c = store.relaxed_conn().await?;
        message_map::get(&mut c, &a.conversation_id, &key).await?
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
                return finish(
                    store,
                    worker,
                    policy,
                    a.id,
                    &a.conversation_id,
                    Some(&key),
                    Err(e),
                )
                .await;
            }
        },
        Some(id) => Some(id),
        None => {
            // The intent, committed before the platform sees anything (D1/Q1).
            let mut c = store.conn().await?;
            message_map::put(&mut c, &a.conversation_id, &key, "", now_ms()).await?;
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
    if let (Some(ch), Err(DeliveryError::RateLimited(d))) = (&progress_channel, &result) {
        // A progress edit never waits in line ahead of results: drop it and rest the channel.
        budget.back_off(ch, *d);
        let mut c = store.relaxed_conn().await?;
        outbox::mark_delivered(&mut c, a.id, worker, now_ms()).await?;
        metrics::counter!("chatbridge_deliveries_total", "result" => "skipped").increment(1);
        return Ok(Step::Skipped);
    }
    finish(
        store,
        worker,
        policy,
        a.id,
        &a.conversation_id,
        Some(&key),
        result,
    )
    .await
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
    worker: &str,
    id: i64,
    conversation_id: &str,
    key: Option<&str>,
    platform_id: &str,
) -> Result<(), StoreError> {
    // Relaxed: lost only with a database crash, and then the delivery is repeated harmlessly (the
    // post is found again by its idempotency key; edits and reactions repeat themselves).
    let mut tx = store.relaxed_begin().await?;
    if let Some(key) = key {
        message_map::put(tx.conn(), conversation_id, key, platform_id, now_ms()).await?;
    }
    outbox::mark_delivered(tx.conn(), id, worker, now_ms()).await?;
    tx.commit().await?;
    Ok(())
}

/// Records a delivery's outcome: the platform id and "delivered" together, or a retry.
async fn finish(
    store: &Store,
    worker: &str,
    policy: &RetryPolicy,
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
                &CancellationToken::new(),
                |e| tracing::warn!(action = id, error = %e, "delivered, but the database is unavailable; recording it when it answers"),
                || record_delivered(store, worker, id, conversation_id, key, &platform_id),
            )
            .await;
            if let Some(Err(e)) = recorded {
                return Err(e);
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
                    ..*policy
                },
                _ => *policy,
            };
            let mut c = store.relaxed_conn().await?;
            match outbox::retry(&mut c, id, worker, &failure, &policy, now_ms()).await? {
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
/// `drain`), so SIGTERM does not lose posted results.
pub async fn run(
    store: Store,
    channel: Arc<dyn Channel>,
    wake: Arc<Notify>,
    stop: CancellationToken,
    drain: Duration,
    policy: RetryPolicy,
    workers: usize,
) {
    // Several workers deliver in parallel across conversations (each claim is the head of one
    // conversation's queue, so order within a conversation holds); one delivery costs a few commits,
    // so one worker alone is bound by the database's commit latency.
    let budget = Arc::new(ProgressBudget::new(Duration::from_secs(3)));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..workers.max(1) {
        tasks.spawn(worker_loop(
            store.clone(),
            channel.clone(),
            wake.clone(),
            stop.clone(),
            drain,
            policy,
            budget.clone(),
        ));
    }
    while tasks.join_next().await.is_some() {}
}

async fn worker_loop(
    store: Store,
    channel: Arc<dyn Channel>,
    wake: Arc<Notify>,
    stop: CancellationToken,
    drain: Duration,
    policy: RetryPolicy,
    budget: Arc<ProgressBudget>,
) {
    let worker = format!("worker-{}", uuid::Uuid::new_v4().simple());
    loop {
        match deliver_once_budgeted(&store, channel.as_ref(), &worker, &policy, &budget).await {
            Ok(Step::Delivered | Step::Failed | Step::Skipped) => {
                // More may be due: let a resting sibling look too.
                wake.notify_one();
                continue;
            }
            Ok(Step::Idle) => {}
            Err(e) => tracing::warn!(error = %e, "outbox step failed; retrying"),
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
    while tokio::time::Instant::now() < until {
        match deliver_once_budgeted(&store, channel.as_ref(), &worker, &policy, &budget).await {
            Ok(Step::Delivered | Step::Failed | Step::Skipped) => continue,
            Ok(Step::Idle) if drained(&store).await.unwrap_or(true) => break,
            Ok(Step::Idle) => {}
            Err(e) => tracing::warn!(error = %e, "outbox step failed while draining"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether nothing is left to deliver right now.
///
/// # Errors
/// Store errors.
pub async fn drained(store: &Store) -> Result<bool, StoreError> {
    let mut c = store.conn().await?;
    Ok(outbox::stats(&mut c, now_ms()).await?.pending == 0)
}
