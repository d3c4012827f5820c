//! D2 and S4 at the door: an inbound event is recorded in the inbox (deduplicated), handed to its
//! conversation, counted per attempt, and set aside as a dead letter — with a notice in its thread
//! — when it keeps failing or cannot be read.

use std::sync::Arc;

use super::keys::MessageKey;
use super::{AfterFailure, ConvMsg, Core, render};
use crate::channel::Inbound;
use crate::conversation::{commands, effects};
use crate::store::{self, conversations, inbound, now_ms};

/// Why an event was set aside, for the thread, the log and the dead-letter listing: a category and
/// at most an error code — never the message's text, a secret or raw bytes.
fn failure_reason(e: &store::StoreError) -> String {
    match e {
        store::StoreError::Query(sqlx::Error::Database(db)) => format!(
            "the database refused it (error {})",
            db.code().as_deref().unwrap_or("without a code")
        ),
        store::StoreError::Corrupt(_) => "its stored form could not be read".to_owned(),
        e if e.is_transient() => "the database was unreachable".to_owned(),
        _ => "it could not be handled (see the log)".to_owned(),
    }
}

/// The inbound event as the store keeps it: what runs the first time is what a replay after a
/// restart runs and what the history shows (NUL made visible, S4).
fn storable_inbound(mut msg: Inbound) -> Inbound {
    use crate::channel::InboundKind;
    match &mut msg.kind {
        InboundKind::Message(text) | InboundKind::Files { text, .. } if text.contains('\0') => {
            *text = store::bind::storable(text).into_owned();
        }
        _ => {}
    }
    msg
}

impl Core {
    /// Handles one inbound chat event: records it in the inbox, deduplicating it (D2), finds or
    /// creates its conversation, and hands it to that conversation's runner. Returns once the event
    /// is recorded — the platform may be told it arrived — and before the agent's work; the runner
    /// marks it handled in the transaction that acts on it.
    ///
    /// # Errors
    /// Store errors (the caller logs and tells the user).
    pub async fn accept(self: &Arc<Self>, msg: Inbound) -> Result<(), store::StoreError> {
        if self.record_inbound(&msg, inbound::arrival_stamp()).await? {
            self.dispatch_inbound(msg).await?;
        }
        Ok(())
    }

    /// Records an inbound event in the inbox as arrived at `at` ([`inbound::arrival_stamp`], taken
    /// in arrival order); `false` when it was seen before (D2: a platform's retry or a gateway
    /// replay), and then nothing more is done with it.
    ///
    /// # Errors
    /// Store errors: nothing was recorded.
    pub async fn record_inbound(&self, msg: &Inbound, at: i64) -> Result<bool, store::StoreError> {
        let payload =
            serde_json::to_string(msg).map_err(|e| store::StoreError::Corrupt(e.to_string()))?;
        let mut c = self.store.write_conn().await?;
        if inbound::record(&mut c, &msg.platform, &msg.event_id, &payload, at).await?
            == inbound::Seen::Duplicate
        {
            tracing::debug!(platform = %msg.platform, event = %msg.event_id, "duplicate inbound event ignored");
            metrics::counter!("chatbridge_inbound_duplicates_total", "platform" => msg.platform.clone()).increment(1);
            return Ok(false);
        }
        Ok(true)
    }

    /// Hands a recorded event on (see [`Core::dispatch`]). An event whose handling fails for good
    /// (not a transient fault) is tried again until it has failed `inbound_attempts` times, then set
    /// aside as a dead letter with a notice in its thread (S4) — and this returns `Ok`.
    ///
    /// # Errors
    /// Transient store errors; the event stays in the inbox, so calling this again is safe.
    pub async fn dispatch_inbound(self: &Arc<Self>, msg: Inbound) -> Result<(), store::StoreError> {
        loop {
            match self.dispatch(msg.clone()).await {
                Err(e) if !e.is_transient() => {
                    tracing::error!(platform = %msg.platform, event = %msg.event_id, error = %e, "an inbound event could not be handed on");
                    if self.inbound_failed(&msg, &e, true).await? != AfterFailure::Again {
                        return Ok(());
                    }
                }
                r => return r,
            }
        }
    }

