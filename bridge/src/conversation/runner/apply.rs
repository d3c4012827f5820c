//! Runs what the state decided: an event goes through [`State::handle`](crate::conversation::state::State::handle)
//! once, and each resulting [`Effect`] is carried out in order — a transaction with its outbox
//! rows, a daemon call, or both.

use daemon_client::DaemonEvent;
use tokio::time::Instant;

use super::Runner;
use crate::channel::Tone;
use crate::conversation::commands::Command;
use crate::conversation::effects::{self, Effect};
use crate::conversation::event::{Event, Mark};
use crate::conversation::turn::queue_full_text;
use crate::store::{Result, inbound};

impl Runner {
    /// What `event` means now, decided once.
    pub(super) fn handle(&mut self, event: Event) -> Vec<Effect> {
        self.state.handle(event, Instant::now(), &self.core.cfg)
    }

    /// A daemon event, decided once. A heartbeat's usual effect (counts queued for the progress
    /// writer) is carried out here and `None` returned; otherwise the effects to carry out with
    /// [`Runner::apply_daemon_effects`].
    pub(super) fn decide_daemon_event(&mut self, e: DaemonEvent) -> Option<Vec<Effect>> {
        let effects = self.handle(Event::Daemon(e));
        if let [Effect::FlushCounts] = effects.as_slice() {
            self.flush_progress(false);
            return None;
        }
        Some(effects)
    }

    /// Carries out a daemon event's effects; each is retried on its own while the database is
    /// unreachable, so a retry never decides (or counts) the event twice.
    pub(super) async fn apply_daemon_effects(&mut self, effects: Vec<Effect>) -> Result<()> {
        let id = self.conv.id.clone();
        let stop = self.core.shutdown.clone();
        for effect in effects {
            super::retrying!(id, stop, self.apply(effect.clone()))?;
        }
        Ok(())
    }

    /// The daemon connection went down or came back (L7).
    pub(super) async fn on_connection(&mut self, up: bool) -> Result<()> {
        if !up
            && self.state.session.is_some()
            && self.state.turn.as_ref().is_some_and(|t| t.resumed)
        {
            // A turn taken back after a restart has no prompt of this process in flight, so the
            // client does not load its session again when it reconnects (it does for the prompts
            // it sent): its frames would go on to the closed connection, and the turn would end as
            // interrupted though its command finished. It is loaded again here once the daemon is
            // back (D3).
            self.resume_pending = true;
        }
        if up && self.resume_pending {
            // Taken back while the daemon was unreachable, or its load failed on the way (L7,
            // D3): its session is loaded now. Pending until that is decided, database faults
            // included.
            let (id, stop) = (self.conv.id.clone(), self.core.shutdown.clone());
            super::retrying!(id, stop, self.reload_resumed())?;
        }
        for effect in self.handle(Event::Connection(up)) {
            self.apply(effect).await?;
        }
        Ok(())
    }

    /// A deadline passed.
    pub(super) async fn on_timer(&mut self) -> Result<()> {
        for effect in self.handle(Event::Timer) {
            self.apply(effect).await?;
        }
        Ok(())
    }

