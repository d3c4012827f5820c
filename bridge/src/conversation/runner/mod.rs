//! The one place a conversation touches the world: it reads and writes the store, calls the
//! daemon, and feeds what comes back (messages, daemon events, the prompt's completion, timers) to
//! the [`State`](super::state::State) in order. Every chat action is written to the outbox in the
//! transaction of the state change that caused it (D1).
//!
//! - `mod.rs`: the loop (stoppable: it selects on the core's shutdown token) and letting go.
//! - `apply.rs`: an event through `State::handle`, then each effect carried out.
//! - `write.rs`: transactions, notices, refusals.
//! - `inbound.rs`: messages, commands, prompts, sessions.
//! - `daemon.rs`: daemon events, tool calls, progress, approvals.
//! - `schedules.rs`: `/every`, `/at`, `/schedules`, `/unschedule`.
//! - `checkout.rs`: the thread's own worktree — `/diff`, `/done`, the idle sweep.
//! - `end.rs`: the turn's end, the prompt's completion, resume after a restart, timers.

mod apply;
mod checkout;
mod commands;
mod daemon;
mod end;
mod inbound;
mod schedules;
mod write;

use std::sync::Arc;

use daemon_client::{DaemonEvent, SessionId};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::effects::Effect;
use super::state::State;
use crate::channel::Target;
use crate::core::live::{LiveTool, LiveTurn};
use crate::core::{AfterFailure, ConvMsg, Core, lock};
use crate::store::Result;
use crate::store::conversations::Conversation;

/// One conversation's runner: its state and what it needs to act on it.
pub(crate) struct Runner {
    core: Arc<Core>,
    conv: Conversation,
    target: Target,
    state: State,
    tx: mpsc::Sender<ConvMsg>,
    /// This runner's token on the core's live board.
    live: u64,
    /// Where a new session of this thread works: its own worktree, once made
    /// (`workspace.isolation = "worktree"`); `None`: the core's directory.
    checkout: Option<std::path::PathBuf>,
    /// A turn left open by the previous run, taken back while the daemon was unreachable: its
    /// session is loaded (or the turn closed as interrupted) once the daemon is reached (L7, D3).
    resume_pending: bool,
    /// Failed loads of that turn's session in a row (they are tried again with a growing pause).
    resume_attempts: u32,
    /// Whether the open transaction queued a chat action: its commit then wakes an outbox worker
    /// (a commit that queued nothing woke one to find nothing — P2).
    queued: std::sync::atomic::AtomicBool,
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.core.live().publish(self.live, &self.conv.id, None);
    }
}

/// How much of a prompt or a title the live view gets (it shows the start of one line).
const LIVE_TEXT: usize = 200;

/// How many times a step is retried while the database is unreachable (100 ms doubling to 5 s,
/// with jitter: about eight minutes).
const STORE_RETRIES: u32 = 130;

/// A step that fails because the database is unreachable is taken again once it answers, so an
/// outage delays messages and results instead of losing them (each step commits in one
/// transaction, and applying a result twice is refused by the store). Gives up when the core stops.
macro_rules! retrying_step {
    ($conversation:expr, $stop:expr, $step:expr) => {{
        let mut retry: Option<$crate::conversation::runner::StepRetry<'_>> = None;
        loop {
            match $step.await {
                Err(e)
                    if e.is_transient()
                        && retry.as_ref().map_or(0, |r| r.attempts)
                            < $crate::conversation::runner::STORE_RETRIES
                        && !$stop.is_cancelled() =>
                {
                    let attempt = retry
                        .get_or_insert_with(|| {
                            $crate::conversation::runner::StepRetry::new(&$conversation)
                        })
                        .failed(&e)
                        .0;
                    let pause = daemon_client::client::backoff_delay(
                        ::std::time::Duration::from_millis(100),
                        ::std::time::Duration::from_secs(5),
                        attempt,
                    );
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        () = $stop.cancelled() => break Err(e),
                    }
                }
                r => {
                    if let Some(retry) = &retry {
                        match &r {
                            Ok(_) => retry.went_through(),
                            Err(e) if e.is_transient() && !$stop.is_cancelled() => retry.gave_up(e),
                            Err(_) => {}
                        }
                    }
                    break r;
                }
            }
        }
    }};
}

