//! Messages: what one means (a command, a numbered answer, a prompt), who may do it (A2), the queue
//! behind a running turn, starting a turn and its session.

use base64::Engine as _;
use daemon_client::{PromptBlock, SessionId};

use super::Runner;
use crate::channel::{Attachment, Inbound, InboundKind, Tone};
use crate::conversation::effects;
use crate::conversation::event::Mark;
use crate::conversation::event::{Event, Said, TurnStatus};
use crate::conversation::files::{self, Use};
use crate::conversation::inbox::EventKey;
use crate::conversation::speaker;
use crate::conversation::turn::{Queued, TurnState, Unsent};
use crate::core::ConvMsg;
use crate::core::access::{self, Act, Refusal};
use crate::core::lock;
use crate::store::turns::{self, Turn};
use crate::store::{Result, conversations, members, now_ms};

impl Runner {
    /// One inbound event; the first transaction that acts on it marks it handled (a prompt: the one
    /// that starts its turn).
    pub(super) async fn on_inbound_event(&mut self, m: Inbound, event: EventKey) -> Result<()> {
        self.state.marks.add(Some(event));
        self.on_inbound(m).await
    }

    async fn on_inbound(&mut self, m: Inbound) -> Result<()> {
        let (text, files) = match m.kind {
            InboundKind::Action(value) => return self.on_button(&m.user, &value).await,
            InboundKind::Message(text) => (text, Vec::new()),
            InboundKind::Files { text, files } => (text, files),
        };
        if self.core.cfg.require_mention_in_threads && !m.opens {
            // Not addressed to the bot (mention etiquette): context for its next prompt.
            return self.unaddressed(&m.user, &text).await;
        }
        if self.answers_no_approval(&text, &files).await? {
            let shown = text.trim();
            return self
                .notice(
                    Tone::Warning,
                    &format!(
                        "No approval is waiting any more — the last one lapsed with a restart, expired or was closed — so `{shown}` was not sent to the agent. Send your request again if it still matters."
                    ),
                )
                .await;
        }
        // A2 needs the thread's members for anything but reading: read once, kept by the state.
        if !files.is_empty()
            || self
                .state
                .parse(&text)
                .act()
                .is_some_and(|act| act != Act::Read)
        {
            self.members().await?;
        }
        let said = Said {
            user: m.user,
            text,
            message_id: m.message_id,
            event: Some((m.platform, m.event_id)),
            files,
        };
        for effect in self.handle(Event::Message(said)) {
            self.apply(effect).await?;
        }
        Ok(())
    }

    /// A bare number while no approval waits, in a thread where one went unanswered within the
    /// approval timeout: an answer that came too late (or, typed just before a crash, was taken again
    /// after the restart lapsed its approval) — not a prompt: to an agent "1" reads as "go ahead".
    async fn answers_no_approval(&self, text: &str, files: &[Attachment]) -> Result<bool> {
        if !self.state.approvals.is_empty()
            || !files.is_empty()
            || text.trim().parse::<u16>().is_err()
        {
            return Ok(false);
        }
        let timeout =
            i64::try_from(self.core.cfg.permission_timeout.as_millis()).unwrap_or(i64::MAX);
        let since = now_ms().saturating_sub(timeout);
        let mut c = self.core.store.conn().await?;
        crate::store::permissions::unanswered_since(&mut c, &self.conv.id, since).await
    }

    /// A prompt: 👀 on the person's message (it may wait in the queue), then it starts a turn,
    /// waits, or finds the queue full.
    pub(super) async fn prompt(&mut self, q: Queued) -> Result<()> {
        // A prompt is handled when its turn starts (or when it is refused), not by the 👀.
        if let Some(e) = &q.event {
            self.state.marks.take(e);
        }
        if let Some(id) = &q.message_id {
            let mut tx = self.begin().await?;
            self.enqueue(
                &mut tx,
                &effects::react(&self.target, id, Mark::Received, true),
            )
            .await?;
            self.commit(tx).await?;
        }
        for effect in self.handle(Event::Prompt(q)) {
            self.admitted(effect).await?;
        }
        Ok(())
    }

