//! The scheduler: runs the threads' scheduled prompts (`/every`, `/at`), on the active replica only
//! (it is started when a replica becomes active, D5, and stops with it). Each run is a normal turn
//! in its thread, sent as the person who scheduled it: it goes through the inbox with the event id
//! `schedule-<id>-<due time>`, so a run is never taken twice (D2) — not after a crash between
//! recording it and moving the schedule on, not by two replicas. A schedule whose runs were missed
//! while no replica was active runs once, then continues on its interval.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::channel::{Inbound, InboundKind};
use crate::clock::Clock;
use crate::conversation::schedule::next_run;
use crate::core::Core;
use crate::store::{self, conversations, schedules};

/// Schedules taken per check at most (the rest wait for the next check).
const BATCH: i64 = 100;

/// Looks for due schedules every `every` (the first look one interval after start) until `stop`.
pub async fn run(core: Arc<Core>, clock: Arc<dyn Clock>, every: Duration, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        if let Err(e) = run_due(&core, clock.as_ref()).await {
            tracing::warn!(error = %e, "could not run due schedules; trying again");
        }
    }
}

/// Runs every schedule due at the clock's now, once each; how many ran.
///
/// # Errors
/// Store errors (what was not run stays due).
pub async fn run_due(core: &Arc<Core>, clock: &dyn Clock) -> Result<usize, store::StoreError> {
    let now = clock.now_ms();
    let due = {
        let mut c = core.store.conn().await?;
        schedules::due(&mut c, core.project(), now, BATCH).await?
    };
    let mut ran = 0;
    for s in due {
        let conv = {
            let mut c = core.store.conn().await?;
            conversations::get(&mut c, &s.conversation_id).await?
        };
        let Some(conv) = conv else {
            continue;
        };
        // Each project's core runs its own conversations' schedules (one moved meanwhile is
        // its new project's); a removed project's fire on no daemon.
        if !core.serves(&conv.project) {
            continue;
        }
        let run = Inbound {
            event_id: format!("schedule-{}-{}", s.id, s.next_run_at),
            platform: conv.platform.clone(),
            target: Core::target(&conv),
            user: s.created_by.clone(),
            message_id: None,
            // Addressed to the bot (its thread exists): a run is a prompt also where only
            // mentions are (`access.require_mention_in_threads`).
            opens: true,
            kind: InboundKind::Message(s.prompt.clone()),
        };
        // Recorded first (D2): a crash before the schedule moves on finds the same run recorded.
        core.accept(run).await?;
        let mut c = core.store.write_conn().await?;
        match s.every_ms {
            Some(every) => {
                schedules::advance(
                    &mut c,
                    &s.id,
                    s.next_run_at,
                    next_run(s.next_run_at, every, now),
                )
                .await?;
            }
            None => {
                schedules::remove(&mut c, &s.conversation_id, &s.id).await?;
            }
        }
        tracing::info!(conversation = %s.conversation_id, schedule = %s.id, "scheduled prompt run");
        ran += 1;
    }
    Ok(ran)
}