/// How often a step that keeps failing for the moment says so again in the log.
const STILL_FAILING_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// A conversation's step that the database failed for the moment (unreachable, a connection cut,
/// a lock or statement timeout) and that is being retried ([`retrying_step`]): what on-call sees of
/// it. The log says so at the first failure, again every [`STILL_FAILING_EVERY`] while it lasts
/// (with the attempts and the time so far), and once the step went through — or, at ERROR, that it
/// gave up after [`STORE_RETRIES`] attempts; the metrics count the retries
/// (`chatbridge_store_step_retries_total`), the steps waiting right now
/// (`chatbridge_store_steps_waiting`: up from the first failure until the step went through, gave up
/// or was stopped) and the steps given up (`chatbridge_store_steps_given_up_total`).
pub(crate) struct StepRetry<'a> {
    conversation: &'a str,
    /// Failures so far.
    pub(crate) attempts: u32,
    since: Instant,
    said: Instant,
}

impl<'a> StepRetry<'a> {
    pub(crate) fn new(conversation: &'a str) -> Self {
        metrics::gauge!("chatbridge_store_steps_waiting").increment(1.0);
        let now = Instant::now();
        Self {
            conversation,
            attempts: 0,
            since: now,
            said: now,
        }
    }

    /// One more failure: the attempt's number (1 for the first), and what the log said of it.
    pub(crate) fn failed(&mut self, e: &crate::store::StoreError) -> (u32, Said) {
        self.attempts += 1;
        metrics::counter!("chatbridge_store_step_retries_total").increment(1);
        let now = Instant::now();
        let said = if self.attempts == 1 {
            tracing::warn!(conversation = %self.conversation, code = %e.code(), error = %e, "the database failed this step for the moment; retrying it until it goes through");
            Said::First
        } else if now.duration_since(self.said) >= STILL_FAILING_EVERY {
            self.said = now;
            tracing::warn!(
                conversation = %self.conversation,
                code = %e.code(),
                error = %e,
                attempts = self.attempts,
                waiting_secs = now.duration_since(self.since).as_secs(),
                "this step still fails for the moment; still retrying it"
            );
            Said::Still
        } else {
            Said::Nothing
        };
        (self.attempts, said)
    }

    /// The step went through after its failures.
    pub(crate) fn went_through(&self) {
        tracing::info!(
            conversation = %self.conversation,
            retries = self.attempts,
            waited_ms = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX),
            "the step the database failed went through; the conversation goes on"
        );
    }

    /// The step failed for the moment once more with its attempts spent: given up.
    pub(crate) fn gave_up(&self, e: &crate::store::StoreError) {
        metrics::counter!("chatbridge_store_steps_given_up_total").increment(1);
        tracing::error!(
            conversation = %self.conversation,
            code = %e.code(),
            error = %e,
            retries = self.attempts,
            waited_secs = self.since.elapsed().as_secs(),
            "the database failed this step for too long; gave up on it: what it carried (a message, a command's result, a turn's end) may not be shown"
        );
    }
}

/// What the log said of a step's failure ([`StepRetry::failed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Said {
    /// The first failure's line.
    First,
    /// The line that it still fails, every [`STILL_FAILING_EVERY`].
    Still,
    /// Nothing: said not long ago.
    Nothing,
}

impl Drop for StepRetry<'_> {
    fn drop(&mut self) {
        metrics::gauge!("chatbridge_store_steps_waiting").decrement(1.0);
    }
}

use retrying_step as retrying;

