//! The slash commands' effects: `/new`, `/cancel`, `/status`, `/history`, `/help`, `/invite`,
//! `/uninvite` (their meaning is [`crate::conversation::commands`]).

use std::time::Duration;

use super::Runner;
use crate::channel::Tone;
use crate::conversation::commands::{HELP, invite_text, invite_usage};
use crate::conversation::effects;
use crate::conversation::turn::status_text;
use crate::core::{access, lock, render};
use crate::store::{Result, conversations, members, now_ms, turns};

impl Runner {
    /// `/invite @a @b` and `/uninvite @a`: the owner (or an approver) lets people act here, or stops
    /// letting them.
    pub(super) async fn cmd_invite(&mut self, by: &str, who: &str, add: bool) -> Result<()> {
        let people = access::mentioned_users(who);
        if people.is_empty() {
            return self.notice(Tone::Neutral, &invite_usage(add)).await;
        }
        let mut members = self.members().await?;
        let mut changed = Vec::new();
        let mut tx = self.begin().await?;
        for user in &people {
            if *user == self.conv.started_by {
                continue;
            }
            let did = if add {
                members::add(tx.conn(), &self.conv.id, user, by, now_ms()).await?
            } else {
                members::remove(tx.conn(), &self.conv.id, user).await?
            };
            if did {
                changed.push(self.person(user));
                if add {
                    members.push(user.clone());
                } else {
                    members.retain(|m| m != user);
                }
            }
        }
        let text = invite_text(add, &self.person(by), &changed);
        let turn_id = self.state.turn.as_ref().map(|t| t.row.id.clone());
        self.record(&mut tx, turn_id.as_deref(), "access", by, &text, None)
            .await?;
        let key = self.state.next_notice_key(now_ms());
        let msg = render::notice(&self.core.redactor, Tone::Neutral, &text);
        self.enqueue(&mut tx, &effects::post(&self.target, &key, msg))
            .await?;
        self.commit(tx).await?;
        self.state.members = Some(members);
        tracing::info!(conversation = %self.conv.id, changed = changed.len(), add, "thread members changed");
        Ok(())
    }

    pub(super) async fn cmd_new(&mut self) -> Result<()> {
        // Starting over: what waited behind the running turn was meant for the old session, and
        // goes as `/cancel` drops it (a message sent after `/new` is queued then, not refused).
        let extra = dropped_text(self.drop_queued());
        // A prompt still waiting for its files was never sent: nothing to cancel at the daemon.
        let unsent = self.unsent();
        // Durably: a thread let go from memory (idle) or a restarted bridge must not load it again.
        let mut c = self.core.store.write_conn().await?;
        conversations::forget_session(&mut c, &self.conv.id, now_ms()).await?;
        drop(c);
        self.conv.daemon_session = None;
        if !unsent && let (Some(s), Some(_)) = (self.state.session.clone(), &self.state.turn) {
            // The running turn is cancelled as `/cancel` does it, and its session let go only
            // with it: what the agent still says of the turn (its commands' ends, the turn's)
            // finishes their messages, and the next message, queued behind it, opens a new
            // session. Letting go at once left the turn open for good, the thread stuck behind it.
            self.state
                .record_cancel(tokio::time::Instant::now(), self.core.cfg.cancel_grace);
            self.state.abandon_session = true;
            let reached = self.core.client.cancel(&s).await.is_ok();
            self.close_approvals_for_cancel().await?;
            let text = if reached {
                format!(
                    "Started over: cancelling the running turn{extra}; the next message opens a new agent session."
                )
            } else {
                format!(
                    "Started over{extra}: the running turn ends once the agent answers or its cancel grace runs out; the next message opens a new agent session."
                )
            };
            return self.notice(Tone::Neutral, &text).await;
        }
        if let Some(s) = self.state.session.take() {
            lock(&self.core.sessions).remove(&s);
        }
        self.state.session_ready = false;
        if unsent {
            self.cancel_unsent("The running turn was cancelled before it reached the agent.")
                .await?;
        }
        self.notice(
            Tone::Neutral,
            &format!("Started over{extra}: the next message opens a new agent session."),
        )
        .await
    }

    /// Drops the prompts waiting behind the turn (their inbox entries are marked handled with the
    /// next commit); how many.
    fn drop_queued(&mut self) -> usize {
        let dropped = self.state.queue.drain();
        let n = dropped.len();
        for q in dropped {
            for e in q.events() {
                self.state.marks.add(Some(e));
            }
        }
        self.core.busy_add(-(n as isize));
        n
    }

