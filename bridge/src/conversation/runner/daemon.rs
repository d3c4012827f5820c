//! Daemon events: tool calls (R1–R4), heartbeats and the progress line (F1, L5), permission
//! requests and their answers (R6, A3).

use daemon_client::{PermissionOutcome, PermissionRequest, ToolCallId, ToolInfo, ToolResult};
use tokio::time::Instant;

use super::Runner;
use crate::channel::Tone;
use crate::conversation::approvals::{self, Pending};
use crate::conversation::effects;
use crate::conversation::event::ToolOutcome;
use crate::conversation::state::{Line, scoped_id};
use crate::conversation::tools::{ToolState, Tools};
use crate::core::keys::{ButtonValue, MessageKey};
use crate::core::{ProgressWrite, render, write_progress};
use crate::store::transcript::NewEntry;
use crate::store::turns::Ending;
use crate::store::{Result, StoreError, Tx, now_ms, permissions, tool_calls};

/// What a tool's result writes to its call's row and transcript, whichever way it is written.
struct ResultRow<'a> {
    finish: &'a tool_calls::Finish<'a>,
    /// Heartbeats not yet written, and the progress that goes with them.
    heartbeats: i64,
    progress: Option<&'a str>,
    /// The transcript line: the result's summary (or its outcome), as stored.
    line: &'a str,
}

impl Runner {
    /// A running call's title changed: stored, and its message edited.
    pub(super) async fn retitle(
        &mut self,
        call: &ToolCallId,
        title: &str,
        kind: Option<&str>,
    ) -> Result<()> {
        let scoped = self.state.scoped(call);
        self.state.tool_edited(call);
        let mut tx = self.begin().await?;
        tool_calls::start(
            tx.conn(),
            &self.conv.id,
            None,
            &scoped,
            &self.kept(title),
            kind,
            now_ms(),
        )
        .await?;
        let msg = render::tool_running(&self.core.redactor, title, None);
        let key = MessageKey::Tool(scoped);
        self.enqueue(&mut tx, &effects::edit(&self.target, &key, msg, false))
            .await?;
        self.commit(tx).await
    }

    pub(super) async fn on_tool_started(&mut self, call: ToolCallId, info: ToolInfo) -> Result<()> {
        let scoped = self.state.scoped(&call);
        let Some(turn) = self.state.turn.as_ref() else {
            return Ok(());
        };
        let turn_id = turn.row.id.clone();
        let title = info.title.clone().unwrap_or_else(|| "tool".into());
        let mut c = self.core.store.conn().await?;
        if let Some(known) = tool_calls::by_call_id(&mut c, &self.conv.id, &scoped).await? {
            if known.status == "running" {
                // Replayed after a restart or reconnect: the thread already shows it; follow it
                // again, running since it started (its progress line and its result's duration
                // count from then, not from now).
                self.state.tool_running(
                    call.clone(),
                    known.title,
                    since_stored(known.started_at),
                    false,
                );
                self.state.tool_stored(&call, known.id);
            }
            // Finished already: nothing to show again.
            return Ok(());
        }
        drop(c);
        // The text before this call is not the answer (R5): its draft shows it whole, before the
        // tool's message.
        if let Some(turn) = self.state.turn.as_mut()
            && let Some(d) = turn.draft.take()
        {
            let text = turn.answer.clone();
            self.show_draft(d.seq, &text, true).await?;
        }
        let mut tx = self.begin().await?;
        let kept_title = self.kept(&title).into_owned();
        let db_id = tool_calls::start(
            tx.conn(),
            &self.conv.id,
            Some(&turn_id),
            &scoped,
            &kept_title,
            info.kind.as_deref(),
            now_ms(),
        )
        .await?;
        tracing::debug!(tool_call = %db_id, "tool started");
        self.record(
            &mut tx,
            Some(&turn_id),
            "tool_started",
            "agent",
            &kept_title,
            Some(&db_id),
        )
        .await?;
        let msg = render::tool_running(&self.core.redactor, &title, None);
        let key = MessageKey::Tool(scoped);
        self.enqueue(&mut tx, &effects::post(&self.target, &key, msg))
            .await?;
        self.commit(tx).await?;
        self.state
            .tool_running(call.clone(), title, Instant::now(), true);
        self.state.tool_stored(&call, db_id);
        Ok(())
    }

