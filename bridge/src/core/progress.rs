//! Heartbeat counts and progress written in batches, off the conversations' path (P2).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::store::{self, Store, now_ms};

/// Heartbeat counts and the latest progress of one tool call, for the progress writer.
#[derive(Debug)]
pub(crate) struct ProgressWrite {
    pub conversation: String,
    pub call: String,
    pub heartbeats: i64,
    pub progress: Option<String>,
}

/// How many progress writes wait for the writer at most; past it an actor keeps its counts for the
/// next flush.
pub(super) const PROGRESS_QUEUE: usize = 4096;

/// How many progress writes go into one statement at most.
const PROGRESS_BATCH: usize = 256;

/// How long the writer gathers writes after the first of a batch. Counts are bookkeeping (the
/// thread shows none of them), so 50 ms later costs nothing; at 10,000 running commands it turns
/// thousands of one-row statements a second into tens of batched ones.
const PROGRESS_GATHER: std::time::Duration = std::time::Duration::from_millis(50);

/// Writes heartbeat counts in batches, off the actors' path: a conversation never waits for the
/// database because a silent command is alive (P2). On the bookkeeping connections (a count lost to a
/// database crash costs nothing but the count). Ends after `stop`, writing what is queued.
pub(super) async fn progress_writer(
    store: Store,
    mut rx: mpsc::Receiver<ProgressWrite>,
    pending: Arc<AtomicUsize>,
    stop: CancellationToken,
) {
    loop {
        let first = tokio::select! {
            w = rx.recv() => w,
            () = stop.cancelled() => {
                rx.close();
                rx.recv().await
            }
        };
        let Some(first) = first else { return };
        let mut batch = vec![first];
        // What else arrives within PROGRESS_GATHER goes into the same statement: the conversations
        // flush at their own moments, so without the wait nearly every batch held one count.
        let until = tokio::time::Instant::now() + PROGRESS_GATHER;
        while batch.len() < PROGRESS_BATCH {
            match tokio::time::timeout_at(until, rx.recv()).await {
                Ok(Some(w)) => batch.push(w),
                Ok(None) | Err(_) => break,
            }
        }
        match store::retry_transient(20, &stop, |_| {}, || write_progress(&store, &batch)).await {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                tracing::warn!(error = %e, writes = batch.len(), "heartbeat counts not written");
            }
            None => tracing::warn!(
                writes = batch.len(),
                "heartbeat counts not written: stopping"
            ),
        }
        pending.fetch_sub(batch.len(), Ordering::SeqCst);
    }
}

pub(crate) async fn write_progress(
    store: &Store,
    batch: &[ProgressWrite],
) -> Result<(), store::StoreError> {
    let rows: Vec<store::tool_calls::ProgressRow<'_>> = batch
        .iter()
        .map(|w| store::tool_calls::ProgressRow {
            conversation: &w.conversation,
            call_id: &w.call,
            heartbeats: w.heartbeats,
            last_progress: w.progress.as_deref(),
        })
        .collect();
    let mut c = store.relaxed_conn().await?;
    store::tool_calls::progress_many(&mut c, &rows, now_ms()).await
}