    /// Hands a recorded event to its conversation's runner (creating the conversation when the event
    /// may open one); an event with nowhere to go is marked handled. The attempt is counted in the
    /// inbox (durably, before the runner has it) once nothing but the hand-over is left, so a
    /// transient fault before it is not counted and a crash after it is; an event that already
    /// failed `inbound_attempts` times — crashes included — is set aside instead.
    ///
    /// Each store step takes the writer for itself alone ([`store::Store::write_conn`]): moving a
    /// conversation off a removed project and setting an event aside begin transactions.
    async fn dispatch(self: &Arc<Self>, msg: Inbound) -> Result<(), store::StoreError> {
        let msg = storable_inbound(msg);
        // A thread opened with a command (`/help`) is titled by its first prompt instead.
        let title: String = match msg.kind.text() {
            Some(t) => match commands::parse(t, 0) {
                commands::Parsed::Prompt(_) => title_of(&self.redactor, t),
                _ => String::new(),
            },
            None => String::new(),
        };
        let key = conversations::Key {
            platform: &msg.platform,
            workspace: &msg.target.workspace,
            channel: &msg.target.channel,
            thread: &msg.target.thread,
        };
        let conv = {
            let mut c = self.store.write_conn().await?;
            if msg.opens {
                conversations::find_or_create_in(
                    &mut c,
                    &key,
                    self.project(),
                    &msg.user,
                    &title,
                    now_ms(),
                )
                .await?
                .0
            } else {
                match conversations::find(&mut c, &key).await? {
                    Some(conv) => conv,
                    None => {
                        tracing::debug!(platform = %msg.platform, "reply in a thread the bridge does not own ignored");
                        inbound::mark_handled(&mut c, &msg.platform, &msg.event_id, now_ms())
                            .await?;
                        return Ok(());
                    }
                }
            }
        };
        let conv = if self.serves(&conv.project) {
            conv
        } else {
            // Stored by a project no longer configured (in the one-project configuration: a
            // deployment moved back from `[[projects]]`): it continues in this core's project with
            // a new daemon session, its thread told once; the old session is never loaded on this
            // daemon.
            tracing::info!(conversation = %conv.id, from = %conv.project, to = self.project(), "a conversation of a project no longer configured");
            self.project_gone(&conv, Some(self.project())).await?;
            let mut c = self.store.conn().await?;
            conversations::get(&mut c, &conv.id).await?.unwrap_or(conv)
        };
        let attempt = {
            let mut c = self.store.write_conn().await?;
            inbound::start_attempt(&mut c, &msg.platform, &msg.event_id).await?
        };
        match attempt {
            None => return Ok(()),
            Some(n) if n > self.cfg.inbound_attempts => {
                let reason = format!(
                    "handling it was interrupted {} times (the bridge stopped while handling it)",
                    n - 1
                );
                self.set_aside(&msg, &reason, n - 1).await?;
                return Ok(());
            }
            Some(_) => {}
        }
        // In flight until the runner has handled it (it then counts the turn it opened or queued).
        self.busy_add(1);
        if !self.send_to(&conv, ConvMsg::Inbound(Box::new(msg))).await {
            self.busy_add(-1);
        }
        Ok(())
    }

    /// Counts another handling attempt of `msg` (before a runner tries it again); `false` when it
    /// is no longer waiting.
    ///
    /// # Errors
    /// Store errors.
    pub(crate) async fn count_attempt(&self, msg: &Inbound) -> Result<bool, store::StoreError> {
        let mut c = self.store.write_conn().await?;
        Ok(inbound::start_attempt(&mut c, &msg.platform, &msg.event_id)
            .await?
            .is_some())
    }

    /// Records that handling `msg` failed with `e` (not a transient fault; `count` when the attempt
    /// was not counted before it began) and sets it aside once it has failed `inbound_attempts`
    /// times.
    ///
    /// # Errors
    /// Store errors.
    pub(crate) async fn inbound_failed(
        &self,
        msg: &Inbound,
        e: &store::StoreError,
        count: bool,
    ) -> Result<AfterFailure, store::StoreError> {
        let reason = failure_reason(e);
        let failed = {
            let mut c = self.store.write_conn().await?;
            inbound::failed(&mut c, &msg.platform, &msg.event_id, &reason, count).await?
        };
        match failed {
            None => Ok(AfterFailure::Gone),
            Some(n) if n >= self.cfg.inbound_attempts => {
                self.set_aside(msg, &reason, n).await?;
                Ok(AfterFailure::SetAside)
            }
            Some(_) => Ok(AfterFailure::Again),
        }
    }

