//! One conversation's state in memory and the decisions taken on it: what a message means, what a
//! daemon event or a timer asks for, when the next deadline is. No socket, no database, no clock:
//! `now` is given, and what must be read or written is the runner's (see [`super::runner`]).

use std::collections::HashMap;
use std::time::Duration;

use daemon_client::{
    DaemonEvent, PermissionRequest, SessionId, Stall, StopReason, ToolCallId, ToolInfo, ToolResult,
};
use tokio::time::Instant;

use super::approvals::{Approvals, Numbered, Pending};
use super::busy::WhileBusy;
use super::commands::{self, Command, Parsed};
use super::effects::Effect;
use super::event::Event;
use super::event::{Mark, ToolOutcome};
use super::event::{PromptEnd, Said, TurnStatus};
use super::inbox::Marks;
use super::late::Late;
use super::replay;
use super::tools::{self, ToolState};
use super::turn::{Queue, Queued, TurnState};
use crate::core::access::{Act, Refusal, Roles};
use crate::core::keys::MessageKey;
use crate::core::{CoreConfig, OnStall};

/// What the conversation holds that the store does not (or not yet).
#[derive(Debug, Default)]
pub struct State {
    /// The daemon session of this thread.
    pub session: Option<SessionId>,
    /// Whether the session was created or loaded on this connection (L6).
    pub session_ready: bool,
    /// The running turn.
    pub turn: Option<TurnState>,
    /// Prompts waiting behind it.
    pub queue: Queue,
    /// Approvals waiting for a person.
    pub approvals: Approvals,
    /// Who opened the thread (A2).
    pub owner: String,
    /// The people the owner invited (A2), once read from the store.
    pub members: Option<Vec<String>>,
    /// Notices posted by this conversation's runner (their keys count them).
    pub notices: u64,
    /// Prompt calls made (a late completion of an older one is ignored).
    pub prompt_seq: u64,
    /// Inbox entries the next commit marks handled (D2).
    pub marks: Marks,
    /// The daemon connection is down: prompts are held in the queue until it is back (L7).
    pub daemon_down: bool,
    /// The thread was told, during this outage, that its messages are held (one notice, L7).
    pub held_noticed: bool,
    /// When to try the held prompts again even if no reconnect is reported (the agent refused a
    /// `session/new` or `session/load` for want of a connection while it counted as up).
    pub retry_at: Option<Instant>,
    /// The session holds a prompt that was cut off unanswered (an interrupted turn): the next
    /// prompt opens a new session instead, because the daemon would fold the old prompt into it and
    /// run it again (qwen does; D6).
    pub abandon_session: bool,
    /// What the agent sent while no turn was open, waiting to be posted.
    pub late: Late,
    /// The person's message whose turn's recording last failed with the database away: its
    /// commit may have gone through unanswered, so the next try looks for that turn first.
    pub unconfirmed_turn: Option<String>,
    /// Calls still running when their turn ended (the daemon answered the prompt first), by the
    /// turn they belong to: a result that comes later finishes its call's message and row, and
    /// heartbeats meanwhile are counted.
    pub unfinished: HashMap<ToolCallId, (String, ToolState)>,
}

/// Calls kept running after their turn ended, at most (older ones are let go: a result of theirs
/// is then posted as late work).
const UNFINISHED_MAX: usize = 64;

/// [`FRESH_SESSION_TEXT`] as a literal, for the notices that end with it.
macro_rules! fresh_session {
    () => {
        "The next message starts a new agent session: the old one still holds the interrupted request unanswered, and the agent would run it again with your next message."
    };
}

/// What a thread hears about a prompt the bridge's restart cut off (D6).
pub const CUT_OFF_TEXT: &str = concat!(
    "The bridge restarted just after this message reached the agent, and the agent dropped it unfinished: it is marked interrupted and was not re-run; send it again if it still matters. ",
    fresh_session!()
);

/// What a thread hears when a turn taken back after a restart is found cancelled in the load's
/// replay: the daemon stopped its command when the bridge's connection died (D6).
pub const RESUMED_CANCELLED_TEXT: &str = concat!(
    "The bridge restarted while this command ran, and the agent stopped it when the bridge's connection closed: the turn is marked interrupted and was not re-run; send the message again if it still matters. ",
    fresh_session!()
);

/// What a thread hears when the daemon ends a turn taken back after a restart as cancelled: it
/// stopped the prompt when the bridge's connection died (D6).
pub const RESUMED_STOPPED_TEXT: &str = concat!(
    "The bridge restarted during this turn, and the agent stopped it when the bridge's connection closed: what it did so far stands, the rest did not run. The turn is marked interrupted and was not re-run; send the message again if it still matters. ",
    fresh_session!()
);

/// Why the thread continues in a new session after a turn that was cut off (D6).
pub const FRESH_SESSION_TEXT: &str = fresh_session!();

/// What a thread is told the first time a message is held during an outage (L7).
pub const HELD_TEXT: &str = "The agent is unreachable; your message is queued and will run when it is back. `/cancel` drops what is queued.";

/// The console's line when the daemon connection is lost (L7).
pub const LOST_TEXT: &str = "The connection to the agent was lost; reconnecting. Messages sent meanwhile wait and run when it is back.";

/// The console's line when the daemon connection is back (L7).
pub const BACK_TEXT: &str = "The connection to the agent is back.";