    /// Carries out one effect.
    pub(super) async fn apply(&mut self, effect: Effect) -> Result<()> {
        match effect {
            Effect::Refuse {
                user,
                message_id,
                refusal,
            } => self.refuse(&user, message_id.as_deref(), &refusal).await,
            Effect::Answer {
                user,
                request,
                option,
            } => self.decide(&user, &request, &option).await,
            Effect::Command { user, command } => match command {
                Command::New => self.cmd_new().await,
                Command::Cancel => self.cmd_cancel().await,
                Command::Status => self.cmd_status().await,
                Command::History => self.cmd_history().await,
                Command::Help => self.cmd_help().await,
                Command::Invite(who) => self.cmd_invite(&user, &who, true).await,
                Command::Uninvite(who) => self.cmd_invite(&user, &who, false).await,
                // The state turns `/steer` into a prompt; it never reaches here as a command.
                Command::Steer(_) => Ok(()),
                Command::Every(rest) => self.cmd_schedule(&user, &rest, true).await,
                Command::At(rest) => self.cmd_schedule(&user, &rest, false).await,
                Command::Schedules => self.cmd_schedules().await,
                Command::Unschedule(id) => self.cmd_unschedule(&id).await,
                Command::Diff => self.cmd_diff().await,
                Command::Done(rest) => self.cmd_done(&rest).await,
            },
            Effect::Prompt(q) => self.prompt(q).await,
            Effect::StartTurn(_)
            | Effect::Queued(_)
            | Effect::Held(_)
            | Effect::QueueFull { .. }
            | Effect::Steer(_)
            | Effect::Collected(_) => self.admitted(effect).await,
            Effect::RunQueued => self.run_queued().await,
            Effect::Draft(seq, text) => self.show_draft(seq, &text, false).await,
            Effect::FlushCounts => {
                self.flush_progress(false);
                Ok(())
            }
            Effect::ShowLine(line) => self.show_line(Some(line)).await,
            Effect::AskPermission(req) => self.on_permission(req).await,
            Effect::AnnounceTool(call, info) => self.on_tool_started(call, info).await,
            Effect::RetitleTool { call, title, kind } => {
                self.retitle(&call, &title, kind.as_deref()).await
            }
            Effect::FinishTool(call, result) => self.on_tool_finished(call, result).await,
            Effect::EndTurn(stop) => self.end_turn(Some(stop), None).await,
            Effect::EndTurnAs(status) => self.end_turn(None, Some(status)).await,
            Effect::InterruptTools(tools) => self.interrupt_tools(tools).await,
            Effect::LetGoTools(tools) => self.let_go_tools(tools).await,
            Effect::Notice(tone, text) => self.notice(tone, &text).await,
            Effect::PostLate(text) => self.post_late(&text).await,
            Effect::ExpireApproval(p) => self.expire(p).await,
            Effect::SendAgain(last) => self.send_again(last).await,
            Effect::Stalled {
                stall,
                resumed,
                cancel,
            } => self.stalled(stall, resumed, cancel).await,
        }
    }

    /// Waiting behind a turn is not failing: restarts meanwhile do not count (S4). Best effort: if
    /// this is lost, the attempt simply stays counted.
    async fn taken(&self, event: Option<&crate::conversation::inbox::EventKey>) {
        if let Some((platform, id)) = event
            && let Ok(mut c) = self.core.store.write_conn().await
        {
            let _ = inbound::taken(&mut c, platform, id).await;
        }
    }

    /// What became of a prompt: its turn starts, it waits, or the queue is full.
    pub(super) async fn admitted(&mut self, effect: Effect) -> Result<()> {
        match effect {
            Effect::StartTurn(q) => {
                self.core.busy_add(1);
                self.start_turn(q).await
            }
            Effect::Steer(event) => {
                self.taken(event.as_ref()).await;
                self.core.busy_add(1);
                self.steer().await
            }
            Effect::Collected(event) => {
                // Part of the waiting prompt now: that one is already counted as busy.
                self.taken(event.as_ref()).await;
                Ok(())
            }
            Effect::Queued(event) | Effect::Held(event) => {
                if let Some((platform, id)) = &event {
                    // Waiting behind a turn is not failing: restarts meanwhile do not count (S4).
                    // Best effort: if this is lost, the attempt simply stays counted.
                    if let Ok(mut c) = self.core.store.write_conn().await {
                        let _ = inbound::taken(&mut c, platform, id).await;
                    }
                }
                self.core.busy_add(1);
                Ok(())
            }
            Effect::QueueFull {
                waiting,
                refused,
                message_id,
            } => {
                let unreachable = self.state.daemon_down || self.state.turn.is_none();
                // The refused message itself says it will not run: 👀 taken away, ❌ added, with
                // the notice (one transaction), as a turn that could not run ends.
                let marks = message_id
                    .as_deref()
                    .map(|id| effects::outcome_marks(&self.target, id, Mark::Failed));
                self.notice_marking(
                    Tone::Warning,
                    &queue_full_text(waiting, &refused, unreachable),
                    marks.as_ref().map_or(&[][..], |m| &m[..]),
                )
                .await
            }
            // Only the five above come of a prompt; anything else is carried out as usual.
            other => Box::pin(self.apply(other)).await,
        }
    }
}