    pub(super) async fn on_tool_finished(
        &mut self,
        call: ToolCallId,
        result: ToolResult,
    ) -> Result<()> {
        let Some(turn) =
            self.state.turn.as_ref().filter(|t| {
                t.tools.contains_key(&call) || !self.state.unfinished.contains_key(&call)
            })
        else {
            return self.on_late_tool_finished(call, result).await;
        };
        let turn_id = turn.row.id.clone();
        let tool = self
            .state
            .tool_done(&call, ToolOutcome::from(result.outcome));
        let took = tool.as_ref().and_then(ToolState::took);
        if let Err(e) = self
            .write_tool_result(&call, &turn_id, &result, tool.as_ref(), took)
            .await
        {
            // Nothing was written: the call stays running with its unwritten heartbeat counts, so
            // the step's retry writes the result as it would have now.
            self.state.tool_undone(call, tool);
            return Err(e);
        }
        self.tool_took(&result, took);
        Ok(())
    }

    /// A finished call's duration, for the histogram.
    pub(super) fn tool_took(&self, result: &ToolResult, took: Option<std::time::Duration>) {
        if let Some(took) = took {
            metrics::histogram!(
                "chatbridge_tool_duration_seconds",
                self.core.labels(&[("outcome", result.outcome.as_str())])
            )
            .record(took.as_secs_f64());
        }
    }