/// A progress line due for a running tool (L5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The call.
    pub call: ToolCallId,
    /// Its title.
    pub title: String,
    /// How long it has run.
    pub elapsed: Duration,
    /// How long since it last printed, when known.
    pub age: Option<Duration>,
}

/// What a daemon event asks of the runner.
#[derive(Debug, Clone, PartialEq)]
pub enum DaemonStep {
    /// Nothing to write or send: no turn to attach it to, a heartbeat with no line due (F1), a late
    /// update (F4), reasoning, usage.
    Nothing,
    /// A heartbeat was counted; hand due counts to the store, and show the line if one is due.
    Heartbeat(Option<Line>),
    /// Output was seen; show the line if one is due.
    Output(Option<Line>),
    /// The agent asks for permission.
    Permission(PermissionRequest),
    /// A tool call to announce (or to follow again after a replay).
    ToolStarted(ToolCallId, ToolInfo),
    /// A running call's title changed.
    ToolRetitled {
        /// The call.
        call: ToolCallId,
        /// Its new title.
        title: String,
        /// Its kind, when the update said.
        kind: Option<String>,
    },
    /// A call finished.
    ToolFinished(ToolCallId, ToolResult),
    /// The turn ended.
    EndTurn(StopReason),
    /// A turn taken back after a restart was cut off by it: the daemon ended it with nothing done
    /// (D6); it is interrupted, not re-sent.
    CutOff,
    /// The answer so far streams into draft `seq` (R5).
    Draft(usize, String),
    /// A turn taken back after a restart learns from the load's replay that the daemon cancelled
    /// its last running call when the bridge's connection died: the daemon will not go on with it,
    /// so the call is finished, the turn ends at once as interrupted (not re-run) and what waits
    /// behind it runs (D6).
    ResumedCancelled(ToolCallId, ToolResult),
    /// A turn taken back after a restart hears the daemon end it as cancelled without anyone here
    /// asking: it stopped the prompt when the bridge's connection died. The calls still running
    /// (scoped id, title) are closed as interrupted and the turn ends as interrupted, not re-run
    /// (D6).
    ResumedStopped(Vec<(String, String)>),
    /// A turn taken back after a restart whose prompt the load's replay does not show, with
    /// nothing of it seen: the bridge stopped after recording the prompt as sent and before the
    /// daemon got it. The daemon's last prompt (as it keeps it) goes along: the prompt is sent
    /// now if that one is provably the turn before (D6).
    NeverReached(String),
}

/// What becomes of a prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Nothing runs: start its turn now.
    Start(Queued),
    /// It waits behind the running turn.
    Queued,
    /// The agent is unreachable: it waits in the queue until the agent is back (L7).
    Held,
    /// It steers: it waits ahead of the queue and the running turn is to be cancelled.
    Steer,
    /// It was merged into the prompt waiting behind the running turn (`collect`).
    Collected,
    /// The queue is full (this many wait): it is refused with a notice, and its inbox entry is
    /// marked handled by that notice's transaction.
    Full(usize),
}

/// What a timer found due.
#[derive(Debug, Default)]
pub struct Due {
    /// Approvals that expired unanswered (rejected).
    pub expired: Vec<Pending>,
    /// Progress lines to show.
    pub lines: Vec<Line>,
    /// A liveness limit that fired (L3), at most one per poll.
    pub stall: Option<Stall>,
    /// `on_stall = cancel`: send `session/cancel` (recorded after the stall, so the stall stays
    /// the first cause, T2).
    pub cancel: bool,
    /// The daemon did not end the turn within the grace after a cancel: the bridge ends it, with
    /// the calls still running (scoped id, title) closed as interrupted.
    pub unconfirmed_cancel: Option<Vec<(String, String)>>,
    /// No live frame of the turn's session arrived within `reconnect_grace` of a reconnect: the
    /// daemon no longer runs it; the bridge ends it, with the calls still running (scoped id,
    /// title) closed as interrupted.
    pub orphaned: Option<Vec<(String, String)>>,
    /// A draft edit that is due (R5): its number and the answer so far.
    pub draft: Option<(usize, String)>,
}

impl State {
    /// A conversation whose thread uses `session` (from the store).
    #[must_use]
    pub fn new(session: Option<SessionId>) -> Self {
        Self {
            session,
            ..Self::default()
        }
    }

    /// Nothing running, queued, awaiting approval or waiting to be marked: the store holds it all.
    #[must_use]
    pub fn is_idle(&self) -> bool {
        self.turn.is_none()
            && self.queue.is_empty()
            && self.approvals.is_empty()
            && self.marks.is_empty()
            && self.late.is_empty()
    }