    /// Starts a turn for a prompt; its inbox entries (its own and those merged into it) are marked
    /// in the transaction that records the turn (or in the notice that says it could not start).
    pub(super) async fn start_turn(&mut self, q: Queued) -> Result<()> {
        let (user, message_id) = (q.user.clone(), q.message_id.clone());
        let text = q.typed();
        let files = q.all_files();
        let limits = self.core.file_limits();
        let uses = files::plan(&files, &limits);
        if text.trim().is_empty() && uses.iter().all(|u| matches!(u, Use::Refuse(_))) {
            // Nothing to send: the person hears why each file was not used, and no turn starts.
            self.core.busy_add(-1);
            for e in q.events() {
                self.state.marks.add(Some(e));
            }
            let refused = refusals(&files, &uses);
            let refused: Vec<(&str, &str)> = refused
                .iter()
                .map(|(n, w)| (n.as_str(), w.as_str()))
                .collect();
            let text =
                files::refusal_notice(&self.core.redactor, &refused, false).unwrap_or_default();
            return self.notice_lines_redacted(Tone::Warning, &text).await;
        }
        if let Err(e) = self.prepare_checkout().await {
            tracing::warn!(conversation = %self.conv.id, error = %e, "could not prepare a thread's worktree");
            self.core.busy_add(-1);
            for e in q.events() {
                self.state.marks.add(Some(e));
            }
            return self
                .notice(
                    Tone::Error,
                    &format!("Could not prepare this thread's own checkout: {e}. Your message was not sent; try again."),
                )
                .await;
        }
        let reached = if self
            .core
            .daemon_connected
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            self.ensure_session().await
        } else {
            Err(daemon_client::Error::ConnectionLost)
        };
        let session = match reached {
            Ok(s) => s,
            Err(e) if e.is_retryable() => {
                // Held, not dropped (L7): still counted as busy, its inbox entry still unhandled.
                tracing::info!(conversation = %self.conv.id, "the agent is unreachable; the prompt is held until it is back");
                // The whole prompt is held, with its note and what was merged into it.
                if let Ok(mut c) = self.core.store.write_conn().await {
                    for (platform, id) in q.events() {
                        let _ = crate::store::inbound::taken(&mut c, &platform, &id).await;
                    }
                }
                for effect in self.handle(Event::Unreachable(q)) {
                    Box::pin(self.apply(effect)).await?;
                }
                return Ok(());
            }
            Err(e) => {
                self.core.busy_add(-1);
                for e in q.events() {
                    self.state.marks.add(Some(e));
                }
                // The daemon answered, but no: not a connection problem (e.g. it refuses a
                // session in this directory).
                let text = if matches!(e, daemon_client::Error::Rpc { .. }) {
                    format!(
                        "The agent would not open a session for this thread: {e}. Your message was not sent."
                    )
                } else {
                    format!("Cannot reach the agent: {e}. Your message was not sent; try again.")
                };
                return self.notice(Tone::Error, &text).await;
            }
        };
        // Files to download: the turn is recorded (and its inbox entries marked) when its prompt
        // is sent, so a restart meanwhile takes the message again (`on_files_ready`).
        let downloads = uses.iter().any(|u| !matches!(u, Use::Refuse(_)));
        if !downloads {
            for e in q.events() {
                self.state.marks.add(Some(e));
            }
        }
        // Read before the turn's prompt is recorded: what was said since the last one.
        let context = self.context().await;
        let row = if downloads {
            Turn {
                id: crate::store::new_id(),
                conversation_id: self.conv.id.clone(),
                seq: 0,
                prompt: self.kept(&text).into_owned(),
                requested_by: user.clone(),
                status: "open".into(),
                stop_reason: None,
                end_cause: None,
                answer: None,
                started_at: now_ms(),
                ended_at: None,
                message_id: message_id.clone(),
            }
        } else {
            match self.record_turn(&text, &user, message_id.as_deref()).await {
                Ok(row) => row,
                Err(e) => {
                    // Not started: no longer busy (a retry counts itself again).
                    self.core.busy_add(-1);
                    return Err(e);
                }
            }
        };
        tracing::info!(conversation = %self.conv.id, turn = %row.id, session = %session, "turn started");
        let turn_id = row.id.clone();
        self.state.prompt_seq += 1;
        let seq = self.state.prompt_seq;
        let mut turn = TurnState::new(
            row,
            self.core.cfg.liveness.clone(),
            tokio::time::Instant::now(),
            false,
            seq,
        );
        turn.user_message = message_id;
        turn.merged_messages = q.merged_messages();
        self.state.turn = Some(turn);
        // Who said it goes along (several people may write in one thread); the history keeps
        // what they typed.
        let for_agent = self.for_agent(&q, &context).await;
        let job = Downloads {
            conversation: self.conv.id.clone(),
            fetch: self.core.fetcher(),
            limits,
            cwd: self.attachments_dir(),
            text: for_agent,
            attached: files,
            uses,
            turn: turn_id,
        };
        if job.uses.iter().any(|u| !matches!(u, Use::Refuse(_))) {
            // Downloads run beside the runner, which stays free for `/cancel` and follow-ups; the
            // prompt is sent when they are done (`on_files_ready`), unless the turn was cancelled.
            let stop = self.core.shutdown.child_token();
            let events = q.events();
            // Waiting, not failing: restarts meanwhile do not count against it (S4).
            if let Ok(mut c) = self.core.store.write_conn().await {
                for (platform, id) in &events {
                    let _ = crate::store::inbound::taken(&mut c, platform, id).await;
                }
            }
            if let Some(turn) = self.state.turn.as_mut() {
                turn.downloading = Some(Unsent {
                    stop: stop.clone(),
                    events,
                    text,
                    user,
                });
            }
            let tx = self.tx.clone();
            self.core.tasks.spawn(async move {
                let (blocks, refused) = tokio::select! {
                    r = take_files(job) => r,
                    () = stop.cancelled() => return,
                };
                let ready = crate::core::FilesReady {
                    seq,
                    blocks,
                    refused,
                };
                let _ = tx.send(ConvMsg::FilesReady(Box::new(ready))).await;
            });
            return Ok(());
        }
        let (blocks, refused) = take_files(job).await;
        self.send_prompt(session, seq, blocks, refused).await
    }

    /// The files of prompt `seq` were downloaded: its prompt is sent, unless its turn ended
    /// meanwhile (`/cancel`: then nothing goes to the daemon).
    pub(super) async fn on_files_ready(
        &mut self,
        seq: u64,
        blocks: Vec<PromptBlock>,
        refused: Vec<(String, String)>,
    ) -> Result<()> {
        let Some(turn) = self.state.turn.as_mut().filter(|t| t.prompt_seq == seq) else {
            return Ok(());
        };
        let Some(unsent) = turn.downloading.take() else {
            return Ok(());
        };
        // The wait for the files was not the agent's silence (L1, L2 count from the prompt).
        turn.liveness = daemon_client::Liveness::new(
            self.core.cfg.liveness.clone(),
            tokio::time::Instant::now(),
        );
        // Recorded now, with its inbox entries marked handled: from here it is a turn the agent
        // may have got (D6).
        for e in &unsent.events {
            self.state.marks.add(Some(e.clone()));
        }
        let message = self
            .state
            .turn
            .as_ref()
            .and_then(|t| t.user_message.clone());
        match self
            .record_turn(&unsent.text, &unsent.user, message.as_deref())
            .await
        {
            Ok(row) => {
                tracing::info!(conversation = %self.conv.id, turn = %row.id, "its files are in; the prompt goes out");
                if let Some(turn) = self.state.turn.as_mut() {
                    turn.row = row;
                }
            }
            Err(e) => {
                // Not recorded: its message stays in the inbox for the next start.
                for ev in &unsent.events {
                    self.state.marks.take(ev);
                }
                self.state.turn = None;
                self.core.busy_add(-1);
                return Err(e);
            }
        }
        // A reconnect meanwhile: the session is loaded again on the new connection (L6).
        let session = match self.ensure_session().await {
            Ok(s) => s,
            Err(e) => {
                self.notice(
                    Tone::Error,
                    &format!("Cannot reach the agent: {e}. Your message was not sent; try again."),
                )
                .await?;
                return self.end_turn(None, Some(TurnStatus::Failed)).await;
            }
        };
        self.send_prompt(session, seq, blocks, refused).await
    }

    /// A cancel of a turn whose prompt has not been sent (its files are downloading): the
    /// downloads stop, the turn ends cancelled here with `text` in the thread, and the daemon
    /// hears nothing. `false` when there is no such turn (its prompt was sent, or none runs).
    pub(super) async fn cancel_unsent(&mut self, text: &str) -> Result<bool> {
        let Some(unsent) = self.state.turn.as_mut().and_then(|t| t.downloading.take()) else {
            return Ok(false);
        };
        unsent.stop.cancel();
        // Handled: the turn's end marks its inbox entries.
        for e in unsent.events {
            self.state.marks.add(Some(e));
        }
        tracing::info!(conversation = %self.conv.id, "a turn cancelled before its prompt was sent");
        self.state
            .record_cancel(tokio::time::Instant::now(), self.core.cfg.cancel_grace);
        self.notice(Tone::Neutral, text).await?;
        self.end_turn(None, Some(TurnStatus::Cancelled)).await?;
        Ok(true)
    }

    /// Whether the running turn's prompt waits for its files (nothing was sent to the daemon).
    pub(super) fn unsent(&self) -> bool {
        self.state
            .turn
            .as_ref()
            .is_some_and(|t| t.downloading.is_some())
    }

    /// D6: a turn taken back after a restart whose prompt the load's replay does not show — the
    /// bridge stopped after recording it as sent and before the daemon got it. It is sent now, once,
    /// when the daemon's last prompt (`last`, as it keeps it) is provably the one of the turn
    /// before; otherwise nothing is sent and the turn is left to the idle limit, which reports it
    /// interrupted, not re-run. Not when the store keeps prompts redacted or with a NUL shown as
    /// `␀`: what was sent is then not what the store holds.
    pub(super) async fn send_again(&mut self, last: String) -> Result<()> {
        let Some(row) = self
            .state
            .turn
            .as_ref()
            .filter(|t| crate::conversation::replay::never_reached(t))
            .map(|t| t.row.clone())
        else {
            return Ok(());
        };
        let Some(session) = self.state.session.clone() else {
            return Ok(());
        };
        let exact = !self.core.cfg.redact_store && !row.prompt.contains('\u{2400}');
        if !exact {
            tracing::info!(conversation = %self.conv.id, turn = %row.id, "the agent's history does not show this turn's prompt, but the store keeps it redacted or with a NUL shown as ␀, not as it was sent: not sent again");
            return Ok(());
        }
        let before = {
            let mut c = self.core.store.conn().await?;
            turns::of_conversation(&mut c, &self.conv.id)
                .await?
                .into_iter()
                .filter(|t| t.seq < row.seq)
                .max_by_key(|t| t.seq)
        };
        if !before.is_some_and(|b| crate::conversation::replay::is_prompt(&b.prompt, &last)) {
            tracing::info!(conversation = %self.conv.id, turn = %row.id, "the agent's history does not show this turn's prompt, nor provably the one before it: not sent again");
            return Ok(());
        }
        tracing::info!(conversation = %self.conv.id, turn = %row.id, session = %session, "the bridge stopped before this turn's prompt reached the agent: it is sent now");
        self.notice(
            Tone::Neutral,
            "The bridge restarted before your message reached the agent; it was sent now.",
        )
        .await?;
        self.state.prompt_seq += 1;
        let seq = self.state.prompt_seq;
        if let Some(turn) = self.state.turn.as_mut() {
            // A turn like any other from here: its silence counts from now.
            turn.resumed = false;
            turn.prompt_seq = seq;
            turn.replay_at_own = None;
            turn.liveness = daemon_client::Liveness::new(
                self.core.cfg.liveness.clone(),
                tokio::time::Instant::now(),
            );
        }
        let q = Queued {
            user: row.requested_by,
            text: row.prompt,
            message_id: row.message_id,
            event: None,
            files: Vec::new(),
            note: None,
            merged: Vec::new(),
        };
        let text = self.for_agent(&q, &[]).await;
        self.send_prompt(session, seq, vec![PromptBlock::Text(text)], Vec::new())
            .await
    }

    /// The refusal notice, then the prompt call (its completion comes back as `PromptDone`).
    async fn send_prompt(
        &mut self,
        session: SessionId,
        seq: u64,
        blocks: Vec<PromptBlock>,
        refused: Vec<(String, String)>,
    ) -> Result<()> {
        let refused: Vec<(&str, &str)> = refused
            .iter()
            .map(|(n, w)| (n.as_str(), w.as_str()))
            .collect();
        if let Some(notice) = files::refusal_notice(&self.core.redactor, &refused, true) {
            self.notice_lines_redacted(Tone::Warning, &notice).await?;
        }
        let (client, tx) = (self.core.client.clone(), self.tx.clone());
        let stop = self.core.shutdown.clone();
        self.core.tasks.spawn(async move {
            // At shutdown the turn stays open for the next start (D3).
            let r = tokio::select! {
                r = client.prompt_content(&session, &blocks) => r,
                () = stop.cancelled() => return,
            };
            let _ = tx.send(ConvMsg::PromptDone(Box::new((seq, r)))).await;
        });
        Ok(())
    }

    /// Where saved attachments go: under the session's directory (absolute: a `file://` URI
    /// names an absolute path).
    fn attachments_dir(&self) -> std::path::PathBuf {
        let cwd = if self.conv.cwd.is_empty() {
            self.core.session_dir()
        } else {
            std::path::PathBuf::from(&self.conv.cwd)
        };
        std::path::absolute(&cwd).unwrap_or(cwd)
    }

    /// The prompt as the agent receives it: each part with its speaker's name (when
    /// `speaker_prefix`), the steer note first; the built-in shell agent gets the text as typed,
    /// merged messages as lines of one script.
    async fn for_agent(&self, q: &Queued, context: &[(String, String)]) -> String {
        let cfg = &self.core.cfg;
        if self.core.shell_agent() {
            return q.for_agent("\n", false, |_, t| t.to_owned());
        }
        let mut names = std::collections::HashMap::new();
        if cfg.speaker_prefix {
            for (user, _) in q.parts() {
                if !names.contains_key(user) {
                    names.insert(user.to_owned(), self.core.speakers.name(user).await);
                }
            }
        }
        let sent = q.for_agent("\n\n", true, |user, text| match names.get(user) {
            Some(name) => speaker::prefixed(name, user, text),
            None => text.to_owned(),
        });
        // Context always names its speakers: who said what is the point of it.
        let mut said = Vec::with_capacity(context.len());
        for (user, text) in context {
            let name = match names.get(user) {
                Some(n) => n.clone(),
                None => self.core.speakers.name(user).await,
            };
            said.push(speaker::prefixed(&name, user, text));
        }
        let Some(block) = crate::conversation::context::block(&said) else {
            return sent;
        };
        // The steer note stays first (D6 recognises the prompt by it).
        match &q.note {
            Some(note) if sent.starts_with(note.as_str()) => {
                format!("{note}\n\n{block}\n\n{}", sent[note.len()..].trim_start())
            }
            _ => format!("{block}\n\n{sent}"),
        }
    }

    /// A message in a thread that does not mention the bot (`access.require_mention_in_threads`):
    /// kept in the transcript as context for the next prompt when its writer may prompt here
    /// (A2); nothing runs, nothing is posted, nobody is refused (they did not address the bot).
    async fn unaddressed(&mut self, user: &str, text: &str) -> Result<()> {
        // The built-in shell agent runs text as a command: context would break it.
        if self.core.shell_agent() || text.trim().is_empty() {
            return Ok(());
        }
        if self.may(user, Act::Prompt).await?.is_err() {
            tracing::debug!(conversation = %self.conv.id, "a message not addressed to the bot, from someone who may not prompt here, left out of the context");
            return Ok(());
        }
        let mut tx = self.begin().await?;
        self.record(
            &mut tx,
            None,
            crate::conversation::context::KIND,
            user,
            &self.kept(text),
            None,
        )
        .await?;
        self.commit(tx).await
    }

    /// What was said here without mentioning the bot since its last prompt, as (user, text): empty
    /// unless `access.require_mention_in_threads` (best effort: a store fault leaves it out).
    async fn context(&self) -> Vec<(String, String)> {
        let cfg = &self.core.cfg;
        if !cfg.require_mention_in_threads || self.core.shell_agent() {
            return Vec::new();
        }
        let read = async {
            let mut c = self.core.store.conn().await?;
            crate::store::transcript::since_last_prompt(
                &mut c,
                &self.conv.id,
                crate::conversation::context::KIND,
                200,
            )
            .await
        };
        match read.await {
            Ok(rows) => rows
                .into_iter()
                .map(|e| (e.actor.unwrap_or_default(), e.body))
                .collect(),
            Err(e) => {
                tracing::warn!(conversation = %self.conv.id, error = %e, "could not read the thread's context; the prompt goes without it");
                Vec::new()
            }
        }
    }

    /// Records a new turn and its prompt, marking the inbox entries of this step.
    async fn record_turn(
        &mut self,
        text: &str,
        user: &str,
        message_id: Option<&str>,
    ) -> Result<Turn> {
        if let Some(id) = message_id
            && self.state.unconfirmed_turn.as_deref() == Some(id)
        {
            // The last try to record this message's turn failed: perhaps only its commit's answer
            // was lost. A turn it did record is taken as it is, not recorded twice (one of them
            // would stay open, its prompt never sent).
            let mut c = self.core.store.conn().await?;
            if let Some(row) = turns::open_for_message(&mut c, &self.conv.id, id).await? {
                self.state.unconfirmed_turn = None;
                return Ok(row);
            }
        }
        let recorded = self.record_new_turn(text, user, message_id).await;
        self.state.unconfirmed_turn = match (&recorded, message_id) {
            (Err(e), Some(id)) if e.is_transient() => Some(id.to_owned()),
            _ => None,
        };
        recorded
    }

    async fn record_new_turn(
        &mut self,
        text: &str,
        user: &str,
        message_id: Option<&str>,
    ) -> Result<Turn> {
        let mut tx = self.begin().await?;
        let kept = self.kept(text).into_owned();
        let row =
            turns::start_for(tx.conn(), &self.conv.id, &kept, user, message_id, now_ms()).await?;
        // Activity: the idle sweep measures `workspace.retain` from here.
        conversations::touch(tx.conn(), &self.conv.id, "active", now_ms()).await?;
        let title = crate::core::inbox::title_of(&self.core.redactor, text);
        conversations::title_if_untitled(tx.conn(), &self.conv.id, &title).await?;
        self.record(&mut tx, Some(&row.id), "prompt", user, &kept, None)
            .await?;
        self.commit(tx).await?;
        Ok(row)
    }

    /// The thread's session, loaded on this connection (L6) or created.
    pub(super) async fn ensure_session(
        &mut self,
    ) -> std::result::Result<SessionId, daemon_client::Error> {
        if std::mem::take(&mut self.state.abandon_session)
            && let Some(s) = self.state.session.take()
        {
            // It holds a cut-off prompt the daemon would run again with this one (D6).
            tracing::info!(conversation = %self.conv.id, session = %s, "a new session after an interrupted turn");
            lock(&self.core.sessions).remove(&s);
            self.state.session_ready = false;
        }
        // The session the daemon refused to load, with its words: said only once a new one is
        // made (a daemon that refuses `session/new` too refuses everything, not this session).
        let mut refused: Option<(SessionId, String)> = None;
        if let Some(s) = self.state.session.clone() {
            // A session belongs to the connection that created or loaded it (L6): after a reconnect
            // it is loaded again before its next prompt.
            if self.state.session_ready && self.core.client.is_bound(&s) {
                return Ok(s);
            }
            lock(&self.core.sessions).insert(s.clone(), self.conv.id.clone());
            match self.core.client.load_session(&s, &self.conv.cwd).await {
                Ok(()) => {
                    self.state.session_ready = true;
                    return Ok(s);
                }
                Err(daemon_client::Error::Rpc { message, .. }) => {
                    lock(&self.core.sessions).remove(&s);
                    self.state.session = None;
                    refused = Some((s, message));
                }
                Err(e) => return Err(e),
            }
        }
        // The client applies `daemon.mode` after every session/new and session/load (L6).
        let dir = self
            .checkout
            .clone()
            .unwrap_or_else(|| self.core.session_dir());
        let new = match self.core.client.new_session(&dir).await {
            Ok(new) => new,
            Err(e) => {
                if let Some((s, message)) = &refused {
                    tracing::warn!(conversation = %self.conv.id, session = %s, load = %message, error = %e, "the daemon refused to load this thread's session and to start a new one");
                }
                return Err(e);
            }
        };
        if let Some((s, message)) = refused {
            tracing::warn!(conversation = %self.conv.id, session = %s, new_session = %new.session, "the daemon no longer knows this session; started a new one");
            let _ = self.notice(Tone::Warning, &format!("The agent no longer knows this thread's session ({message}); starting a new one.")).await;
        }
        lock(&self.core.sessions).insert(new.session.clone(), self.conv.id.clone());
        let cwd = dir.display().to_string();
        if let Ok(mut c) = self.core.store.write_conn().await {
            let _ = conversations::set_session(
                &mut c,
                &self.conv.id,
                new.session.as_str(),
                &cwd,
                now_ms(),
            )
            .await;
        }
        self.conv.daemon_session = Some(new.session.to_string());
        self.conv.cwd = cwd;
        self.state.session = Some(new.session.clone());
        self.state.session_ready = true;
        Ok(new.session)
    }

    // ---- access (A2, A3) ----

    /// The people the owner invited, read once from the store.
    pub(super) async fn members(&mut self) -> Result<Vec<String>> {
        if let Some(m) = &self.state.members {
            return Ok(m.clone());
        }
        let mut c = self.core.store.conn().await?;
        let m = members::of(&mut c, &self.conv.id).await?;
        self.state.members = Some(m.clone());
        Ok(m)
    }

    pub(super) fn roles<'a>(&'a self, members: &'a [String]) -> access::Roles<'a> {
        access::Roles {
            mode: self.core.cfg.threads,
            owner: &self.conv.started_by,
            members,
            approvers: &self.core.cfg.approvers,
        }
    }

    /// A2: whether `user` may do `act` in this thread (the outer `Result` is the store's).
    pub(super) async fn may(
        &mut self,
        user: &str,
        act: Act,
    ) -> Result<std::result::Result<(), Refusal>> {
        if act == Act::Read {
            return Ok(Ok(()));
        }
        let members = self.members().await?;
        Ok(self.roles(&members).may(user, act))
    }
}