    pub(super) async fn cmd_cancel(&mut self) -> Result<()> {
        let n = self.drop_queued();
        let extra = dropped_text(n);
        // Its files still downloading: the prompt was never sent, so the turn ends here and the
        // daemon hears nothing.
        if self
            .cancel_unsent(&format!("Cancelled before it reached the agent{extra}."))
            .await?
        {
            return Ok(());
        }
        let session = self.state.session.clone();
        match (session, self.state.turn.is_some()) {
            (Some(s), true) => {
                self.state
                    .record_cancel(tokio::time::Instant::now(), self.core.cfg.cancel_grace);
                if let Err(e) = self.core.client.cancel(&s).await {
                    return self
                        .notice(
                            Tone::Error,
                            &format!("Could not reach the agent to cancel: {e}"),
                        )
                        .await;
                }
                self.close_approvals_for_cancel().await?;
                self.notice(
                    Tone::Neutral,
                    &format!("Cancelling the running turn{extra}…"),
                )
                .await
            }
            // Held while the agent was unreachable (L7), or waiting to start: dropped, and counted.
            _ if n > 0 => {
                let noun = if n == 1 { "message" } else { "messages" };
                self.notice(
                    Tone::Neutral,
                    &format!("Dropped {n} queued {noun}; nothing is running."),
                )
                .await
            }
            _ => self.notice(Tone::Neutral, "Nothing is running.").await,
        }
    }

    /// A steering prompt went ahead of the queue: the running turn is cancelled (its first cause
    /// stays if one came first, T2) and the thread is told.
    pub(super) async fn steer(&mut self) -> Result<()> {
        if self
            .cancel_unsent("Steering: the running turn was cancelled before it reached the agent; your message runs next.")
            .await?
        {
            return Ok(());
        }
        let Some(s) = self.state.session.clone() else {
            return Ok(());
        };
        self.state
            .record_cancel(tokio::time::Instant::now(), self.core.cfg.cancel_grace);
        if let Err(e) = self.core.client.cancel(&s).await {
            return self
                .notice(
                    Tone::Error,
                    &format!("Could not reach the agent to cancel the running turn: {e}. Your message waits for it to end."),
                )
                .await;
        }
        self.close_approvals_for_cancel().await?;
        self.notice(
            Tone::Neutral,
            "Steering: cancelling the running turn; your message runs next.",
        )
        .await
    }

    pub(super) async fn cmd_status(&mut self) -> Result<()> {
        let running_for = self.state.turn.as_ref().map_or(Duration::ZERO, |t| {
            Duration::from_millis(u64::try_from(now_ms() - t.row.started_at).unwrap_or(0))
        });
        let text = status_text(
            self.state.turn.as_ref(),
            // One let go with its turn (`/new`, an interrupted turn) is not the next message's.
            self.state
                .session
                .as_ref()
                .filter(|_| !self.state.abandon_session),
            self.state.queue.len(),
            running_for,
            tokio::time::Instant::now(),
        );
        let mut text = crate::conversation::turn::status_with_outage(text, self.state.daemon_down);
        if let Some(line) = self.checkout_status().await {
            text.push('\n');
            text.push_str(&line);
        }
        if self.core.cfg.project.is_some() {
            text.push_str(&format!("\nProject: {}.", self.conv.project));
        }
        self.notice(Tone::Neutral, &text).await
    }

    pub(super) async fn cmd_history(&mut self) -> Result<()> {
        let mut c = self.core.store.conn().await?;
        let turns = turns::of_conversation(&mut c, &self.conv.id).await?;
        drop(c);
        let mut text = format!(
            "This thread: {} turns (conversation {}).",
            turns.len(),
            self.conv.id
        );
        for t in turns.iter().rev().take(5).rev() {
            // Redacted first, then cut: a cut never leaves half a secret behind (S2).
            let prompt: String = self
                .core
                .redactor
                .redact(&t.prompt)
                .chars()
                .take(60)
                .collect();
            text.push_str(&format!("\n{}. {} — {}", t.seq, prompt, t.status));
        }
        text.push_str(&format!(
            "\nFull history: `chat-bridge history show {}`",
            self.conv.id
        ));
        self.notice(Tone::Neutral, &text).await
    }

    pub(super) async fn cmd_help(&mut self) -> Result<()> {
        self.notice(Tone::Neutral, HELP).await
    }
}

/// " (2 queued messages dropped)", or nothing when none was.
fn dropped_text(n: usize) -> String {
    if n == 0 {
        return String::new();
    }
    format!(
        " ({n} queued {} dropped)",
        crate::conversation::turn::plural(n, "message", "messages")
    )
}