    /// The next instant a timer has something to do.
    #[must_use]
    pub fn next_deadline(&self, cfg: &CoreConfig) -> Option<Instant> {
        let turn = self.turn.as_ref();
        [
            turn.and_then(|t| t.liveness.deadline()),
            turn.and_then(|t| {
                tools::next_line_due(&t.tools, cfg.progress_after, cfg.progress_every)
            }),
            turn.and_then(|t| t.cancel_by),
            turn.and_then(|t| t.orphan_by),
            turn.and_then(|t| t.draft.and_then(|d| d.due)),
            self.approvals.next_deadline(),
            self.retry_at,
            self.late.deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The key of the next notice posted at `now_ms`.
    pub fn next_notice_key(&mut self, now_ms: i64) -> MessageKey {
        self.notices += 1;
        MessageKey::Notice(now_ms, self.notices)
    }

    /// A tool call's id as stored and as its message key: scoped by the daemon session, because a
    /// daemon that lost its sessions (a restart) numbers calls from the start again.
    #[must_use]
    pub fn scoped(&self, call: &ToolCallId) -> String {
        scoped_id(self.session.as_ref(), call)
    }

    /// What a message means here.
    #[must_use]
    pub fn parse(&self, text: &str) -> Parsed {
        commands::parse(text, self.approvals.len())
    }

    /// What a numbered answer picks (when exactly one approval waits).
    #[must_use]
    pub fn numbered(&self, n: usize) -> Option<Numbered> {
        self.approvals.numbered(n)
    }

    /// Handles `event`, which happened at `now`: updates the state and says what the runner is to
    /// write and send, in order. No I/O.
    pub fn handle(&mut self, event: Event, now: Instant, cfg: &CoreConfig) -> Vec<Effect> {
        match event {
            Event::Message(said) => self.on_message(said, cfg),
            Event::Daemon(e) => match self.on_daemon(e, now, cfg) {
                DaemonStep::Nothing => Vec::new(),
                DaemonStep::Heartbeat(line) => std::iter::once(Effect::FlushCounts)
                    .chain(line.map(Effect::ShowLine))
                    .collect(),
                DaemonStep::Output(line) => line.map(Effect::ShowLine).into_iter().collect(),
                DaemonStep::Permission(req) => vec![Effect::AskPermission(req)],
                DaemonStep::ToolStarted(call, info) => vec![Effect::AnnounceTool(call, info)],
                DaemonStep::ToolRetitled { call, title, kind } => {
                    vec![Effect::RetitleTool { call, title, kind }]
                }
                DaemonStep::ToolFinished(call, result) => vec![Effect::FinishTool(call, result)],
                DaemonStep::EndTurn(stop) => vec![Effect::EndTurn(stop)],
                DaemonStep::CutOff => vec![
                    Effect::Notice(crate::channel::Tone::Warning, CUT_OFF_TEXT.to_owned()),
                    Effect::EndTurnAs(TurnStatus::Interrupted),
                ],
                DaemonStep::Draft(seq, text) => vec![Effect::Draft(seq, text)],
                DaemonStep::NeverReached(last) => vec![Effect::SendAgain(last)],
                DaemonStep::ResumedStopped(running) => vec![
                    Effect::InterruptTools(running),
                    Effect::Notice(
                        crate::channel::Tone::Warning,
                        RESUMED_STOPPED_TEXT.to_owned(),
                    ),
                    Effect::EndTurnAs(TurnStatus::Interrupted),
                ],
                DaemonStep::ResumedCancelled(call, result) => vec![
                    Effect::FinishTool(call, result),
                    Effect::Notice(
                        crate::channel::Tone::Warning,
                        RESUMED_CANCELLED_TEXT.to_owned(),
                    ),
                    Effect::EndTurnAs(TurnStatus::Interrupted),
                ],
            },
            Event::Timer => {
                let resumed = self.turn.as_ref().is_some_and(|t| t.resumed);
                let due = self.on_timer(now, cfg);
                let mut effects: Vec<Effect> = due
                    .expired
                    .into_iter()
                    .map(Effect::ExpireApproval)
                    .collect();
                effects.extend(due.lines.into_iter().map(Effect::ShowLine));
                if let Some((seq, text)) = due.draft {
                    effects.push(Effect::Draft(seq, text));
                }
                if let Some(stall) = due.stall {
                    effects.push(Effect::Stalled {
                        stall,
                        resumed,
                        cancel: due.cancel,
                    });
                }
                if let Some(running) = due.unconfirmed_cancel {
                    effects.push(Effect::LetGoTools(running));
                    // After `/new` the session goes with the next message, and what the agent
                    // still sends for it is shown only until then.
                    let after = if self.abandon_session {
                        "Whatever the agent still sends for it is posted as it arrives, until the next message opens a new agent session."
                    } else {
                        "Whatever the agent still sends is posted as it arrives, apart from any turn."
                    };
                    effects.push(Effect::Notice(
                        crate::channel::Tone::Warning,
                        format!(
                            "The agent did not confirm the cancel within {}; the turn is ended here and the thread is free. {after}",
                            daemon_client::liveness::human_duration(cfg.cancel_grace)
                        ),
                    ));
                    effects.push(Effect::EndTurnAs(TurnStatus::Cancelled));
                }
                if let Some(running) = due.orphaned {
                    effects.push(Effect::InterruptTools(running));
                    effects.push(Effect::Notice(
                        crate::channel::Tone::Warning,
                        orphaned_text(cfg.reconnect_grace),
                    ));
                    effects.push(Effect::EndTurnAs(TurnStatus::Interrupted));
                }
                effects.extend(self.late.due(now).map(Effect::PostLate));
                if self.retry_at.is_some_and(|at| at <= now) {
                    self.retry_at = None;
                    if self.turn.is_none() && !self.queue.is_empty() {
                        effects.push(Effect::RunQueued);
                    }
                }
                effects
            }
            Event::PromptDone { seq, end } => self.on_prompt_done(seq, end),
            Event::Prompt(q) => {
                let event = q.event.clone();
                let text = q.text.clone();
                let message_id = q.message_id.clone();
                match self.admit_busy(q, cfg.queue_cap, cfg.while_busy) {
                    Admission::Start(q) => vec![Effect::StartTurn(q)],
                    Admission::Queued => vec![Effect::Queued(event)],
                    Admission::Held => {
                        self.retry_at.get_or_insert(now + cfg.hold_retry);
                        std::iter::once(Effect::Held(event))
                            .chain(self.held_notice())
                            .collect()
                    }
                    Admission::Steer => vec![Effect::Steer(event)],
                    Admission::Collected => vec![Effect::Collected(event)],
                    Admission::Full(waiting) => vec![Effect::QueueFull {
                        waiting,
                        refused: text,
                        message_id,
                    }],
                }
            }
            Event::Unreachable(q) => {
                // First in line again: it was the next to run (L7).
                self.queue.push_front(q);
                self.daemon_down = true;
                self.retry_at = Some(now + cfg.hold_retry);
                self.held_notice().into_iter().collect()
            }
            Event::Connection(up) => self.on_connection(up, now, cfg),
        }
    }

    /// The thread's one notice per outage that its messages are held (L7).
    fn held_notice(&mut self) -> Option<Effect> {
        if std::mem::replace(&mut self.held_noticed, true) {
            return None;
        }
        Some(Effect::Notice(
            crate::channel::Tone::Warning,
            HELD_TEXT.to_owned(),
        ))
    }

    /// The daemon connection went down or came back (L7): held prompts run in order once it is
    /// back; the console says both as chat lines.
    fn on_connection(&mut self, up: bool, now: Instant, cfg: &CoreConfig) -> Vec<Effect> {
        let was_down = std::mem::replace(&mut self.daemon_down, !up);
        let mut effects = Vec::new();
        if up {
            // The open turn's prompt went out on the old connection: bounded from now on (L7).
            // One still waiting for its files has sent nothing: it loads the session when they are in.
            if let Some(turn) = self.turn.as_mut().filter(|t| t.downloading.is_none()) {
                turn.orphan_by = Some(now + cfg.reconnect_grace);
            }
            self.held_noticed = false;
            self.retry_at = None;
            if cfg.announce_connection && was_down {
                effects.push(Effect::Notice(
                    crate::channel::Tone::Success,
                    BACK_TEXT.to_owned(),
                ));
            }
            if self.turn.is_none() && !self.queue.is_empty() {
                effects.push(Effect::RunQueued);
            }
        } else if cfg.announce_connection && !was_down {
            effects.push(Effect::Notice(
                crate::channel::Tone::Warning,
                LOST_TEXT.to_owned(),
            ));
        }
        effects
    }

    /// The prompt call `seq` returned.
    fn on_prompt_done(&mut self, seq: u64, end: PromptEnd) -> Vec<Effect> {
        if self.turn.as_ref().is_none_or(|t| t.prompt_seq != seq) {
            return Vec::new();
        }
        match end {
            PromptEnd::Answered | PromptEnd::Stopping => Vec::new(),
            PromptEnd::SessionLost(message) => {
                // Scoped while the session is still known: that is how the calls were stored.
                let session = self.session.take();
                let tools = self
                    .interrupt_tools()
                    .into_iter()
                    .map(|(call, title)| (scoped_id(session.as_ref(), &call), title))
                    .collect();
                self.session_ready = false;
                vec![
                    Effect::InterruptTools(tools),
                    Effect::Notice(
                        crate::channel::Tone::Error,
                        format!(
                            "The agent lost this thread's session while the connection was down ({message}); the turn was interrupted. Send the message again to start over."
                        ),
                    ),
                    Effect::EndTurnAs(TurnStatus::Interrupted),
                ]
            }
            PromptEnd::AgentExited(reason) => {
                let tools = self
                    .interrupt_tools()
                    .into_iter()
                    .map(|(call, title)| (scoped_id(self.session.as_ref(), &call), title))
                    .collect();
                // The restarted agent has not loaded the session yet (L6).
                self.session_ready = false;
                vec![
                    Effect::InterruptTools(tools),
                    Effect::Notice(
                        crate::channel::Tone::Error,
                        format!(
                            "The agent stopped during this turn ({reason}) and is being started again; the turn was interrupted. Send the message again if it still matters."
                        ),
                    ),
                    Effect::EndTurnAs(TurnStatus::Interrupted),
                ]
            }
            PromptEnd::Failed(e) => vec![
                Effect::Notice(
                    crate::channel::Tone::Error,
                    format!("The agent could not run this turn: {e}"),
                ),
                Effect::EndTurnAs(TurnStatus::Failed),
            ],
        }
    }

    /// A person's message: refused (A2), an answer to the one waiting approval (A3), a command,
    /// or a prompt.
    fn on_message(&mut self, said: Said, cfg: &CoreConfig) -> Vec<Effect> {
        let Said {
            user,
            text,
            message_id,
            event,
            files,
        } = said;
        let parsed = match self.parse(&text) {
            // Only files: still a prompt, so each file is used or the person hears why not.
            Parsed::Empty if !files.is_empty() => Parsed::Prompt(String::new()),
            p => p,
        };
        if let Some(act) = parsed.act()
            && act != Act::Read
        {
            let roles = Roles {
                mode: cfg.threads,
                owner: &self.owner,
                members: self.members.as_deref().unwrap_or_default(),
                approvers: &cfg.approvers,
            };
            if let Err(refusal) = roles.may(&user, act) {
                return vec![Effect::Refuse {
                    user,
                    message_id,
                    refusal,
                }];
            }
        }
        vec![match parsed {
            Parsed::Empty => return Vec::new(),
            Parsed::Numbered(n) => match self.numbered(n) {
                Some(Numbered::Option { request, option }) => Effect::Answer {
                    user,
                    request,
                    option,
                },
                // A number while an approval waits is an answer, never a command (A3).
                _ => Effect::Refuse {
                    user,
                    message_id,
                    refusal: Refusal::UnknownOption,
                },
            },
            Parsed::Command(Command::Steer(text)) if text.is_empty() => Effect::Notice(
                crate::channel::Tone::Warning,
                super::busy::STEER_USAGE.to_owned(),
            ),
            Parsed::Command(Command::Steer(text)) => Effect::Prompt(Queued {
                note: Some(super::busy::STEER_NOTE.to_owned()),
                ..Queued::new(user, text, message_id, event)
            }),
            Parsed::Command(command) => Effect::Command { user, command },
            // Without buttons an approval is answered by number: other text now is almost always a
            // mistyped answer, so it is not sent to the agent.
            Parsed::Prompt(_) if !cfg.buttons && !self.approvals.is_empty() => Effect::Notice(
                crate::channel::Tone::Warning,
                commands::APPROVAL_HINT.to_owned(),
            ),
            Parsed::Prompt(text) => Effect::Prompt(Queued {
                files,
                ..Queued::new(user, text, message_id, event)
            }),
        }]
    }

    /// Prompts are held: the daemon is down, or held prompts still wait with no turn running (L7).
    #[must_use]
    pub fn holding(&self) -> bool {
        self.daemon_down || (self.turn.is_none() && !self.queue.is_empty())
    }

    /// A prompt arrives under `turns.while_busy = mode`: it starts a turn, or — while one runs —
    /// steers (a `/steer`, or every prompt in `steer` mode), merges into the prompt waiting
    /// (`collect`), waits, or finds the queue full.
    pub fn admit_busy(&mut self, q: Queued, cap: usize, mode: WhileBusy) -> Admission {
        if self.holding() {
            // Held prompts run first and in order: nothing steers past them or merges into them,
            // and nothing is interrupted while the agent is unreachable (L7).
            return self.admit(Queued { note: None, ..q }, cap);
        }
        if self.turn.is_none() {
            // Nothing runs: nothing is interrupted, nothing to merge into.
            return Admission::Start(Queued { note: None, ..q });
        }
        let steer = q.steers() || mode == WhileBusy::Steer;
        if steer {
            let event = q.event.clone();
            let q = Queued {
                note: Some(super::busy::STEER_NOTE.to_owned()),
                ..q
            };
            return match self.queue.admit_ahead(q, cap) {
                Ok(()) => Admission::Steer,
                Err(waiting) => {
                    self.marks.add(event);
                    Admission::Full(waiting)
                }
            };
        }
        if mode == WhileBusy::Collect {
            return match self.queue.merge(q) {
                None => Admission::Collected,
                Some(q) => self.admit(q, cap),
            };
        }
        self.admit(q, cap)
    }

    /// A prompt arrives: it starts a turn, waits behind the running one, or finds the queue full.
    pub fn admit(&mut self, q: Queued, cap: usize) -> Admission {
        // Behind held prompts a prompt waits too: they run in order (L7).
        if self.turn.is_none() && !self.holding() {
            return Admission::Start(q);
        }
        let event = q.event.clone();
        match self.queue.admit(q, cap) {
            Ok(()) if self.turn.is_none() => Admission::Held,
            Ok(()) => Admission::Queued,
            Err(waiting) => {
                self.marks.add(event);
                Admission::Full(waiting)
            }
        }
    }

    /// A daemon event of this conversation's session, received at `now`.
    pub fn on_daemon(&mut self, e: DaemonEvent, now: Instant, cfg: &CoreConfig) -> DaemonStep {
        if replay::is_turn_work(&e)
            && let Some(turn) = self.turn.as_mut()
        {
            // A live frame of a turn's work: the daemon still runs it after a reconnect. (Session
            // chatter such as a load's command list is no sign of a running turn.)
            turn.orphan_by = None;
        }
        if let DaemonEvent::ReplayEnded { .. } = &e {
            return match self.turn.as_ref() {
                // D6: the replay shows the daemon's prompts, and this turn's is not among them.
                Some(turn) if replay::never_reached(turn) => {
                    DaemonStep::NeverReached(turn.replay_last_prompt.clone().unwrap_or_default())
                }
                _ => DaemonStep::Nothing,
            };
        }
        if let (DaemonEvent::Replayed { event, .. }, Some(turn)) = (&e, self.turn.as_mut())
            && let Some(settled) = replay::settles(event)
        {
            turn.replay_settled = settled;
        }
        if let (DaemonEvent::Replayed { event, .. }, Some(turn)) = (&e, self.turn.as_mut())
            && replay::of_an_earlier_call(turn, self.session.as_ref(), event)
        {
            // D6: the prompt the replay is at was an older one with the same text; what follows
            // it is that turn's, history (its answer so far is not this turn's either).
            turn.replay_at_own = Some(false);
            turn.answer.clear();
        }
        let e = match e {
            // History replayed by session/load is never live output (L6).
            DaemonEvent::Replayed { event, .. } => match self.turn.as_mut() {
                // Which prompt's frames follow (D6): a resumed turn takes only its own.
                Some(turn) if turn.resumed && matches!(&*event, DaemonEvent::UserText { .. }) => {
                    if let DaemonEvent::UserText { text, .. } = &*event {
                        let own = replay::is_own_prompt(turn, text);
                        if own {
                            turn.answer.clear();
                        }
                        turn.replay_at_own = Some(own);
                        turn.replay_last_prompt = Some(text.clone());
                    }
                    return DaemonStep::Nothing;
                }
                Some(turn) if replay::is_news(turn, &event) => {
                    let event = replay::lost_while_running(*event, turn.resumed);
                    if let DaemonEvent::ToolFinished { call, .. } = &event
                        && let Some(tool) = turn.tools.get_mut(call)
                    {
                        tool.ended_unseen = true;
                    }
                    if let Some((call, result)) = replay::resumed_cancelled(turn, &event) {
                        // D6: nothing of this turn runs any more; its prompt may sit unanswered
                        // in the session.
                        self.abandon_session = true;
                        return DaemonStep::ResumedCancelled(call, result);
                    }
                    event
                }
                // A call left running by an ended turn finished while the connection was down.
                None => match *event {
                    DaemonEvent::ToolFinished { call, result, .. }
                        if self.unfinished.contains_key(&call) =>
                    {
                        if let Some((_, tool)) = self.unfinished.get_mut(&call) {
                            tool.ended_unseen = true;
                        }
                        return DaemonStep::ToolFinished(call, result);
                    }
                    _ => return DaemonStep::Nothing,
                },
                _ => return DaemonStep::Nothing,
            },
            e => e,
        };
        if let DaemonEvent::PermissionRequested(req) = e {
            return DaemonStep::Permission(req);
        }
        let Some(turn) = self.turn.as_mut() else {
            match e {
                // A call still running when its turn ended: its result finishes it where it is
                // shown, and its heartbeats are counted meanwhile (F1).
                DaemonEvent::ToolFinished { call, result, .. }
                    if self.unfinished.contains_key(&call) =>
                {
                    return DaemonStep::ToolFinished(call, result);
                }
                DaemonEvent::ToolProgress {
                    call,
                    progress,
                    beats,
                    ..
                } => {
                    if let Some((_, tool)) = self.unfinished.get_mut(&call) {
                        tool.heartbeat(progress, beats, now);
                    }
                    return DaemonStep::Nothing;
                }
                // No turn open: what the agent still sends is posted later, gathered.
                e => {
                    self.late.take(&e, now);
                    return DaemonStep::Nothing;
                }
            }
        };
        turn.liveness.observe(&e, now);
        let (after, every) = (cfg.progress_after, cfg.progress_every);
        match e {
            DaemonEvent::ToolStarted { call, info, .. } => DaemonStep::ToolStarted(call, info),
            DaemonEvent::ToolUpdated { call, info, .. } => match turn.tools.get_mut(&call) {
                None => DaemonStep::ToolStarted(call, info),
                Some(tool) => match info.title {
                    Some(title) if tool.title != title => {
                        tool.title.clone_from(&title);
                        DaemonStep::ToolRetitled {
                            call,
                            title,
                            kind: info.kind,
                        }
                    }
                    _ => DaemonStep::Nothing,
                },
            },
            DaemonEvent::ToolProgress {
                call,
                progress,
                beats,
                ..
            } => {
                let Some(tool) = turn.tools.get_mut(&call) else {
                    // A call of an earlier turn still running (see `unfinished`) is counted.
                    if let Some((_, tool)) = self.unfinished.get_mut(&call) {
                        tool.heartbeat(progress, beats, now);
                    }
                    return DaemonStep::Heartbeat(None);
                };
                tool.heartbeat(progress, beats, now);
                DaemonStep::Heartbeat(line(call, tool, now, after, every))
            }
            DaemonEvent::ToolOutput { call, .. } => {
                let Some(tool) = turn.tools.get_mut(&call) else {
                    return DaemonStep::Output(None);
                };
                tool.last_output = Some(now);
                DaemonStep::Output(line(call, tool, now, after, every))
            }
            DaemonEvent::ToolFinished { call, result, .. } => {
                DaemonStep::ToolFinished(call, result)
            }
            DaemonEvent::AgentText { text, .. } => {
                turn.answer.push_str(&text);
                match cfg.stream_every.and_then(|every| turn.stream(now, every)) {
                    Some((seq, text)) => DaemonStep::Draft(seq, text),
                    None => DaemonStep::Nothing,
                }
            }
            DaemonEvent::TurnEnded { stop_reason, .. } => DaemonStep::EndTurn(stop_reason),
            DaemonEvent::Other {
                kind: Some(k),
                stop_reason,
                ..
            } if k == "turn_complete" && turn.resumed => {
                let nothing_done = turn.answer.trim().is_empty()
                    && turn.outcomes.is_empty()
                    && turn.tools.is_empty();
                // Nobody here asked for a cancel: the daemon stopped the prompt itself, as the
                // connection that sent it closed with the bridge's old process (D6).
                let stopped_by_daemon =
                    stop_reason == Some(StopReason::Cancelled) && turn.cancel_by.is_none();
                if nothing_done && (turn.replay_at_own == Some(true) || stopped_by_daemon) {
                    // D6: the prompt reached the daemon and its turn ended with nothing done — cut
                    // off when the bridge's connection died. Not re-sent; the session, which holds
                    // it unanswered, is left for a new one.
                    self.abandon_session = true;
                    return DaemonStep::CutOff;
                }
                if stopped_by_daemon {
                    // D6: what it did so far stands, the rest will not run (a call it had not
                    // started yet comes back "cancelled before execution"): the turn is
                    // interrupted, not ended, and not re-sent.
                    self.abandon_session = true;
                    let running = turn
                        .tools
                        .iter()
                        .map(|(call, t)| (scoped_id(self.session.as_ref(), call), t.title.clone()))
                        .collect();
                    return DaemonStep::ResumedStopped(running);
                }
                DaemonStep::EndTurn(stop_reason.unwrap_or(StopReason::EndTurn))
            }
            _ => DaemonStep::Nothing,
        }
    }

    /// A permission request of this turn: the options it may offer (A3), who asked for the turn,
    /// and the liveness clock re-armed (the request states the command's timeout, L2).
    pub fn permission(
        &mut self,
        mut req: PermissionRequest,
        owner: &str,
        now: Instant,
        cfg: &CoreConfig,
    ) -> (PermissionRequest, String) {
        // The request names the call by what it will run (qwen's tool call says only "Shell"):
        // the call keeps that title from now on, so its result line names the command (R6).
        if let (Some(call), Some(title)) = (&req.call, &req.info.title)
            && let Some(tool) = self.turn.as_mut().and_then(|t| t.tools.get_mut(call))
        {
            tool.title.clone_from(title);
        }
        req.options = super::approvals::offered(req.options, cfg.require_second_person);
        if let Some(turn) = self.turn.as_mut() {
            turn.liveness
                .observe(&DaemonEvent::PermissionRequested(req.clone()), now);
        }
        let requester = self
            .turn
            .as_ref()
            .map_or_else(|| owner.to_owned(), |t| t.row.requested_by.clone());
        (req, requester)
    }

    /// The turn `turn` ended with `tools` still running: they are kept until their results come
    /// (see [`State::unfinished`]).
    pub fn keep_unfinished(&mut self, turn: &str, tools: tools::Tools) {
        let mut tools: Vec<_> = tools.into_iter().collect();
        tools.sort_by_key(|(_, t)| t.started);
        for (call, tool) in tools {
            if self.unfinished.len() >= UNFINISHED_MAX {
                // The one that started first is let go (its result is then posted as late work).
                let oldest = self
                    .unfinished
                    .iter()
                    .min_by_key(|(_, (_, t))| t.started)
                    .map(|(c, _)| c.clone());
                if let Some(oldest) = oldest {
                    self.unfinished.remove(&oldest);
                }
            }
            self.unfinished.insert(call, (turn.to_owned(), tool));
        }
    }

    /// A tool call announced at `now` (or followed again after a replay): it now runs.
    pub fn tool_running(&mut self, call: ToolCallId, title: String, now: Instant, fresh: bool) {
        if let Some(turn) = self.turn.as_mut() {
            if fresh {
                // The answer is the text after the last tool call (R5); its draft, if any, is done.
                turn.answer.clear();
                turn.draft = None;
            }
            let mut tool = ToolState::new(title, now);
            // Followed again (a replay after a restart): an edit queued before may still wait.
            tool.edits_queued = !fresh;
            turn.tools.insert(call, tool);
        }
    }

    /// An edit of the running call `call`'s message was queued (see [`ToolState::edits_queued`]).
    pub fn tool_edited(&mut self, call: &ToolCallId) {
        if let Some(tool) = self.turn.as_mut().and_then(|t| t.tools.get_mut(call)) {
            tool.edits_queued = true;
        }
    }

    /// The running call `call` is stored as `id` (its page on the live view).
    pub fn tool_stored(&mut self, call: &ToolCallId, id: String) {
        if let Some(tool) = self.turn.as_mut().and_then(|t| t.tools.get_mut(call)) {
            tool.stored_id = Some(id);
        }
    }

    /// A tool call finished with `outcome`: it no longer runs; the turn's mark remembers it.
    pub fn tool_done(&mut self, call: &ToolCallId, outcome: ToolOutcome) -> Option<ToolState> {
        let turn = self.turn.as_mut()?;
        turn.outcomes.push(outcome);
        turn.tools.remove(call)
    }

    /// Undoes [`State::tool_done`] (its result could not be written yet): the call runs again as
    /// it was, its outcome not yet counted.
    pub fn tool_undone(&mut self, call: ToolCallId, tool: Option<ToolState>) {
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        turn.outcomes.pop();
        if let Some(tool) = tool {
            turn.tools.insert(call, tool);
        }
    }

    /// The daemon lost the session: every running call of the turn is over (interrupted).
    pub fn interrupt_tools(&mut self) -> Vec<(ToolCallId, String)> {
        let Some(turn) = self.turn.as_mut() else {
            return Vec::new();
        };
        let running: Vec<(ToolCallId, String)> = turn
            .tools
            .drain()
            .map(|(call, tool)| (call, tool.title))
            .collect();
        turn.outcomes
            .extend(running.iter().map(|_| ToolOutcome::Interrupted));
        running
    }

    /// An approval was answered with `option` (or expired, `None`): a rejection stops the turn's
    /// ✅ (the mark says ⏹).
    pub fn approval_closed(&mut self, p: &Pending, option: Option<&str>, now: Instant) {
        let rejected = option.is_none_or(|o| p.rejects(o));
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        // The idle limit counts from the decision, not from the request (L1).
        turn.liveness.hold(now);
        if rejected {
            turn.rejected = true;
        }
        for tool in turn.tools.values_mut() {
            if tool.awaiting_approval.as_deref() == Some(p.db_id.as_str()) {
                // It runs from the decision on: its running time starts now.
                tool.awaiting_approval = None;
                tool.started = now;
            }
        }
    }

    /// Approval `id` was asked for `call`: until it is answered the call is not running (R6).
    pub fn approval_asked(&mut self, call: Option<&ToolCallId>, id: &str) {
        if let Some(tool) = call.and_then(|c| self.turn.as_mut().and_then(|t| t.tools.get_mut(c))) {
            tool.awaiting_approval = Some(id.to_owned());
        }
    }

    /// `/cancel` (or `on_stall = cancel`) at `now`: recorded as the turn's cause unless one came first
    /// (T2); the daemon has `grace` to end the turn before the bridge does.
    pub fn record_cancel(&mut self, now: Instant, grace: Duration) {
        if let Some(turn) = self.turn.as_mut() {
            turn.record_cancel(now, grace);
        }
    }

    /// What is due at `now`: expired approvals, progress lines, a stall.
    pub fn on_timer(&mut self, now: Instant, cfg: &CoreConfig) -> Due {
        let mut due = Due {
            expired: self.approvals.take_expired(now),
            ..Due::default()
        };
        for p in &due.expired {
            self.approval_closed(p, None, now);
        }
        let Some(turn) = self.turn.as_mut() else {
            return due;
        };
        let (after, every) = (cfg.progress_after, cfg.progress_every);
        for (call, tool) in &mut turn.tools {
            if let Some(l) = line(call.clone(), tool, now, after, every) {
                due.lines.push(l);
            }
        }
        due.lines
            .sort_by(|a, b| a.call.as_str().cmp(b.call.as_str()));
        due.draft = turn.draft_due(now);
        if !self.approvals.is_empty() {
            // The daemon waits for a person's decision: that silence is ours, not a stall (L1).
            turn.liveness.hold(now);
        }
        if turn.resumed && self.daemon_down {
            // Taken back after a restart while the daemon cannot be reached: nobody has asked it
            // yet, so its silence says nothing about the turn; its fate is read once it is back
            // (L7, D3).
            turn.liveness.hold(now);
        }
        due.stall = turn.liveness.poll(now);
        if due.stall.is_some() && turn.resumed {
            // Closed as interrupted (D3): its prompt may sit unanswered in the session (D6).
            self.abandon_session = true;
        }
        if due.stall.is_some()
            && !turn.resumed
            && cfg.on_stall == OnStall::Cancel
            && self.session.is_some()
        {
            turn.record_cancel(now, cfg.cancel_grace);
            due.cancel = true;
        }
        if turn.orphan_by.is_some_and(|by| by <= now) {
            turn.orphan_by = None;
            let running: Vec<(String, String)> = turn
                .tools
                .drain()
                .map(|(call, t)| (scoped_id(self.session.as_ref(), &call), t.title))
                .collect();
            turn.outcomes
                .extend(running.iter().map(|_| ToolOutcome::Interrupted));
            due.lines.clear();
            due.orphaned = Some(running);
            self.abandon_session = true;
            return due;
        }
        if turn.cancel_by.is_some_and(|by| by <= now) {
            turn.cancel_by = None;
            due.unconfirmed_cancel = Some(
                turn.tools
                    .iter()
                    .map(|(call, t)| (scoped_id(self.session.as_ref(), call), t.title.clone()))
                    .collect(),
            );
        }
        due
    }

    /// The mark the turn's message gets if the turn ended now the way `stop` says.
    #[must_use]
    pub fn mark_if_ended(&self, stop: Option<&StopReason>) -> Option<Mark> {
        self.turn.as_ref().map(|t| t.ending(stop, None).mark)
    }
}

fn line(
    call: ToolCallId,
    tool: &mut ToolState,
    now: Instant,
    after: Duration,
    every: Duration,
) -> Option<Line> {
    let (elapsed, age) = tool.progress_line(now, after, every)?;
    Some(Line {
        call,
        title: tool.title.clone(),
        elapsed,
        age,
    })
}

/// What the thread hears when a turn open across a reconnect is ended because the daemon sent
/// nothing for it within `grace` (L7, D6: it is not sent again).
#[must_use]
pub fn orphaned_text(grace: Duration) -> String {
    format!(
        "The connection to the agent was lost while this turn ran, and in the {} since it came back the agent sent nothing for it (it most likely restarted). The turn is marked interrupted and was not re-run; send the message again if it still matters. {FRESH_SESSION_TEXT}",
        daemon_client::liveness::human_duration(grace)
    )
}

/// A tool call's id scoped by its daemon session (see [`State::scoped`]).
#[must_use]
pub fn scoped_id(session: Option<&SessionId>, call: &ToolCallId) -> String {
    match session {
        Some(s) => format!("{s}/{call}"),
        None => call.as_str().to_owned(),
    }
}