    /// Calls of this conversation's ended turns that the store still has running (the turn ended
    /// before their results, and the bridge restarted or let the conversation go since): kept, so
    /// a result that still comes finishes its call where it is shown.
    pub(super) async fn load_unfinished(&mut self) {
        let Some(session) = self.state.session.clone() else {
            return;
        };
        let rows = match self.core.store.read_conn().await {
            Ok(mut c) => tool_calls::running_after_their_turn(&mut c, &self.conv.id).await,
            Err(e) => Err(e),
        };
        let rows = match rows {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(conversation = %self.conv.id, error = %e, "the calls still running after their turns could not be read; their results will be posted as late work");
                return;
            }
        };
        let prefix = format!("{session}/");
        let mut by_turn: std::collections::HashMap<String, Tools> = Default::default();
        for row in rows {
            let (Some(turn), Some(call)) = (
                row.turn_id,
                row.call_id
                    .strip_prefix(&prefix)
                    .and_then(|c| ToolCallId::parse(c).ok()),
            ) else {
                continue;
            };
            let mut tool = ToolState::new(row.title, since_stored(row.started_at));
            tool.stored_id = Some(row.id);
            tool.edits_queued = true;
            by_turn.entry(turn).or_default().insert(call, tool);
        }
        for (turn, tools) in by_turn {
            self.state.keep_unfinished(&turn, tools);
        }
    }

    /// The result of a call still running when its turn ended: its message and row are finished
    /// as if it had come in time (the turn's own ending stands).
    async fn on_late_tool_finished(&mut self, call: ToolCallId, result: ToolResult) -> Result<()> {
        let Some((turn_id, tool)) = self.state.unfinished.remove(&call) else {
            return Ok(());
        };
        let took = tool.took();
        if let Err(e) = self
            .write_tool_result(&call, &turn_id, &result, Some(&tool), took)
            .await
        {
            // Nothing was written: the step's retry finds it as it was.
            self.state.unfinished.insert(call, (turn_id, tool));
            return Err(e);
        }
        Ok(())
    }

    /// A tool's result, in one transaction: its row finished (with its last heartbeat counts), the
    /// transcript line, and its message edited into the result.
    async fn write_tool_result(
        &mut self,
        call: &ToolCallId,
        turn_id: &str,
        result: &ToolResult,
        tool: Option<&ToolState>,
        took: Option<std::time::Duration>,
    ) -> Result<()> {
        self.write_tool_result_in(None, None, call, turn_id, result, tool, took)
            .await
            .map(|_| ())
    }

    /// [`Runner::write_tool_result`], in `within` when given: then nothing is committed (the
    /// caller commits it with the rest of its step and counts the result written) and the call's
    /// stored id is returned, `None` when it was recorded already (a replay). With `ending` (and
    /// no `within`) the result is written only as one statement that also closes its turn
    /// (`turn_id`) so: `None` when that does not apply, and then nothing is written.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn write_tool_result_in(
        &mut self,
        within: Option<&mut Tx>,
        ending: Option<&Ending<'_>>,
        call: &ToolCallId,
        turn_id: &str,
        result: &ToolResult,
        tool: Option<&ToolState>,
        took: Option<std::time::Duration>,
    ) -> Result<Option<String>> {
        let scoped = self.state.scoped(call);
        let title = tool.map_or_else(|| "tool".to_owned(), |t| t.title.clone());
        let kept_summary = result.summary.as_deref().map(|s| self.kept(s));
        let kept_output = self.kept(&result.output);
        let finish = tool_calls::Finish {
            outcome: ToolOutcome::from(result.outcome).as_str(),
            summary: kept_summary.as_deref(),
            output: &kept_output,
            exit_code: result.exit_code,
            signal: result.signal,
        };
        // This tool's unwritten heartbeat count goes into the result's own statement: the result
        // never waits for a separate write (P2).
        let counts = tool.filter(|t| t.unflushed > 0);
        let progress = counts.and_then(ToolState::progress_json);
        let unflushed = counts.map_or(0, |t| t.unflushed);
        let summary = result
            .summary
            .clone()
            .unwrap_or_else(|| result.outcome.as_str().to_owned());
        let row = ResultRow {
            finish: &finish,
            heartbeats: unflushed,
            progress: progress.as_deref(),
            line: &self.kept(&summary),
        };
        let mut own = None;
        let tx = match within {
            Some(tx) => tx,
            None => {
                let ending = ending.map(|e| (turn_id, e));
                if self
                    .write_tool_result_at_once(&scoped, turn_id, result, tool, took, &row, ending)
                    .await?
                {
                    return Ok(tool.and_then(|t| t.stored_id.clone()));
                }
                if ending.is_some() {
                    return Ok(None);
                }
                own.insert(self.begin().await?)
            }
        };
        if tool.is_none() {
            // Started before a restart, or never announced: make sure the row exists.
            tool_calls::start(
                tx.conn(),
                &self.conv.id,
                Some(turn_id),
                &scoped,
                "",
                None,
                now_ms(),
            )
            .await?;
        }
        let Some(db_id) = tool_calls::finish_counted(
            tx.conn(),
            &self.conv.id,
            &scoped,
            &finish,
            unflushed,
            progress.as_deref(),
            now_ms(),
        )
        .await?
        else {
            // Already recorded (a replay): the thread already shows it.
            return Ok(None);
        };
        let title = match tool {
            Some(_) => title,
            None => tool_calls::get(tx.conn(), &db_id)
                .await?
                .map_or(title, |t| t.title),
        };
        self.record(
            tx,
            Some(turn_id),
            "tool_finished",
            "agent",
            row.line,
            Some(&db_id),
        )
        .await?;
        let msg = self.result_message(&title, result, took, &db_id);
        let key = MessageKey::Tool(scoped);
        // No edit of the message can wait in the outbox when none was queued since its post in
        // this process: the result's edit is queued without looking for one to replace.
        let replaces = tool.is_none_or(|t| t.edits_queued);
        self.enqueue_as(tx, &effects::edit(&self.target, &key, msg, false), replaces)
            .await?;
        if let Some(tx) = own {
            self.commit(tx).await?;
            self.result_written(result, &db_id);
        }
        Ok(Some(db_id))
    }

    /// [`Runner::write_tool_result`] as one statement on PostgreSQL, for the usual result: a call
    /// this process follows (its row's id known), no edit of its message waiting in the outbox,
    /// no inbox entry to mark. One round trip instead of five — at 10,000 sessions the database's
    /// CPU goes more to round trips than to the statements' work (P2). `false` when it does not
    /// apply or wrote nothing (a replay of a finished call): the transaction then does what it
    /// always did.
    #[allow(clippy::too_many_arguments)]
    async fn write_tool_result_at_once(
        &mut self,
        scoped: &str,
        turn_id: &str,
        result: &ToolResult,
        tool: Option<&ToolState>,
        took: Option<std::time::Duration>,
        row: &ResultRow<'_>,
        ending: Option<(&str, &Ending<'_>)>,
    ) -> Result<bool> {
        let Some(t) = tool else { return Ok(false) };
        let Some(db_id) = t.stored_id.as_deref() else {
            return Ok(false);
        };
        if t.edits_queued
            || !self.state.marks.is_empty()
            || self.core.store.backend() != crate::store::Backend::Postgres
        {
            return Ok(false);
        }
        let entry = NewEntry {
            turn_id: Some(turn_id),
            kind: "tool_finished",
            actor: Some("agent"),
            body: row.line,
            tool_call_id: Some(db_id),
        };
        let msg = self.result_message(&t.title, result, took, db_id);
        let action = effects::edit(
            &self.target,
            &MessageKey::Tool(scoped.to_owned()),
            msg,
            false,
        );
        let json = super::write::serialized(&action)?;
        let queued = self.outbox_row(&action, &json);
        let mut c = self.core.store.write_conn().await?;
        let written = tool_calls::finish_with_result(
            &mut c,
            &self.conv.id,
            scoped,
            db_id,
            row.finish,
            row.heartbeats,
            row.progress,
            &entry,
            &queued,
            ending,
            now_ms(),
        )
        .await?;
        drop(c);
        if written.is_none() {
            return Ok(false);
        }
        self.core.wake_outbox.notify_one();
        self.result_written(result, db_id);
        Ok(true)
    }

    /// A tool's result message: its outcome, output and duration, with the pointer to its whole
    /// output the configuration asks for.
    fn result_message(
        &self,
        title: &str,
        result: &ToolResult,
        took: Option<std::time::Duration>,
        db_id: &str,
    ) -> crate::channel::Message {
        let msg = render::tool_finished(
            &self.core.redactor,
            title,
            result,
            took,
            db_id,
            self.core.cfg.output_cap,
        );
        match (&self.core.cfg.ui_pointer, self.core.cfg.api_pointer) {
            (Some(base), _) => render::with_ui_pointer(msg, base),
            (None, true) => msg,
            (None, false) => render::without_api_pointer(msg),
        }
    }

    /// Counted and logged once a tool's result is written.
    pub(super) fn result_written(&self, result: &ToolResult, db_id: &str) {
        metrics::counter!(
            "chatbridge_tool_results_total",
            self.core.labels(&[("outcome", result.outcome.as_str())])
        )
        .increment(1);
        // R4: ids and the short outcome only — never output or prompt text.
        tracing::info!(conversation = %self.conv.id, tool_call = %db_id, outcome = result.outcome.as_str(), "tool finished");
    }

    /// Hands accumulated heartbeat counts and progress to the progress writer, at most every
    /// `progress_flush` (or now). Never waits for the database: counts the writer cannot take yet
    /// stay here for the next flush.
    pub(super) fn flush_progress(&mut self, force: bool) {
        let due = self.progress_due(force);
        for (call, w) in due {
            if self.core.queue_progress(w) {
                self.progress_written(&[call]);
            }
        }
    }

    /// Writes the heartbeat counts not written yet, now and on a connection of its own: at shutdown
    /// the progress writer may already have stopped taking them, and a long command must not keep
    /// fewer heartbeats than it had (F1: its count is the proof it was alive).
    pub(super) async fn write_progress_now(&mut self) -> Result<()> {
        let (calls, writes): (Vec<ToolCallId>, Vec<ProgressWrite>) =
            self.progress_due(true).into_iter().unzip();
        if writes.is_empty() {
            return Ok(());
        }
        write_progress(&self.core.store, &writes).await?;
        self.progress_written(&calls);
        Ok(())
    }

    /// The running calls' heartbeat counts due to be written (every count held, with `force`):
    /// once per `progress_flush` otherwise.
    fn progress_due(&self, force: bool) -> Vec<(ToolCallId, ProgressWrite)> {
        let Some(turn) = self.state.turn.as_ref() else {
            return Vec::new();
        };
        let (every, now) = (self.core.cfg.progress_flush, Instant::now());
        turn.tools
            .iter()
            .filter(|(_, t)| t.flush_due(now, every, force))
            .map(|(call, t)| {
                let w = ProgressWrite {
                    conversation: self.conv.id.clone(),
                    call: scoped_id(self.state.session.as_ref(), call),
                    heartbeats: t.unflushed,
                    progress: t.progress_json(),
                };
                (call.clone(), w)
            })
            .collect()
    }

    /// The counts of `calls` were handed over (to the writer, or written).
    fn progress_written(&mut self, calls: &[ToolCallId]) {
        let now = Instant::now();
        if let Some(turn) = self.state.turn.as_mut() {
            for call in calls {
                if let Some(t) = turn.tools.get_mut(call) {
                    t.flushed_at(now);
                }
            }
        }
    }

    /// L5: edits the tool's message into its progress line. Never a new message.
    pub(super) async fn show_line(&mut self, line: Option<Line>) -> Result<()> {
        let Some(line) = line else {
            return Ok(());
        };
        let msg = render::tool_running(
            &self.core.redactor,
            &line.title,
            Some((line.elapsed, line.age)),
        );
        let key = MessageKey::Tool(self.state.scoped(&line.call));
        self.state.tool_edited(&line.call);
        let mut tx = self.begin().await?;
        self.enqueue(&mut tx, &effects::edit(&self.target, &key, msg, true))
            .await?;
        self.commit(tx).await
    }

    pub(super) async fn on_permission(&mut self, req: PermissionRequest) -> Result<()> {
        let (req, requester) =
            self.state
                .permission(req, &self.conv.started_by, Instant::now(), &self.core.cfg);
        let title = req
            .info
            .title
            .clone()
            .unwrap_or_else(|| "a tool call".into());
        let options_json =
            serde_json::to_string(&req.options).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let request_json = serde_json::to_string(&req.request_id)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let timeout = self.core.cfg.permission_timeout;
        let scoped_call = req.call.as_ref().map(|c| self.state.scoped(c));
        let mut tx = self.begin().await?;
        let kept_title = self.kept(&title).into_owned();
        let new = permissions::NewRequest {
            conversation_id: &self.conv.id,
            turn_id: self.state.turn.as_ref().map(|t| t.row.id.as_str()),
            request_id: &request_json,
            call_id: scoped_call.as_deref(),
            title: &kept_title,
            options: &options_json,
            requester: &requester,
            expires_at: now_ms() + crate::store::ms(timeout),
        };
        let id = permissions::create(tx.conn(), &new, now_ms()).await?;
        let detail = req.input.as_ref().and_then(|input| {
            render::tool_input(&self.core.redactor, req.info.tool_name.as_deref(), input)
        });
        let msg = render::permission(
            &self.core.redactor,
            &id,
            &title,
            &req.options,
            detail.as_deref(),
            None,
        );
        let key = MessageKey::Permission(id.clone());
        self.enqueue(&mut tx, &effects::post(&self.target, &key, msg))
            .await?;
        self.commit(tx).await?;
        self.state.approval_asked(req.call.as_ref(), &id);
        if let Some(call) = &req.call
            && self
                .state
                .turn
                .as_ref()
                .is_some_and(|t| t.tools.contains_key(call))
        {
            // The call's message names what will run, not the tool's generic name.
            self.retitle(call, &title, req.info.kind.as_deref()).await?;
        }
        self.state.approvals.ask(Pending {
            db_id: id,
            request_id: req.request_id,
            title,
            options: req.options,
            requester,
            expires: Instant::now() + timeout,
            detail,
        });
        if self
            .core
            .input_ended
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            // Asked after the input ended (a prompt queued before it): nobody can answer.
            return self.on_input_ended().await;
        }
        Ok(())
    }

    pub(super) async fn on_button(&mut self, user: &str, value: &str) -> Result<()> {
        match value.parse::<ButtonValue>() {
            Ok(ButtonValue::Permission { request, option }) => {
                self.decide(user, &request, &option).await
            }
            Err(_) => {
                // Hostile until parsed: the value itself is not logged.
                tracing::info!(conversation = %self.conv.id, "a click with an unknown value was ignored");
                Ok(())
            }
        }
    }

    /// Marks a request asked before a restart as lapsed and takes its buttons away; `false` when it
    /// was no longer pending.
    pub(super) async fn lapse(
        &self,
        tx: &mut Tx,
        row: &permissions::PermissionRow,
    ) -> Result<bool> {
        if permissions::resolve(tx.conn(), &row.id, "bridge", "lapsed", now_ms())
            .await?
            .is_none()
        {
            return Ok(false);
        }
        let options: Vec<daemon_client::PermissionOption> =
            serde_json::from_str(&row.options).unwrap_or_default();
        let msg = render::permission(
            &self.core.redactor,
            &row.id,
            &row.title,
            &options,
            None,
            Some((approvals::LAPSED_HEADING, approvals::LAPSED)),
        );
        let key = MessageKey::Permission(row.id.clone());
        self.enqueue(tx, &effects::edit(&self.target, &key, msg, false))
            .await?;
        Ok(true)
    }

    /// R6: only the requester and configured approvers may decide; the first decision wins.
    pub(super) async fn decide(&mut self, user: &str, id: &str, option: &str) -> Result<()> {
        let Some(p) = self.state.approvals.get(id) else {
            // Answered already, or asked before a restart: tell only the clicker.
            let mut tx = self.begin().await?;
            let lapsed = match permissions::get(tx.conn(), id).await? {
                Some(row) if row.conversation_id == self.conv.id => {
                    self.lapse(&mut tx, &row).await?
                }
                _ => false,
            };
            let text = if lapsed {
                "That approval lapsed when the bridge restarted (the agent's question went with the old connection); send the message again if it still matters."
            } else {
                "That approval is no longer pending."
            };
            self.enqueue(
                &mut tx,
                &effects::ephemeral(&self.target, user, text.to_owned()),
            )
            .await?;
            return self.commit(tx).await;
        };
        let requester = p.requester.clone();
        let offered: Vec<String> = p.option_ids().into_iter().map(str::to_owned).collect();
        let offered: Vec<&str> = offered.iter().map(String::as_str).collect();
        let members = self.members().await?;
        let verdict = self.roles(&members).may_answer(
            user,
            &requester,
            option,
            &offered,
            self.core.cfg.require_second_person,
        );
        if let Err(refusal) = verdict {
            // Only the clicker hears about it (ephemeral where the platform has it).
            tracing::info!(conversation = %self.conv.id, refusal = ?refusal, "an approval answer was refused");
            crate::metrics::access_refused(&self.conv.platform);
            let text = self
                .core
                .redactor
                .redact(&refusal.text(&self.person(&self.conv.started_by)));
            let mut tx = self.begin().await?;
            self.enqueue(&mut tx, &effects::ephemeral(&self.target, user, text))
                .await?;
            return self.commit(tx).await;
        }
        let Some(p) = self.state.approvals.take(id) else {
            return Ok(());
        };
        let label = p.label(option);
        match self.write_decision(&p, user, option, &label).await {
            Ok(true) => {}
            // Decided elsewhere meanwhile (another replica, an expiry): the first decision wins.
            Ok(false) => return Ok(()),
            Err(e) => {
                // Nothing was written: the question still waits, so the step's retry decides it.
                self.state.approvals.ask(p);
                return Err(e);
            }
        }
        self.state.approval_closed(&p, Some(option), Instant::now());
        if let Err(e) = self
            .core
            .client
            .answer_permission(
                &p.request_id,
                &PermissionOutcome::Selected(option.to_owned()),
            )
            .await
        {
            return self
                .notice(
                    Tone::Error,
                    &format!("Could not pass the decision to the agent: {e}"),
                )
                .await;
        }
        Ok(())
    }

    /// A decision, in one transaction: the request resolved, its message edited to say who
    /// decided what, the transcript line. `false` when it was already decided.
    async fn write_decision(
        &mut self,
        p: &Pending,
        user: &str,
        option: &str,
        label: &str,
    ) -> Result<bool> {
        let mut tx = self.begin().await?;
        if permissions::resolve(tx.conn(), &p.db_id, user, option, now_ms())
            .await?
            .is_none()
        {
            return Ok(false);
        }
        let who = self.person(user);
        let heading = approvals::decided_heading(&who, p.kind(option), label);
        let shown = approvals::decided_text(&who, label);
        let edit = self.closed_approval(p, &heading, &shown);
        let decided = approvals::decided_text(user, label);
        self.enqueue(&mut tx, &edit).await?;
        self.record(&mut tx, None, "permission", user, &decided, None)
            .await?;
        self.commit(tx).await?;
        Ok(true)
    }
}

/// The moment a call started, from its stored start (milliseconds since the epoch): a call
/// followed again after a restart runs since then, not since now.
fn since_stored(started_at: i64) -> Instant {
    let ran = u64::try_from(now_ms().saturating_sub(started_at)).unwrap_or(0);
    let now = Instant::now();
    now.checked_sub(std::time::Duration::from_millis(ran))
        .unwrap_or(now)
}