    /// Sets `msg` aside as a dead letter: never taken again, counted, logged with ids only, and
    /// a notice posted in its thread when the bridge knows the thread (S4). When even the notice
    /// cannot be written, the event is set aside without it.
    async fn set_aside(
        &self,
        msg: &Inbound,
        reason: &str,
        attempts: i64,
    ) -> Result<(), store::StoreError> {
        let conv = match self.set_aside_with_notice(msg, reason).await {
            Ok(Some(conv)) => conv,
            Ok(None) => return Ok(()),
            Err(e) if e.is_transient() => return Err(e),
            Err(e) => {
                tracing::error!(platform = %msg.platform, event = %msg.event_id, error = %e, "no notice for a dead letter");
                let mut c = self.store.write_conn().await?;
                if !inbound::set_aside(&mut c, &msg.platform, &msg.event_id, reason, now_ms())
                    .await?
                {
                    return Ok(());
                }
                None
            }
        };
        metrics::counter!("chatbridge_inbound_dead_letters_total", "platform" => msg.platform.clone())
            .increment(1);
        tracing::error!(
            platform = %msg.platform,
            event = %msg.event_id,
            conversation = conv.as_ref().map_or("", |c| c.id.as_str()),
            attempts,
            "an inbound event was set aside as a dead letter after repeated failures"
        );
        Ok(())
    }

    /// A message held (in the inbox) while its thread belonged to project `from`, taken after the
    /// configuration moved the thread to this core's project: text written for one agent must not
    /// run on another (it may be a shell), so it is set aside and the thread told plainly that it
    /// was not run and to send it again. The thread is moved first (told once, as for any message).
    ///
    /// # Errors
    /// Store errors.
    pub async fn not_run_after_move(
        self: &Arc<Self>,
        msg: &Inbound,
        from: &str,
    ) -> Result<(), store::StoreError> {
        let key = conversations::Key {
            platform: &msg.platform,
            workspace: &msg.target.workspace,
            channel: &msg.target.channel,
            thread: &msg.target.thread,
        };
        let mut c = self.store.conn().await?;
        if let Some(conv) = conversations::find(&mut c, &key).await?
            && !self.serves(&conv.project)
        {
            self.project_gone(&conv, Some(self.project())).await?;
        }
        drop(c);
        let reason = format!(
            "it was received while this thread belonged to project {from}, which is no longer configured, and it was not run in project {}; send it again to run it there",
            self.project()
        );
        tracing::warn!(platform = %msg.platform, event = %msg.event_id, from, to = self.project(), "a message held for a project no longer configured was not run on another project's daemon");
        self.set_aside_with_notice(msg, &reason).await?;
        Ok(())
    }

    /// Sets `msg` aside and queues the notice in one transaction: `None` when it was no longer
    /// waiting, else `Some` with its conversation when the thread is known.
    #[allow(clippy::option_option)]
    async fn set_aside_with_notice(
        &self,
        msg: &Inbound,
        reason: &str,
    ) -> Result<Option<Option<conversations::Conversation>>, store::StoreError> {
        let key = conversations::Key {
            platform: &msg.platform,
            workspace: &msg.target.workspace,
            channel: &msg.target.channel,
            thread: &msg.target.thread,
        };
        let mut tx = self.store.begin().await?;
        if !inbound::set_aside(tx.conn(), &msg.platform, &msg.event_id, reason, now_ms()).await? {
            return Ok(None);
        }
        // The thread: its conversation, or — for a message that would have opened it and failed
        // before it existed — a new one without a title.
        let conv = match conversations::find(tx.conn(), &key).await? {
            Some(conv) => Some(conv),
            None if msg.opens => Some(
                conversations::find_or_create_in(
                    tx.conn(),
                    &key,
                    self.project(),
                    &msg.user,
                    "",
                    now_ms(),
                )
                .await?
                .0,
            ),
            None => None,
        };
        if let Some(conv) = &conv {
            let text = format!("A message could not be handled and was set aside: {reason}.");
            self.queue_notice(
                &mut tx,
                conv,
                MessageKey::DeadLetter(msg.event_id.clone()),
                crate::channel::Tone::Error,
                &text,
                now_ms(),
            )
            .await?;
        }
        tx.commit().await?;
        self.wake_outbox.notify_one();
        Ok(Some(conv))
    }