/// Runs the conversation until its channel closes, it lets go while idle, or the core stops.
pub(crate) async fn run(
    core: Arc<Core>,
    conv: Conversation,
    tx: mpsc::Sender<ConvMsg>,
    mut rx: mpsc::Receiver<ConvMsg>,
) {
    let session = conv
        .daemon_session
        .as_deref()
        .and_then(|s| SessionId::parse(s).ok());
    let target = Core::target(&conv);
    let owner = conv.started_by.clone();
    let stop = core.shutdown.clone();
    let daemon_down = !core
        .daemon_connected
        .load(std::sync::atomic::Ordering::SeqCst);
    let live = core.live().runner();
    let mut r = Runner {
        live,
        core,
        conv,
        target,
        state: State {
            owner,
            daemon_down,
            ..State::new(session)
        },
        tx,
        checkout: None,
        resume_pending: false,
        resume_attempts: 0,
        queued: std::sync::atomic::AtomicBool::new(false),
    };
    r.load_unfinished().await;
    let mut active = Instant::now();
    // The live board: when it was last told, and when it is due to be told of heartbeats since.
    let mut published = Instant::now();
    let mut live_due: Option<Instant> = None;
    // The state's next deadline, armed on one timer that is moved only when the deadline comes
    // earlier: a heartbeat moves the stall deadline later each time, and that is found when the
    // timer fires early instead of re-registering a timer per message.
    let mut timer = std::pin::pin!(tokio::time::sleep(std::time::Duration::ZERO));
    let mut armed: Option<Instant> = None;
    let mut stopped = std::pin::pin!(stop.cancelled());
    loop {
        let deadline = r.state.next_deadline(&r.core.cfg);
        if let Some(d) = deadline
            && armed.is_none_or(|a| d < a)
        {
            timer.as_mut().reset(d);
            armed = Some(d);
        }
        let idle = r.state.is_idle();
        let msg = tokio::select! {
            biased;
            () = &mut stopped => {
                // Late work still gathering is written to the outbox, not lost with the process.
                if let Some(text) = r.state.late.take_now()
                    && let Err(e) = Box::pin(r.post_late(&text)).await
                {
                    tracing::warn!(conversation = %r.conv.id, error = %e, "late work not written at shutdown");
                }
                if let Err(e) = Box::pin(r.write_progress_now()).await {
                    tracing::warn!(conversation = %r.conv.id, error = %e, "heartbeat counts not written at shutdown");
                }
                return;
            }
            m = rx.recv() => m,
            () = &mut timer, if armed.is_some() => {
                armed = None;
                if deadline.is_none_or(|d| d > Instant::now()) {
                    // Fired early (the deadline moved on, or went): armed again above.
                    continue;
                }
                if let Err(e) = Box::pin(r.on_timer()).await {
                    tracing::error!(conversation = %r.conv.id, error = %e, "timer handling failed");
                }
                r.publish_live();
                (published, live_due) = (Instant::now(), None);
                active = Instant::now();
                continue;
            }
            () = sleep_until(live_due) => {
                r.publish_live();
                (published, live_due) = (Instant::now(), None);
                continue;
            }
            () = tokio::time::sleep_until(active + r.core.cfg.actor_idle), if idle => {
                Box::pin(r.retire(rx)).await;
                return;
            }
        };
        active = Instant::now();
        let Some(msg) = msg else { break };
        // What is already waiting (a burst of heartbeats) is taken without going back through the
        // timers: one wake-up for the burst.
        let mut beats_only = true;
        let mut next = Some(msg);
        while let Some(msg) = next.take() {
            beats_only &= is_heartbeat(&msg);
            match msg {
                // A command's turn ends with its result: when the turn's end is already waiting
                // behind it, the two are written together (one commit).
                ConvMsg::Daemon(first) if matches!(*first, DaemonEvent::ToolFinished { .. }) => {
                    match rx.try_recv() {
                        Ok(ConvMsg::Daemon(then))
                            if matches!(*then, DaemonEvent::TurnEnded { .. }) =>
                        {
                            Box::pin(r.step_pair(*first, *then)).await;
                        }
                        Ok(other) => {
                            r.step(ConvMsg::Daemon(first)).await;
                            next = Some(other);
                            continue;
                        }
                        Err(_) => r.step(ConvMsg::Daemon(first)).await,
                    }
                }
                msg => r.step(msg).await,
            }
            if stop.is_cancelled() {
                break;
            }
            next = rx.try_recv().ok();
        }
        // The board is told at once of anything but heartbeats; heartbeats (a count and a time) at
        // most every LIVE_HEARTBEATS_EVERY, so a conversation flooded with them does not rebuild
        // its snapshot for each.
        let now = Instant::now();
        if !beats_only || now >= published + LIVE_HEARTBEATS_EVERY {
            r.publish_live();
            (published, live_due) = (now, None);
        } else {
            live_due.get_or_insert(published + LIVE_HEARTBEATS_EVERY);
        }
    }
}

/// How often the live board hears of a conversation's heartbeats at most.
const LIVE_HEARTBEATS_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

