//! Writing: a state change and its chat actions in one transaction (D1), the inbox entries it
//! handled marked inside it (D2), and the outbox woken after it commits.

use std::borrow::Cow;
use std::sync::atomic::Ordering;

use super::Runner;
use crate::channel::{ChatAction, Tone};
use crate::conversation::effects;
use crate::conversation::event::Mark;
use crate::conversation::inbox::EventKey;
use crate::core::access::Refusal;
use crate::core::keys::MessageKey;
use crate::core::render;
use crate::store::outbox::{self, NewAction};
use crate::store::transcript::{self, NewEntry};
use crate::store::{Result, StoreError, Tx, inbound, now_ms};

impl Runner {
    pub(super) async fn begin(&self) -> Result<Tx> {
        self.core.store.begin().await
    }

    /// Writes `action` to the outbox inside `tx`.
    pub(super) async fn enqueue(&self, tx: &mut Tx, action: &ChatAction) -> Result<()> {
        self.enqueue_as(tx, action, true).await
    }

    /// [`Runner::enqueue`]; an edit replaces its message's edit still waiting in the outbox only
    /// when `replaces` (the caller knows when none can wait, and saves the look).
    pub(super) async fn enqueue_as(
        &self,
        tx: &mut Tx,
        action: &ChatAction,
        replaces: bool,
    ) -> Result<()> {
        let json = serialized(action)?;
        let a = self.outbox_row(action, &json);
        self.queued.store(true, Ordering::Relaxed);
        if replaces {
            outbox::enqueue(tx.conn(), &a, now_ms()).await?;
        } else {
            outbox::insert(tx.conn(), &a, now_ms()).await?;
        }
        Ok(())
    }

    /// [`Runner::enqueue`] for each of `actions` in order, in one statement when none is an edit
    /// (an edit looks for a waiting edit of its message to replace).
    pub(super) async fn enqueue_all(&self, tx: &mut Tx, actions: &[ChatAction]) -> Result<()> {
        if actions.len() < 2 || actions.iter().any(|a| matches!(a, ChatAction::Edit { .. })) {
            for action in actions {
                self.enqueue(tx, action).await?;
            }
            return Ok(());
        }
        let json = actions.iter().map(serialized).collect::<Result<Vec<_>>>()?;
        let rows: Vec<NewAction<'_>> = actions
            .iter()
            .zip(&json)
            .map(|(action, json)| self.outbox_row(action, json))
            .collect();
        self.queued.store(true, Ordering::Relaxed);
        outbox::insert_all(tx.conn(), &rows, now_ms()).await
    }