    /// After a restart: a turn left open by a project no longer configured is closed as
    /// interrupted, as a restart closes a turn whose session the agent no longer has (D3) — its
    /// running calls interrupted, its open questions ended — and its thread is told, once. Its
    /// session is not loaded on any daemon.
    ///
    /// # Errors
    /// Store errors; nothing is changed then (the next start tries again).
    pub(crate) async fn close_unserved_turn(
        &self,
        turn: &store::turns::Turn,
        conv: &conversations::Conversation,
    ) -> Result<(), store::StoreError> {
        let now = now_ms();
        let mut tx = self.store.begin().await?;
        let ending = store::turns::Ending {
            status: "interrupted",
            ..store::turns::Ending::default()
        };
        if !store::turns::finish(tx.conn(), &turn.id, &ending, now).await? {
            return Ok(());
        }
        let running: Vec<_> = store::tool_calls::of_conversation(tx.conn(), &conv.id)
            .await?
            .into_iter()
            .filter(|t| t.status == "running" && t.turn_id.as_deref() == Some(turn.id.as_str()))
            .collect();
        for t in running {
            let finish = store::tool_calls::Finish {
                outcome: crate::conversation::ToolOutcome::Interrupted.as_str(),
                summary: Some("its project is no longer served here"),
                output: "",
                exit_code: None,
                signal: None,
            };
            store::tool_calls::finish(tx.conn(), &conv.id, &t.call_id, &finish, now).await?;
        }
        for p in store::permissions::pending_of(tx.conn(), &conv.id).await? {
            store::permissions::resolve(tx.conn(), &p.id, "bridge", "turn_ended", now).await?;
        }
        let text = format!(
            "The bridge restarted during this turn and this thread's project {} is no longer configured; the turn was interrupted.",
            conv.project
        );
        self.queue_notice(
            &mut tx,
            conv,
            MessageKey::DeadLetter(format!("project-turn:{}", turn.id)),
            crate::channel::Tone::Warning,
            &text,
            now,
        )
        .await?;
        tx.commit().await?;
        self.wake_outbox.notify_one();
        tracing::info!(conversation = %conv.id, project = %conv.project, "a turn left open by a project no longer configured closed as interrupted");
        Ok(())
    }

    /// A notice from the bridge in `conv`'s thread, in the same transaction as what caused it: kept
    /// in the transcript and queued for the outbox under `key` (so a retry posts it once).
    async fn queue_notice(
        &self,
        tx: &mut store::Tx,
        conv: &conversations::Conversation,
        key: MessageKey,
        tone: crate::channel::Tone,
        text: &str,
        now: i64,
    ) -> Result<(), store::StoreError> {
        store::transcript::append(
            tx.conn(),
            &conv.id,
            &store::transcript::NewEntry {
                turn_id: None,
                kind: "notice",
                actor: Some("bridge"),
                body: text,
                tool_call_id: None,
            },
            now,
        )
        .await?;
        let action = effects::post(
            &Self::target(conv),
            &key,
            render::notice(&self.redactor, tone, text),
        );
        let json = serde_json::to_string(&action)
            .map_err(|e| store::StoreError::Corrupt(e.to_string()))?;
        let (kind, coalesce_key) = effects::outbox_row(&action);
        store::outbox::enqueue(
            tx.conn(),
            &store::outbox::NewAction {
                conversation_id: &conv.id,
                kind,
                coalesce_key,
                action: &json,
            },
            now,
        )
        .await?;
        Ok(())
    }

    /// A conversation whose project is no longer configured: with `to` (the project its channel is
    /// bound to now, or `default_project`) it is moved there — stored with that project and without
    /// its old daemon session, which this core's daemon never had — and the thread is told it
    /// continues without the earlier context; without, it is only told that it is not served here.
    /// Either way one notice, keyed by the conversation, so a retry posts it once.
    ///
    /// # Errors
    /// Store errors.
    pub(crate) async fn project_gone(
        &self,
        conv: &conversations::Conversation,
        to: Option<&str>,
    ) -> Result<(), store::StoreError> {
        let text = match to {
            Some(to) => {
                format!(
                    "This thread's project {} is no longer configured; the thread continues in project {to}, without the earlier context.",
                    conv.project
                )
            }
            None => format!(
                "This thread's project {} is no longer served here.",
                conv.project
            ),
        };
        let now = now_ms();
        let mut tx = self.store.begin().await?;
        match to {
            Some(to) => conversations::move_to_project(tx.conn(), &conv.id, to, now).await?,
            // Told once, and a restart does not tell it again.
            None if !conversations::mark_unserved_told(tx.conn(), &conv.id, &conv.project)
                .await? =>
            {
                return Ok(());
            }
            None => {}
        }
        let key = MessageKey::DeadLetter(format!("project:{}:{}", conv.id, to.unwrap_or("")));
        self.queue_notice(
            &mut tx,
            conv,
            key,
            crate::channel::Tone::Warning,
            &text,
            now,
        )
        .await?;
        tx.commit().await?;
        self.wake_outbox.notify_one();
        Ok(())
    }