fn is_heartbeat(msg: &ConvMsg) -> bool {
    matches!(msg, ConvMsg::Daemon(e) if matches!(**e, DaemonEvent::ToolProgress { .. }))
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Runner {
    /// One message for the conversation, carried out. A heartbeat is taken inline; anything else
    /// runs in a future of its own, boxed: the general step's future is some 10 KB, and held
    /// inline it would make every idle conversation's task that large (10,000 sessions: 100 MB).
    async fn step(&mut self, msg: ConvMsg) {
        let result = match msg {
            ConvMsg::Daemon(e) => self.on_daemon_msg(*e).await,
            msg => Box::pin(self.step_other(msg)).await,
        };
        self.step_done(result);
    }

    /// A step's outcome: an error logged (the step itself retried what the database's absence
    /// let it).
    fn step_done(&self, result: crate::store::Result<()>) {
        if let Err(e) = result {
            if self.core.shutdown.is_cancelled() && e.is_transient() {
                // Stopping while the database is away: every conversation's pending step ends
                // so. Nothing is lost — the inbox keeps the event and the next start takes the
                // open turn back from the store and the agent — and it is not an error of this
                // conversation.
                tracing::info!(conversation = %self.conv.id, error = %e, "stopping with the database unavailable; this step is taken up again at the next start");
            } else {
                tracing::error!(conversation = %self.conv.id, error = %e, "conversation step failed");
            }
        }
    }

    /// A tool's result and the turn's end that was waiting behind it: each decided once, in
    /// order, and — when the result finishes a call of the turn that ends — written in one
    /// transaction ([`Runner::finish_and_end`]); otherwise carried out one after the other, as two
    /// steps would be.
    async fn step_pair(&mut self, first: DaemonEvent, then: DaemonEvent) {
        let first = self.decide_daemon_event(first);
        let then = self.decide_daemon_event(then);
        if let (Some([Effect::FinishTool(call, result)]), Some([Effect::EndTurn(stop)])) =
            (first.as_deref(), then.as_deref())
        {
            let (call, result, stop) = (call.clone(), result.clone(), stop.clone());
            if let Some(done) = Box::pin(self.finish_and_end(&call, &result, &stop)).await {
                let done = match done {
                    Err(e) if e.is_transient() => {
                        // The ending is written; what follows it is retried as `end_turn`'s retry
                        // does (it finds the turn ended and starts the next queued prompt).
                        let (id, stop_all) = (self.conv.id.clone(), self.core.shutdown.clone());
                        retrying!(id, stop_all, self.end_turn(Some(stop.clone()), None))
                    }
                    done => done,
                };
                self.step_done(done);
                return;
            }
        }
        for effects in [first, then].into_iter().flatten() {
            let done = Box::pin(self.apply_daemon_effects(effects)).await;
            self.step_done(done);
        }
    }

    /// A daemon event: decided inline (a heartbeat's step writes nothing), its effects applied
    /// boxed, so the task's future stays the size of the state it holds.
    async fn on_daemon_msg(&mut self, e: DaemonEvent) -> crate::store::Result<()> {
        match self.decide_daemon_event(e) {
            None => Ok(()),
            Some(effects) => Box::pin(self.apply_daemon_effects(effects)).await,
        }
    }

    /// Any message but a daemon event.
    async fn step_other(&mut self, msg: ConvMsg) -> crate::store::Result<()> {
        let r = self;
        match msg {
            ConvMsg::Inbound(m) => r.on_inbound_msg(*m).await,
            ConvMsg::Daemon(e) => r.on_daemon_msg(*e).await,
            ConvMsg::PromptDone(done) => {
                let (seq, res) = *done;
                r.on_prompt_done(seq, res).await
            }
            ConvMsg::FilesReady(ready) => {
                let crate::core::FilesReady {
                    seq,
                    blocks,
                    refused,
                } = *ready;
                r.on_files_ready(seq, blocks, refused).await
            }
            ConvMsg::Resume(turn) => {
                let (id, stop) = (r.conv.id.clone(), r.core.shutdown.clone());
                retrying_step!(id, stop, r.on_resume((*turn).clone()))
            }
            ConvMsg::Connection(up) => r.on_connection(up).await,
            ConvMsg::LoadAgain => {
                let (id, stop) = (r.conv.id.clone(), r.core.shutdown.clone());
                retrying_step!(id, stop, r.on_load_again())
            }
            ConvMsg::InputEnded => r.on_input_ended().await,
            ConvMsg::Expire(before) => {
                let done = r.on_expire(before).await;
                lock(&r.core.expiring).remove(&r.conv.id);
                r.core.busy_add(-1);
                done
            }
        }
    }

    /// Tells the live board what this conversation runs now (after every step).
    fn publish_live(&self) {
        let turn = self.state.turn.as_ref().map(|t| self.live_turn(t));
        self.core.live().publish(self.live, &self.conv.id, turn);
    }

    fn live_turn(&self, t: &crate::conversation::turn::TurnState) -> LiveTurn {
        let (now, now_ms) = (Instant::now(), crate::store::now_ms());
        let wall = |at: Instant| {
            let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
            if at >= now {
                now_ms.saturating_add(ms(at - now))
            } else {
                now_ms.saturating_sub(ms(now - at))
            }
        };
        let mut tools: Vec<LiveTool> = t
            .tools
            .iter()
            .map(|(call, tool)| LiveTool {
                id: self.state.scoped(call),
                title: tool.title.chars().take(LIVE_TEXT).collect(),
                started_at: wall(tool.started),
                heartbeats: tool.heartbeats,
                last_heartbeat: tool.last_heartbeat.map(wall),
                progress: tool.progress,
                awaiting_approval: tool.awaiting_approval.is_some(),
                stored_id: tool.stored_id.clone(),
            })
            .collect();
        tools.sort_by(|a, b| (a.started_at, &a.id).cmp(&(b.started_at, &b.id)));
        LiveTurn {
            conversation_id: self.conv.id.clone(),
            turn_id: t.row.id.clone(),
            seq: t.row.seq,
            platform: self.conv.platform.clone(),
            project: self.conv.project.clone(),
            channel: self.conv.channel.clone(),
            user: t.row.requested_by.clone(),
            prompt: t.row.prompt.chars().take(LIVE_TEXT).collect(),
            started_at: t.row.started_at,
            last_frame: wall(t.liveness.last_frame()),
            stall_at: t.liveness.deadline().map(wall),
            stalled: t.liveness.is_stalled(),
            cancelling: t.cancel_by.is_some(),
            queued: self.state.queue.len(),
            tools,
        }
    }

    /// Lets go of an idle conversation: forgotten by the core, its channel closed, and anything
    /// that slipped in meanwhile handed to the runner that takes the conversation next.
    async fn retire(mut self, mut rx: mpsc::Receiver<ConvMsg>) {
        self.conv.daemon_session = self.state.session.as_ref().map(ToString::to_string);
        self.core
            .retire(&self.conv.id, self.state.session.as_ref(), &self.tx);
        rx.close();
        let mut left = Vec::new();
        while let Ok(m) = rx.try_recv() {
            left.push(m);
        }
        tracing::debug!(conversation = %self.conv.id, handed_on = left.len(), "idle conversation let go from memory");
        let (core, conv) = (self.core.clone(), self.conv.clone());
        drop(self);
        for m in left {
            core.send_to(&conv, m).await;
        }
    }

    /// One inbound event, with S4's bookkeeping: every attempt is counted before it starts; one
    /// that keeps failing is set aside with a notice instead of being tried forever.
    async fn on_inbound_msg(&mut self, m: crate::channel::Inbound) -> Result<()> {
        let id = self.conv.id.clone();
        let stop = self.core.shutdown.clone();
        let event = (m.platform.clone(), m.event_id.clone());
        let mut again = false;
        let r = loop {
            if again {
                match retrying_step!(id, stop, self.core.count_attempt(&m)) {
                    Ok(true) => {}
                    Ok(false) => break Ok(()),
                    Err(e) => break Err(e),
                }
            }
            let r = retrying_step!(id, stop, self.on_inbound_event(m.clone(), event.clone()));
            let left = self.state.marks.take(&event);
            match r {
                Err(e) if left && !e.is_transient() => {
                    tracing::error!(conversation = %self.conv.id, error = %e, "an inbound event failed");
                    match retrying_step!(id, stop, self.core.inbound_failed(&m, &e, false)) {
                        Ok(AfterFailure::Again) => again = true,
                        Ok(_) => break Ok(()),
                        Err(e) => break Err(e),
                    }
                }
                // Handled without a transaction of its own (nothing to do, or only a reply that
                // failed): marked now. After a step that never reached the database it stays in the
                // inbox and is taken again at the next start.
                r => {
                    if left && r.is_ok() {
                        let _ = retrying_step!(id, stop, self.mark_alone(&event));
                    }
                    break r;
                }
            }
        };
        self.core.busy_add(-1);
        r
    }
}

#[cfg(test)]
mod tests {
    /// The size of the future `f` returns.
    fn future_size<A, B, C, D, F>(_: fn(A, B, C, D) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// Every conversation in memory is one task holding the runner's future: 10,000 sessions hold
    /// 10,000 of them. The general step (some 10 KB of nested futures) is boxed while it runs, so
    /// an idle conversation holds its state and little more (it was 13.7 KB before).
    #[test]
    fn a_conversation_task_holds_its_state_not_the_largest_step() {
        let size = future_size(super::run);
        assert!(size <= 6 * 1024, "the runner's future is {size} bytes");
    }

    /// Every conversation's mailbox (a tokio channel) allocates a block of 32 message slots when it
    /// is made and keeps one while the conversation lives: with the message at 248 bytes, that was
    /// 8 KB a conversation doing nothing, 16 KB once a second block was taken (P2: some 110 MB of
    /// the 280 MB at 10,000 sessions). The large messages are boxed; the mailbox costs 0.5 KB.
    #[test]
    fn p2_a_conversation_message_is_small_so_an_idle_mailbox_costs_little() {
        let size = std::mem::size_of::<crate::core::ConvMsg>();
        assert!(size <= 16, "a conversation message is {size} bytes");
    }

    /// A step the database fails for longer than the retries last is given up: the error comes
    /// back, the retries and the given-up step are counted, and nothing is left counted as waiting.
    #[test]
    fn d2_a_step_failing_past_its_retries_is_given_up_counted_and_no_longer_waiting() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime");
        let r: crate::store::Result<()> = metrics::with_local_recorder(&recorder, || {
            rt.block_on(async {
                let (id, stop) = ("c-1".to_owned(), tokio_util::sync::CancellationToken::new());
                retrying_step!(
                    id,
                    stop,
                    std::future::ready(Err(crate::store::StoreError::Query(
                        sqlx::Error::PoolTimedOut
                    )))
                )
            })
        });
        assert!(r.is_err_and(|e| e.is_transient()), "the error comes back");
        let text = handle.render();
        let value = |name: &str| {
            text.lines()
                .find_map(|l| {
                    l.strip_prefix(name)
                        .and_then(|v| v.trim().parse::<f64>().ok())
                })
                .unwrap_or_else(|| panic!("{name} in:\n{text}"))
        };
        assert_eq!(
            value("chatbridge_store_step_retries_total "),
            f64::from(super::STORE_RETRIES)
        );
        assert_eq!(value("chatbridge_store_steps_given_up_total "), 1.0);
        assert_eq!(value("chatbridge_store_steps_waiting "), 0.0);
    }

    /// What on-call reads while a step waits for the database (a lock held past `lock_timeout`, say):
    /// the first failure, a line every 30 s while it lasts, and (`d2_lock_wait_metrics.rs`) one once
    /// the step went through.
    #[tokio::test(start_paused = true)]
    async fn d2_a_step_the_database_keeps_failing_is_said_at_first_then_every_30_s() {
        use super::{Said, StepRetry};
        let e = crate::store::StoreError::Query(sqlx::Error::PoolTimedOut);
        let mut retry = StepRetry::new("c-1");
        let mut said = Vec::new();
        // A failure every second for 100 s.
        for second in 0..100 {
            let (attempt, s) = retry.failed(&e);
            assert_eq!(attempt, second + 1);
            if s != Said::Nothing {
                said.push((second, s));
            }
            tokio::time::advance(std::time::Duration::from_secs(1)).await;
        }
        assert_eq!(
            said,
            [
                (0, Said::First),
                (30, Said::Still),
                (60, Said::Still),
                (90, Said::Still)
            ]
        );
    }
}