/// The files `plan` refused, with why.
fn refusals(attached: &[Attachment], uses: &[Use]) -> Vec<(String, String)> {
    attached
        .iter()
        .zip(uses)
        .filter_map(|(f, u)| match u {
            Use::Refuse(why) => Some((f.name.clone(), why.clone())),
            _ => None,
        })
        .collect()
}

/// What [`take_files`] needs, owned: it runs beside the runner.
struct Downloads {
    conversation: String,
    fetch: Option<std::sync::Arc<dyn crate::channel::Fetch>>,
    limits: files::Limits,
    cwd: std::path::PathBuf,
    text: String,
    attached: Vec<Attachment>,
    uses: Vec<Use>,
    turn: String,
}

/// Downloads the files [`files::plan`] accepted, all within `limits.download_time`: images become
/// `image` blocks, other files are saved under the session's directory, named in the prompt text
/// and given to the agent as [`files::file_block`] says (a `resource_link`, or their text
/// embedded). Returns the prompt's blocks and the files not used, each with why.
async fn take_files(d: Downloads) -> (Vec<PromptBlock>, Vec<(String, String)>) {
    let Downloads {
        conversation,
        fetch,
        limits,
        cwd,
        text,
        attached,
        uses,
        turn,
    } = d;
    let mut refused = refusals(&attached, &uses);
    let mut images = Vec::new();
    let mut image_bytes = 0u64;
    let mut saved = Vec::new();
    let mut resources = Vec::new();
    let mut embed_left = limits.max_embedded_bytes;
    let deadline = tokio::time::Instant::now() + limits.download_time;
    for (i, (file, u)) in attached.iter().zip(&uses).enumerate() {
        let max = match u {
            Use::Refuse(_) => continue,
            Use::Image(_) => limits.max_image_bytes,
            Use::Save => limits.max_file_bytes,
        };
        let Some(fetch) = &fetch else {
            refused.push((
                file.name.clone(),
                "this channel cannot download files".into(),
            ));
            continue;
        };
        let bytes = match tokio::time::timeout_at(deadline, fetch.fetch(file, max)).await {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => {
                tracing::warn!(conversation = %conversation, file = %file.id, error = %e, "an attached file was not fetched");
                refused.push((file.name.clone(), e.to_string()));
                continue;
            }
            Err(_) => {
                tracing::warn!(conversation = %conversation, file = %file.id, "an attached file took too long to download");
                refused.push((
                    file.name.clone(),
                    format!(
                        "it took too long to download (the files of one message get {} together)",
                        daemon_client::liveness::human_duration(limits.download_time)
                    ),
                ));
                continue;
            }
        };
        match u {
            Use::Image(_) => {
                let Some(mime) = files::sniff_image(&bytes) else {
                    refused.push((
                        file.name.clone(),
                        "its content is not a PNG, JPEG, GIF or WebP image".into(),
                    ));
                    continue;
                };
                // The announced sizes were checked; the real ones are checked again.
                image_bytes += bytes.len() as u64;
                if image_bytes > limits.max_images_total {
                    refused.push((
                        file.name.clone(),
                        format!(
                            "the images of one message may add up to at most {}",
                            files::human_bytes(limits.max_images_total)
                        ),
                    ));
                    continue;
                }
                images.push(PromptBlock::Image {
                    mime_type: mime.to_owned(),
                    data: base64::engine::general_purpose::STANDARD.encode(&bytes),
                });
            }
            Use::Save | Use::Refuse(_) => {
                if let Some(why) = files::sniff_refused(&bytes) {
                    refused.push((file.name.clone(), why.into()));
                    continue;
                }
                let path = files::saved_path(&cwd, &turn, i, &file.name);
                // Never through a symbolic link the agent may have planted in `cwd`.
                let written = {
                    let (cwd, path, bytes) = (cwd.clone(), path.clone(), bytes.clone());
                    tokio::task::spawn_blocking(move || files::save_file(&cwd, &path, &bytes))
                        .await
                        .unwrap_or_else(|e| Err(std::io::Error::other(e)))
                };
                match written {
                    Ok(()) => {
                        resources.push(files::file_block(
                            &path,
                            file,
                            &bytes,
                            &limits,
                            &mut embed_left,
                        ));
                        saved.push(path);
                    }
                    Err(e) => {
                        tracing::warn!(conversation = %conversation, error = %e, "an attached file could not be saved");
                        refused.push((
                            file.name.clone(),
                            if e.kind() == std::io::ErrorKind::InvalidInput {
                                format!("it could not be saved ({e})")
                            } else {
                                format!("it could not be saved ({})", e.kind())
                            },
                        ));
                    }
                }
            }
        }
    }
    let text = files::prompt_text(&text, &saved);
    let mut blocks = Vec::with_capacity(images.len() + resources.len() + 1);
    if !text.is_empty() || images.is_empty() {
        blocks.push(PromptBlock::Text(text));
    }
    blocks.extend(images);
    blocks.extend(resources);
    (blocks, refused)
}