    /// After a restart: events recorded but never acted on — the process died between recording an
    /// event and its turn, or while a message waited behind a running turn — are handed to their
    /// conversations again, oldest first. Returns how many. One event never fails the start: its
    /// failure is logged (ids only) and counted against it, and an event that keeps failing or
    /// cannot be read is set aside (S4).
    ///
    /// # Errors
    /// Store errors reading the inbox itself.
    pub async fn take_unhandled_inbound(self: &Arc<Self>) -> Result<usize, store::StoreError> {
        let pending = self.unhandled_inbound().await?;
        let n = pending.len();
        for (platform, event_id, payload) in pending {
            let take = || async {
                match serde_json::from_str::<Inbound>(&payload) {
                    Ok(msg) => self.dispatch_inbound(msg).await,
                    Err(_) => self.set_aside_unreadable(&platform, &event_id).await,
                }
            };
            let r = in_order(self, &platform, &event_id, take).await;
            if let Err(e) = r {
                tracing::error!(%platform, event = %event_id, transient = e.is_transient(), "an inbox event could not be taken at start-up; it stays in the inbox");
            }
        }
        Ok(n)
    }

    /// Events recorded but never acted on, oldest first: (platform, event id, payload).
    pub(crate) async fn unhandled_inbound(
        &self,
    ) -> Result<Vec<(String, String, String)>, store::StoreError> {
        let mut c = self.store.conn().await?;
        inbound::unhandled(&mut c).await
    }

    /// An inbox event from a channel that serves no project any more: marked handled, as it would
    /// be ignored if it arrived now.
    pub(crate) async fn drop_unrouted(
        &self,
        platform: &str,
        event_id: &str,
    ) -> Result<(), store::StoreError> {
        tracing::debug!(%platform, event = %event_id, "an inbox event from a channel that serves no project dropped");
        let mut c = self.store.write_conn().await?;
        inbound::mark_handled(&mut c, platform, event_id, now_ms()).await
    }

    /// An inbox entry whose payload is not an event (written by another version, or damaged): set
    /// aside without a notice (its thread is unknown).
    pub(crate) async fn set_aside_unreadable(
        &self,
        platform: &str,
        event_id: &str,
    ) -> Result<(), store::StoreError> {
        let mut c = self.store.write_conn().await?;
        if inbound::set_aside(
            &mut c,
            platform,
            event_id,
            "its stored form could not be read",
            now_ms(),
        )
        .await?
        {
            metrics::counter!("chatbridge_inbound_dead_letters_total", "platform" => platform.to_owned())
                .increment(1);
            tracing::error!(%platform, event = %event_id, "an unreadable inbox entry was set aside as a dead letter");
        }
        Ok(())
    }
}

/// A conversation's title: the start of `prompt`, redacted before it is cut, so a title never
/// holds half a secret (S2).
pub(crate) fn title_of(redactor: &crate::core::redact::Redactor, prompt: &str) -> String {
    redactor.redact(prompt.trim()).chars().take(80).collect()
}

/// How many times taking an inbox event at start-up is tried again while the database is
/// unreachable (100 ms doubling to 5 s: about ten minutes, as a conversation's step).
const TAKE_RETRIES: u32 = 130;

/// Takes one inbox event at start-up (`take`), again while the database is unreachable, before the
/// next is taken: events are taken oldest first, and one left for a later start would run after the
/// thread's messages behind it (D2; an outside tester's SIGKILLs with connections cut meanwhile).
/// Gives up when the core stops; the event then stays in the inbox for the next start.
pub(crate) async fn in_order<F, Fut>(
    core: &Core,
    platform: &str,
    event_id: &str,
    take: F,
) -> Result<(), store::StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), store::StoreError>>,
{
    let told = |e: &store::StoreError| {
        tracing::warn!(%platform, event = %event_id, error = %e, "the database is unavailable; taking this inbox event again when it answers, before the ones after it");
    };
    match store::retry_transient(TAKE_RETRIES, &core.shutdown, told, take).await {
        Some(r) => r,
        // Stopping: left in the inbox, for the next start.
        None => Err(store::StoreError::Query(sqlx::Error::PoolClosed)),
    }
}