    /// The outbox row of `action` (serialised as `json`) in this conversation.
    pub(super) fn outbox_row<'a>(&'a self, action: &'a ChatAction, json: &'a str) -> NewAction<'a> {
        let (kind, coalesce_key) = effects::outbox_row(action);
        NewAction {
            conversation_id: &self.conv.id,
            kind,
            coalesce_key,
            action: json,
        }
    }

    /// Appends to the conversation's transcript inside `tx`.
    pub(super) async fn record(
        &self,
        tx: &mut Tx,
        turn_id: Option<&str>,
        kind: &str,
        actor: &str,
        body: &str,
        tool_call_id: Option<&str>,
    ) -> Result<()> {
        let entry = NewEntry {
            turn_id,
            kind,
            actor: Some(actor),
            body,
            tool_call_id,
        };
        transcript::append(tx.conn(), &self.conv.id, &entry, now_ms()).await?;
        Ok(())
    }

    /// Commits `tx`, marking the inbox entries this step handled inside it.
    pub(super) async fn commit(&mut self, mut tx: Tx) -> Result<()> {
        let marks = self.state.marks.pending();
        for (platform, event) in &marks {
            inbound::mark_handled(tx.conn(), platform, event, now_ms()).await?;
        }
        tx.commit().await?;
        self.state.marks.committed(&marks);
        if self.queued.swap(false, Ordering::Relaxed) {
            self.core.wake_outbox.notify_one();
        }
        Ok(())
    }

    /// Marks one inbox entry handled on its own.
    pub(super) async fn mark_alone(&self, (platform, event): &EventKey) -> Result<()> {
        let mut c = self.core.store.write_conn().await?;
        inbound::mark_handled(&mut c, platform, event, now_ms()).await
    }

    /// Posts a notice from the bridge (and records it in the transcript).
    /// Whether answers stream into drafts here (`render.stream_every`, `render.no_stream_channels`).
    pub(super) fn streams(&self) -> bool {
        self.core.cfg.stream_every.is_some()
            && !self
                .core
                .cfg
                .no_stream_channels
                .contains(&self.target.channel)
    }

    /// Shows `text` in the turn's draft `seq` (R5): an edit the outbox coalesces and may drop under
    /// rate pressure while text arrives; `done`, the text before a tool call, always shown.
    pub(super) async fn show_draft(&mut self, seq: usize, text: &str, done: bool) -> Result<()> {
        let Some(turn) = self.state.turn.as_ref() else {
            return Ok(());
        };
        if !self.streams() {
            return Ok(());
        }
        let key = MessageKey::Draft(turn.row.id.clone(), seq);
        let msg = render::draft(&self.core.redactor, text, self.core.cfg.answer_len, done);
        let mut tx = self.begin().await?;
        self.enqueue(&mut tx, &effects::edit(&self.target, &key, msg, !done))
            .await?;
        self.commit(tx).await
    }

    pub(super) async fn notice(&mut self, tone: Tone, text: &str) -> Result<()> {
        self.notice_with(tone, text, false, false, &[]).await
    }

    /// A notice and the marks it puts on a person's message, in one transaction.
    pub(super) async fn notice_marking(
        &mut self,
        tone: Tone,
        text: &str,
        marks: &[ChatAction],
    ) -> Result<()> {
        self.notice_with(tone, text, false, false, marks).await
    }

    /// A notice whose first line is its heading and the rest its body (a list reads as a list), its
    /// parts redacted one by one by the caller (redacting it whole could join a name to the words
    /// after it and eat them).
    pub(super) async fn notice_lines_redacted(&mut self, tone: Tone, text: &str) -> Result<()> {
        self.notice_with(tone, text, true, true, &[]).await
    }

    async fn notice_with(
        &mut self,
        tone: Tone,
        text: &str,
        lines: bool,
        redacted: bool,
        marks: &[ChatAction],
    ) -> Result<()> {
        let key = self.state.next_notice_key(now_ms());
        let mut msg = if redacted {
            crate::channel::Message::text(tone, text)
        } else {
            render::notice(&self.core.redactor, tone, text)
        };
        if lines && let Some((title, body)) = msg.title.split_once('\n') {
            let (title, body) = (title.to_owned(), body.to_owned());
            msg.title = title;
            msg.body = Some(body);
        }
        let mut tx = self.begin().await?;
        let turn_id = self.state.turn.as_ref().map(|t| t.row.id.clone());
        self.record(
            &mut tx,
            turn_id.as_deref(),
            "notice",
            "bridge",
            &if redacted {
                std::borrow::Cow::Borrowed(text)
            } else {
                self.kept(text)
            },
            None,
        )
        .await?;
        self.enqueue(&mut tx, &effects::post(&self.target, &key, msg))
            .await?;
        for mark in marks {
            self.enqueue(&mut tx, mark).await?;
        }
        self.commit(tx).await
    }

    /// Posts what the agent sent while no turn was open (and records it in the transcript).
    pub(super) async fn post_late(&mut self, text: &str) -> Result<()> {
        let parts = render::answer_parts(
            &self.core.redactor,
            text,
            self.core.cfg.answer_len,
            self.core.cfg.upload_over,
        );
        let n = parts.len();
        let mut tx = self.begin().await?;
        self.record(&mut tx, None, "late", "agent", &self.kept(text), None)
            .await?;
        for (i, mut msg) in parts.into_iter().enumerate() {
            msg.title = if n == 1 {
                "💬 later, from the agent".to_owned()
            } else {
                format!("💬 later, from the agent ({}/{n})", i + 1)
            };
            let key = self.state.next_notice_key(now_ms());
            self.enqueue(&mut tx, &effects::post(&self.target, &key, msg))
                .await?;
        }
        self.commit(tx).await
    }

    /// Refuses what `user` asked: only they hear why (an ephemeral reply where the platform has
    /// one), their message gets ⛔, and nothing runs. The inbox entry is marked in the same
    /// transaction.
    pub(super) async fn refuse(
        &mut self,
        user: &str,
        message_id: Option<&str>,
        refusal: &Refusal,
    ) -> Result<()> {
        tracing::info!(conversation = %self.conv.id, refusal = ?refusal, "refused a person who may not act in this thread");
        crate::metrics::access_refused(&self.conv.platform);
        let text = refusal.text(&self.person(&self.conv.started_by));
        let mut tx = self.begin().await?;
        let action = effects::ephemeral(&self.target, user, self.core.redactor.redact(&text));
        self.enqueue(&mut tx, &action).await?;
        if let Some(id) = message_id {
            self.enqueue(
                &mut tx,
                &effects::react(&self.target, id, Mark::Refused, true),
            )
            .await?;
        }
        self.commit(tx).await
    }

    /// Text as the history keeps it: redacted too when `redact.store` says so.
    pub(super) fn kept<'t>(&self, text: &'t str) -> Cow<'t, str> {
        if self.core.cfg.redact_store {
            Cow::Owned(self.core.redactor.redact(text))
        } else {
            Cow::Borrowed(text)
        }
    }

    /// How a person is named in chat: a mention where the platform has them.
    pub(super) fn person(&self, user: &str) -> String {
        match self.conv.platform.as_str() {
            // A typed mention: the Slack renderer escapes all other text (R8).
            "slack" => crate::channel::text::mention(user),
            "discord" => format!("<@{user}>"),
            _ => user.to_owned(),
        }
    }
}

/// An action as the outbox stores it.
pub(super) fn serialized(action: &ChatAction) -> Result<String> {
    serde_json::to_string(action).map_err(|e| StoreError::Corrupt(e.to_string()))
}
