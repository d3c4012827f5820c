//! The idle sweep: conversations with their own worktree ([`crate::worktree`]) that have been idle
//! longer than `workspace.retain` get what `/done` does — the worktree removed (never one with
//! uncommitted changes: the thread is told once, and asked again after another `retain`), the
//! branch kept, the conversation closed. Only the active replica sweeps (it is started when a
//! replica becomes active, D5, and stops with it); each conversation is handed to its own runner,
//! so a sweep never races a turn.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::core::{ConvMsg, Core, lock};
use crate::store::{self, conversations};

/// Conversations taken per sweep at most (the rest wait for the next).
const BATCH: i64 = 100;

/// Sweeps every `every` (the first one interval after start) until `stop`.
pub async fn run(core: Arc<Core>, clock: Arc<dyn Clock>, every: Duration, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        if let Err(e) = sweep(&core, clock.as_ref()).await {
            tracing::warn!(error = %e, "could not look for idle threads' worktrees; trying again");
        }
    }
}

/// Hands each conversation idle past `workspace.retain` at the clock's now to its runner, which
/// removes its worktree unless it is busy, was active since, or has uncommitted changes. Returns
/// how many were handed on (one its runner has not answered yet is not handed again);
/// [`Core::wait_idle`] returns once they are handled.
///
/// # Errors
/// Store errors.
pub async fn sweep(core: &Arc<Core>, clock: &dyn Clock) -> Result<usize, store::StoreError> {
    let Some(w) = &core.cfg.worktrees else {
        return Ok(0);
    };
    let retain = i64::try_from(core.cfg.retain.as_millis()).unwrap_or(i64::MAX);
    let before = clock.now_ms().saturating_sub(retain);
    let idle = {
        let mut c = core.store.conn().await?;
        conversations::idle_under(&mut c, &w.prefix(), before, BATCH).await?
    };
    let mut n = 0;
    for conv in idle {
        // Handed on once: not again until its runner has answered (a busy runner would otherwise
        // get it at every sweep, and answer each).
        if !lock(&core.expiring).insert(conv.id.clone()) {
            continue;
        }
        n += 1;
        // Busy until its runner has handled it.
        core.busy_add(1);
        if !core.send_to(&conv, ConvMsg::Expire(before)).await {
            lock(&core.expiring).remove(&conv.id);
            core.busy_add(-1);
        }
    }
    if n > 0 {
        tracing::info!(
            conversations = n,
            "idle threads' worktrees handed on for removal"
        );
    }
    Ok(n)
}
