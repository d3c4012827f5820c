//! A turn's end (first cause, T2; the answer, R5; the person's mark), the prompt call's
//! completion, taking an open turn back after a restart (D3), and timers (L3, L5, expiry).

use std::sync::Arc;

use daemon_client::{PermissionOutcome, Stall, StopReason, ToolCallId, ToolResult};
use tokio::time::Instant;

use super::Runner;
use crate::channel::{ChatAction, Tone};
use crate::conversation::approvals::{self, Pending};
use crate::conversation::effects;
use crate::conversation::event::{Event, PromptEnd, ToolOutcome, TurnStatus};
use crate::conversation::tools::ToolState;
use crate::conversation::turn::{TurnState, stall_text};
use crate::core::access::Act;
use crate::core::keys::MessageKey;
use crate::core::{ConvMsg, Core, lock, render};
use crate::store::turns::{self, Ending, Turn};
use crate::store::{Result, Tx, conversations, now_ms, permissions, tool_calls};

/// Why approvals are closed unanswered: the outcome stored, the heading and line their message
/// shows.
type Unanswered = (&'static str, &'static str, &'static str);

/// Their turn ended first.
const TURN_ENDED: Unanswered = ("turn_ended", approvals::ENDED_HEADING, approvals::ENDED);

/// The chat's input ended: nobody can answer.
const INPUT_ENDED: Unanswered = (
    "unanswered",
    approvals::INPUT_ENDED_HEADING,
    approvals::INPUT_ENDED,
);

impl Runner {
    pub(super) async fn end_turn(
        &mut self,
        stop: Option<StopReason>,
        forced: Option<TurnStatus>,
    ) -> Result<()> {
        self.flush_progress(true);
        let Some(turn) = self.state.turn.take() else {
            // Ended already: a retry of this step after the ending was written and the next
            // queued message could not start (the database away) — it starts now. Held messages
            // wait for the agent instead (L7).
            if self.state.daemon_down {
                return Ok(());
            }
            return self.run_queued().await;
        };
        // Questions the turn asked die with it: their buttons go, the daemon hears "cancelled",
        // and the next message is a prompt again, not a wrong answer (R6).
        let unanswered = self.state.approvals.take_all();
        let ending = turn.ending(stop.as_ref(), forced);
        let status = ending.status.as_str();
        if let Err(e) = self
            .write_ending(None, &turn, &ending, stop.as_ref(), &unanswered)
            .await
        {
            // Nothing of the ending was written: the turn and its questions stay as they were, so
            // the step's retry (the database back) ends it then — taken out here, a retry would
            // find no turn, and the turn would stay open in the store and counted busy for good.
            self.state.turn = Some(turn);
            self.state.approvals.ask_again(unanswered);
            return Err(e);
        }
        self.turn_ended(turn, status, unanswered).await
    }

    /// A tool's result and its turn's end, taken from the mailbox together (the daemon sent them
    /// back to back: a command's turn ends with its result), written in ONE transaction — one
    /// commit, not two, for the usual end of a command's turn (P2: at 10,000 sessions the
    /// commits' WAL flushes bound the results' latency). `None`, with nothing changed, when it
    /// does not apply (the result is not the turn's) or the transaction failed: the caller then
    /// carries out the two steps one after the other as always, each retried on its own (D1–D3;
    /// a commit whose outcome is unknown is found done by those steps, as by their own retries).
    /// Otherwise what became of what follows the written ending (the next queued prompt's start),
    /// which the caller retries as `end_turn`'s retry would.
    pub(super) async fn finish_and_end(
        &mut self,
        call: &ToolCallId,
        result: &ToolResult,
        stop: &StopReason,
    ) -> Option<Result<()>> {
        if !self
            .state
            .turn
            .as_ref()
            .is_some_and(|t| t.tools.contains_key(call))
        {
            return None;
        }
        let tool = self
            .state
            .tool_done(call, ToolOutcome::from(result.outcome));
        let took = tool.as_ref().and_then(ToolState::took);
        // As `end_turn`: the counts of calls still running go to the progress writer first.
        self.flush_progress(true);
        let turn = self.state.turn.take()?;
        let unanswered = self.state.approvals.take_all();
        let ending = turn.ending(Some(stop), None);
        match self
            .write_result_and_ending(
                call,
                result,
                tool.as_ref(),
                took,
                &turn,
                &ending,
                stop,
                &unanswered,
            )
            .await
        {
            Ok(()) => {
                self.tool_took(result, took);
                Some(
                    self.turn_ended(turn, ending.status.as_str(), unanswered)
                        .await,
                )
            }
            Err(e) => {
                self.put_back(e, turn, unanswered, call, tool);
                None
            }
        }
    }

    /// [`Runner::finish_and_end`]'s write: the result (counted as written once committed) and the
    /// turn's ending, in one commit. The usual end of a command's turn changes only the turn's row:
    /// on PostgreSQL the result's one statement closes it too; otherwise, or when that statement
    /// does not apply, one transaction takes both.
    #[allow(clippy::too_many_arguments)]
    async fn write_result_and_ending(
        &mut self,
        call: &ToolCallId,
        result: &ToolResult,
        tool: Option<&ToolState>,
        took: Option<std::time::Duration>,
        turn: &TurnState,
        ending: &crate::conversation::turn::Ending,
        stop: &StopReason,
        unanswered: &[Pending],
    ) -> Result<()> {
        let turn_id = &turn.row.id;
        let marks = self.ending_marks(turn, ending);
        if self.core.store.backend() == crate::store::Backend::Postgres
            && self.only_the_row(turn, &marks, unanswered)
        {
            let row = ending_row(ending, Some(stop), None);
            let once = self
                .write_tool_result_in(None, Some(&row), call, turn_id, result, tool, took)
                .await?;
            if once.is_some() {
                return Ok(());
            }
        }
        let mut tx = self.begin().await?;
        let db_id = self
            .write_tool_result_in(Some(&mut tx), None, call, turn_id, result, tool, took)
            .await?;
        self.write_ending(Some(&mut tx), turn, ending, Some(stop), unanswered)
            .await?;
        self.commit(tx).await?;
        if let Some(db_id) = db_id {
            self.result_written(result, &db_id);
        }
        Ok(())
    }

    /// [`Runner::finish_and_end`] wrote nothing: the state is put back as it was before both
    /// steps, for them to be carried out one by one.
    fn put_back(
        &mut self,
        e: crate::store::StoreError,
        turn: TurnState,
        unanswered: Vec<Pending>,
        call: &ToolCallId,
        tool: Option<ToolState>,
    ) {
        tracing::debug!(conversation = %self.conv.id, error = %e, "result and turn end not written together; writing them one by one");
        self.state.turn = Some(turn);
        self.state.approvals.ask_again(unanswered);
        self.state.tool_undone(call.clone(), tool);
    }

    /// What follows a turn's ending once it is written: its questions answered "cancelled", its
    /// calls still running kept, and the next queued prompt started.
    pub(super) async fn turn_ended(
        &mut self,
        turn: TurnState,
        status: &str,
        unanswered: Vec<Pending>,
    ) -> Result<()> {
        self.answer_cancelled(unanswered).await;
        tracing::info!(conversation = %self.conv.id, turn = %turn.row.id, %status, "turn ended");
        // Calls it never saw finish may still: their results then finish their messages.
        let turn_id = turn.row.id.clone();
        self.state.keep_unfinished(&turn_id, turn.tools);
        let took = (now_ms() - turn.row.started_at).max(0) as f64 / 1000.0;
        metrics::histogram!(
            "chatbridge_turn_duration_seconds",
            self.core.labels(&[("status", status)])
        )
        .record(took);
        let _ended = BusyGuard(self.core.clone());
        self.run_queued().await
    }

    /// The turn's ending, in one transaction: the row, its unanswered questions' messages, the
    /// answer (recorded and posted) and the person's mark. In `within` when given, uncommitted:
    /// the caller commits it with the rest of its step.
    pub(super) async fn write_ending(
        &mut self,
        within: Option<&mut Tx>,
        turn: &TurnState,
        ending: &crate::conversation::turn::Ending,
        stop: Option<&StopReason>,
        unanswered: &[Pending],
    ) -> Result<()> {
        let answer = turn.answer.trim().to_owned();
        let kept_answer = self.kept(&answer).into_owned();
        let row = ending_row(ending, stop, (!answer.is_empty()).then_some(&*kept_answer));
        let marks = self.ending_marks(turn, ending);
        if within.is_none() && self.only_the_row(turn, &marks, unanswered) {
            // Only the turn's row changes: one statement, atomic on its own, not a transaction's
            // three round trips (P2: a command's turn that ends without text, on a chat without
            // reactions).
            let mut c = self.core.store.write_conn().await?;
            turns::finish(&mut c, &turn.row.id, &row, now_ms()).await?;
            return Ok(());
        }
        let mut own = None;
        let tx = match within {
            Some(tx) => tx,
            None => own.insert(self.begin().await?),
        };
        turns::finish(tx.conn(), &turn.row.id, &row, now_ms()).await?;
        if self.state.abandon_session {
            // D6: the session holds the interrupted prompt, which the daemon would fold into the
            // next one; let go of it with the turn, so a restart before the next message opens a
            // new session too.
            conversations::forget_session(tx.conn(), &self.conv.id, now_ms()).await?;
        }
        self.close_unanswered(tx, unanswered, TURN_ENDED).await?;
        if !answer.is_empty() {
            self.record(
                tx,
                Some(&turn.row.id),
                "answer",
                "agent",
                &kept_answer,
                None,
            )
            .await?;
            let mut parts = render::answer_parts(
                &self.core.redactor,
                &answer,
                self.core.cfg.answer_len,
                self.core.cfg.upload_over,
            );
            // The draft the answer streamed into becomes its first part; a file goes beside it
            // (a posted message cannot take one on Slack).
            let draft = turn.draft.filter(|_| self.streams());
            if draft.is_some()
                && let Some(file) = parts.first_mut().and_then(|m| m.file.take())
            {
                let mut carrier = crate::channel::Message::text(Tone::Neutral, "📎 answer.md");
                carrier.body = Some(format!(
                    "The whole answer ({}).",
                    crate::conversation::files::human_bytes(file.content.len() as u64)
                ));
                carrier.file = Some(file);
                parts.push(carrier);
            }
            for (i, msg) in parts.into_iter().enumerate() {
                let key = match (i, draft) {
                    (0, Some(d)) => MessageKey::Draft(turn.row.id.clone(), d.seq),
                    (0, None) => MessageKey::Answer(turn.row.id.clone()),
                    (n, _) => MessageKey::AnswerPart(turn.row.id.clone(), n + 1),
                };
                self.enqueue(tx, &effects::post(&self.target, &key, msg))
                    .await?;
            }
        }
        self.enqueue_all(tx, &marks).await?;
        match own {
            Some(tx) => self.commit(tx).await,
            None => Ok(()),
        }
    }

    /// The marks a turn's ending puts on the person's messages.
    fn ending_marks(
        &self,
        turn: &TurnState,
        ending: &crate::conversation::turn::Ending,
    ) -> Vec<ChatAction> {
        turn.user_message
            .iter()
            .chain(&turn.merged_messages)
            .flat_map(|id| effects::outcome_marks(&self.target, id, ending.mark))
            .collect()
    }

    /// Whether a turn's ending changes only its row: no answer, no marks, no questions to close,
    /// no session to let go and no inbox entry to mark.
    fn only_the_row(&self, turn: &TurnState, marks: &[ChatAction], unanswered: &[Pending]) -> bool {
        turn.answer.trim().is_empty()
            && marks.is_empty()
            && unanswered.is_empty()
            && !self.state.abandon_session
            && self.state.marks.is_empty()
    }

    /// Starts the first queued prompt whose author may still prompt here (its busy count, taken
    /// when it was queued, now belongs to its turn).
    pub(super) async fn run_queued(&mut self) -> Result<()> {
        if self.state.turn.is_some() {
            return Ok(());
        }
        while let Some(q) = self.state.queue.pop() {
            // Asked again at its turn: its author may have been `/uninvite`d while it waited (A2).
            if let Err(refusal) = self.may(&q.user, Act::Prompt).await? {
                self.core.busy_add(-1);
                for e in q.events() {
                    self.state.marks.add(Some(e));
                }
                self.refuse(&q.user, q.message_id.as_deref(), &refusal)
                    .await?;
                continue;
            }
            // Counted as busy when it was queued; that count now belongs to its turn.
            let event = q.event.clone();
            let again = q.clone();
            if let Err(e) = self.start_turn(q).await {
                // Not marked: it stays in the inbox and is taken again at the next start.
                if let Some(event) = &event {
                    self.state.marks.take(event);
                }
                if e.is_transient() && self.state.turn.is_none() {
                    // The database is away and the step is retried once it answers: this message
                    // is still the next to run, not the one behind it (counted as waiting again;
                    // its failed start let its count go).
                    self.state.queue.push_front(again);
                    self.core.busy_add(1);
                }
                return Err(e);
            }
            break;
        }
        Ok(())
    }

    /// Questions nobody answered, closed (`why`: the outcome stored, the heading and line their
    /// message shows): resolved in the store, their buttons gone.
    async fn close_unanswered(
        &mut self,
        tx: &mut crate::store::Tx,
        unanswered: &[Pending],
        why: Unanswered,
    ) -> Result<()> {
        let (outcome, heading, text) = why;
        for p in unanswered {
            permissions::resolve(tx.conn(), &p.db_id, "bridge", outcome, now_ms()).await?;
            let edit = self.closed_approval(p, heading, text);
            self.enqueue(tx, &edit).await?;
        }
        Ok(())
    }

    /// The turn is being cancelled (`/cancel`, `/new`, a steering message): the questions it
    /// asked are closed now and the agent hears "cancelled" for each (ACP answers every pending
    /// permission request so on a cancel) — so a message sent next is a prompt again, queued
    /// behind the ending turn, not taken for an answer or refused.
    pub(super) async fn close_approvals_for_cancel(&mut self) -> Result<()> {
        self.close_waiting_approvals(TURN_ENDED).await
    }

    /// The chat's input ended: nobody can answer the approvals waiting. They are closed as not
    /// answered (their messages say why) and the daemon hears "cancelled", so the turn goes on to
    /// its end instead of waiting out the approval timeout with nobody to click.
    pub(super) async fn on_input_ended(&mut self) -> Result<()> {
        self.close_waiting_approvals(INPUT_ENDED).await
    }

    /// Closes every waiting approval for `why` in one transaction (put back when it fails); then
    /// the daemon hears "cancelled" for each.
    async fn close_waiting_approvals(&mut self, why: Unanswered) -> Result<()> {
        let unanswered = self.state.approvals.take_all();
        if unanswered.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin().await?;
        let closed = match self.close_unanswered(&mut tx, &unanswered, why).await {
            Ok(()) => self.commit(tx).await,
            Err(e) => Err(e),
        };
        if let Err(e) = closed {
            self.state.approvals.ask_again(unanswered);
            return Err(e);
        }
        self.answer_cancelled(unanswered).await;
        Ok(())
    }

    /// The agent hears "cancelled" for each of these questions (closed with their turn).
    async fn answer_cancelled(&self, unanswered: Vec<Pending>) {
        for p in unanswered {
            let _ = self
                .core
                .client
                .answer_permission(&p.request_id, &PermissionOutcome::Cancelled)
                .await;
        }
    }

    /// Closes tool calls that will never finish (the daemon lost their session): stored as
    /// `interrupted`, their messages say so.
    pub(super) async fn interrupt_tools(&mut self, tools: Vec<(String, String)>) -> Result<()> {
        self.close_tools(
            tools,
            ToolOutcome::Interrupted,
            "the agent lost the session",
            render::tool_interrupted,
        )
        .await
    }

    /// Closes tool calls whose cancel the agent never confirmed within the grace: stored as
    /// cancelled, their messages say the bridge stopped following them (the agent may still run
    /// them) — not that the agent lost them.
    pub(super) async fn let_go_tools(&mut self, tools: Vec<(String, String)>) -> Result<()> {
        self.close_tools(
            tools,
            ToolOutcome::Cancelled,
            "the agent did not confirm the cancel",
            render::tool_let_go,
        )
        .await
    }

    async fn close_tools(
        &mut self,
        tools: Vec<(String, String)>,
        outcome: ToolOutcome,
        summary: &str,
        shown: fn(&crate::core::redact::Redactor, &str) -> crate::channel::Message,
    ) -> Result<()> {
        if tools.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin().await?;
        for (scoped, title) in tools {
            let finish = tool_calls::Finish {
                outcome: outcome.as_str(),
                summary: Some(summary),
                output: "",
                exit_code: None,
                signal: None,
            };
            tool_calls::finish(tx.conn(), &self.conv.id, &scoped, &finish, now_ms()).await?;
            let msg = shown(&self.core.redactor, &title);
            let key = MessageKey::Tool(scoped);
            self.enqueue(&mut tx, &effects::edit(&self.target, &key, msg, false))
                .await?;
        }
        self.commit(tx).await
    }

    /// The prompt call `seq` returned.
    pub(super) async fn on_prompt_done(
        &mut self,
        seq: u64,
        r: std::result::Result<StopReason, daemon_client::Error>,
    ) -> Result<()> {
        let end = match r {
            Ok(_) => PromptEnd::Answered,
            Err(daemon_client::Error::SessionLost { message, .. }) => {
                PromptEnd::SessionLost(message)
            }
            Err(daemon_client::Error::AgentExited { reason }) => PromptEnd::AgentExited(reason),
            // Our own connection closing at shutdown.
            Err(_) if self.core.shutdown.is_cancelled() => PromptEnd::Stopping,
            Err(e) => PromptEnd::Failed(e.to_string()),
        };
        for effect in self.handle(Event::PromptDone { seq, end }) {
            self.apply(effect).await?;
        }
        Ok(())
    }

    pub(super) async fn on_resume(&mut self, row: Turn) -> Result<()> {
        // Questions asked before the restart went with the old daemon connection.
        let mut tx = self.begin().await?;
        for pending in permissions::pending_of(tx.conn(), &self.conv.id).await? {
            self.lapse(&mut tx, &pending).await?;
        }
        self.commit(tx).await?;
        // The calls stored for earlier turns: a replayed frame of one of them shows the replay is
        // in an older turn's frames, though its prompt reads as this turn's (D6).
        let mut c = self.core.store.conn().await?;
        let earlier_calls = tool_calls::ids_of_other_turns(&mut c, &self.conv.id, &row.id)
            .await?
            .into_iter()
            .collect();
        drop(c);
        let mut turn = TurnState::new(row, self.core.cfg.liveness.clone(), Instant::now(), true, 0);
        turn.earlier_calls = earlier_calls;
        self.state.turn = Some(turn);
        if !self
            .core
            .daemon_connected
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            // The daemon is unreachable (the bridge started during an outage): the session is
            // loaded, and the turn's fate read, once it is back (L7).
            if let Some(s) = self.state.session.clone() {
                lock(&self.core.sessions).insert(s, self.conv.id.clone());
            }
            self.resume_pending = true;
            self.state.daemon_down = true;
            tracing::info!(conversation = %self.conv.id, "open turn taken back; the agent is unreachable, its session is loaded when it is back");
            return Ok(());
        }
        self.reload_resumed().await
    }

    /// Loads a resumed turn's session; when the daemon answers that it no longer has it, the turn
    /// ends as interrupted (D3). When the load itself fails on the way (the connection dropped, no
    /// answer in time, the agent restarting), nothing is known of the session yet: the load is
    /// tried again once the daemon is back, or after a pause while it seems up, and the turn is
    /// bounded meanwhile by its stall limits — a command that finished while the bridge was away
    /// is not reported as lost because the first attempt to ask met a fault.
    pub(super) async fn reload_resumed(&mut self) -> Result<()> {
        self.resume_pending = false;
        if self.state.turn.is_none() {
            return Ok(());
        }
        match self.reload_session().await {
            Reload::Loaded => {
                self.resume_attempts = 0;
                if self.state.turn.is_some() {
                    tracing::info!(conversation = %self.conv.id, "open turn resumed after restart");
                }
                return Ok(());
            }
            Reload::NotNow(e) => {
                self.resume_pending = true;
                self.resume_attempts = self.resume_attempts.saturating_add(1);
                let pause = daemon_client::client::backoff_delay(
                    RELOAD_AGAIN_BASE,
                    RELOAD_AGAIN_CAP,
                    self.resume_attempts - 1,
                );
                tracing::warn!(conversation = %self.conv.id, error = %e, attempt = self.resume_attempts, ?pause, "could not load the session of the turn taken back after restart; trying again");
                let tx = self.tx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(pause).await;
                    let _ = tx.send(ConvMsg::LoadAgain).await;
                });
                return Ok(());
            }
            Reload::Gone => {}
        }
        self.resume_attempts = 0;
        if self.state.turn.is_none() {
            return Ok(());
        }
        // The daemon lost the session (the built-in agent lives in the bridge's process and went
        // with it): nothing of this turn can still finish. Its calls are closed as interrupted, the
        // thread is told, and the next message runs at once in a new session (D3).
        let turn_id = self.state.turn.as_ref().map(|t| t.row.id.clone());
        let mut c = self.core.store.conn().await?;
        let running: Vec<(String, String)> = tool_calls::of_conversation(&mut c, &self.conv.id)
            .await?
            .into_iter()
            .filter(|t| t.status == "running" && t.turn_id == turn_id)
            .map(|t| (t.call_id, t.title))
            .collect();
        drop(c);
        // Let go of in the store with the turn (D6), as after any interrupted turn: a restart
        // before the next message would otherwise try the lost session again.
        self.state.abandon_session = true;
        self.interrupt_tools(running).await?;
        self.notice(Tone::Warning, "The bridge restarted during this turn and the agent no longer has it; the turn was interrupted. Send your message again if it still matters.").await?;
        self.end_turn(None, Some(TurnStatus::Interrupted)).await
    }

    /// A pause after a failed load of a resumed turn's session is over: loaded again, unless the
    /// daemon is down (then its return does it) or the turn was settled meanwhile.
    pub(super) async fn on_load_again(&mut self) -> Result<()> {
        let connected = self
            .core
            .daemon_connected
            .load(std::sync::atomic::Ordering::SeqCst);
        if !self.resume_pending || !connected {
            return Ok(());
        }
        self.reload_resumed().await
    }

    /// Loads the thread's session on the current connection after a restart. [`Reload::Gone`]
    /// when there is none or the daemon answers that it does not have it (then it is forgotten:
    /// the next message opens a new one).
    async fn reload_session(&mut self) -> Reload {
        let Some(s) = self.state.session.clone() else {
            return Reload::Gone;
        };
        lock(&self.core.sessions).insert(s.clone(), self.conv.id.clone());
        match self.core.client.load_session(&s, &self.conv.cwd).await {
            Ok(()) => {
                self.state.session_ready = true;
                Reload::Loaded
            }
            Err(
                e @ (daemon_client::Error::Rpc { .. } | daemon_client::Error::SessionLost { .. }),
            ) => {
                tracing::warn!(conversation = %self.conv.id, session = %s, error = %e, "the daemon no longer has this thread's session");
                lock(&self.core.sessions).remove(&s);
                self.state.session = None;
                self.state.session_ready = false;
                Reload::Gone
            }
            Err(e) => Reload::NotNow(e),
        }
    }

    /// The edit that shows approval `p` closed: `heading` and `text` in place of its buttons
    /// (answered, expired, or no longer needed).
    pub(super) fn closed_approval(&self, p: &Pending, heading: &str, text: &str) -> ChatAction {
        let msg = render::permission(
            &self.core.redactor,
            &p.db_id,
            &p.title,
            &p.options,
            p.detail.as_deref(),
            Some((heading, text)),
        );
        effects::edit(
            &self.target,
            &MessageKey::Permission(p.db_id.clone()),
            msg,
            false,
        )
    }

    /// An approval expired unanswered (as rejected): its message says so, the daemon hears
    /// "cancelled".
    pub(super) async fn expire(&mut self, p: Pending) -> Result<()> {
        let mut tx = self.begin().await?;
        permissions::expire_due(tx.conn(), now_ms() + 1000).await?;
        let edit = self.closed_approval(&p, approvals::EXPIRED_HEADING, approvals::EXPIRED);
        self.enqueue(&mut tx, &edit).await?;
        self.commit(tx).await?;
        let _ = self
            .core
            .client
            .answer_permission(&p.request_id, &PermissionOutcome::Cancelled)
            .await;
        Ok(())
    }

    /// L3: the thread hears which limit fired; a resumed turn is closed as interrupted (D3);
    /// `on_stall = cancel` sends `session/cancel`.
    pub(super) async fn stalled(
        &mut self,
        stall: Stall,
        resumed: bool,
        cancel: bool,
    ) -> Result<()> {
        if let Some(turn) = self.state.turn.as_ref() {
            tracing::warn!(conversation = %self.conv.id, turn = %turn.row.id, kind = ?stall.kind, "turn stalled");
        }
        metrics::counter!("chatbridge_stalls_total", self.core.labels(&[])).increment(1);
        let (text, interrupted) = stall_text(&stall, resumed);
        self.notice(Tone::Warning, &text).await?;
        if interrupted {
            return self.end_turn(None, Some(TurnStatus::Interrupted)).await;
        }
        if cancel
            && self
                .cancel_unsent("Cancelled (on_stall = cancel) before it reached the agent.")
                .await?
        {
            return Ok(());
        }
        if cancel && let Some(s) = self.state.session.clone() {
            if let Err(e) = self.core.client.cancel(&s).await {
                tracing::warn!(error = %e, "cancel after stall failed");
            }
            self.notice(Tone::Neutral, "Cancelling it (on_stall = cancel).")
                .await?;
        }
        Ok(())
    }
}

/// What became of loading a resumed turn's session.
enum Reload {
    Loaded,
    /// The daemon answered that it does not have it (or there is none).
    Gone,
    /// The load failed on the way; nothing is known yet.
    NotNow(daemon_client::Error),
}

/// The first pause before a failed load of a resumed turn's session is tried again, doubling up to
/// [`RELOAD_AGAIN_CAP`].
const RELOAD_AGAIN_BASE: std::time::Duration = std::time::Duration::from_millis(500);
const RELOAD_AGAIN_CAP: std::time::Duration = std::time::Duration::from_secs(15);

/// Releases one busy count when dropped — after any queued turn has been started and counted.
struct BusyGuard(Arc<Core>);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.0.busy_add(-1);
    }
}

/// A turn's ending as its row stores it.
fn ending_row<'a>(
    ending: &crate::conversation::turn::Ending,
    stop: Option<&'a StopReason>,
    answer: Option<&'a str>,
) -> Ending<'a> {
    Ending {
        status: ending.status.as_str(),
        stop_reason: stop.map(StopReason::as_str),
        end_cause: ending.end_cause,
        answer,
    }
}
