//! Frames a `session/load` replays (L6): history, never live output — except what a turn still
//! waits on, which ended while the connection was down.

use daemon_client::DaemonEvent;

use super::turn::TurnState;

/// D6: for a turn taken back after a restart, reading the replay as its own: a frame of a call
/// stored for an earlier turn — the prompt the replay is at is an older one with the same text.
#[must_use]
pub fn of_an_earlier_call(
    turn: &TurnState,
    session: Option<&daemon_client::SessionId>,
    event: &DaemonEvent,
) -> bool {
    let call = match event {
        DaemonEvent::ToolStarted { call, .. }
        | DaemonEvent::ToolUpdated { call, .. }
        | DaemonEvent::ToolProgress { call, .. }
        | DaemonEvent::ToolOutput { call, .. }
        | DaemonEvent::ToolFinished { call, .. }
        | DaemonEvent::LateUpdate { call, .. } => call,
        _ => return false,
    };
    turn.resumed
        && turn.replay_at_own == Some(true)
        && turn
            .earlier_calls
            .contains(&super::state::scoped_id(session, call))
}

/// How a replayed frame leaves the session (D6): `Some(true)` a turn's end (nothing runs after
/// it), `Some(false)` a prompt or a turn's work, `None` neither (usage, a command list).
#[must_use]
pub fn settles(event: &DaemonEvent) -> Option<bool> {
    match event {
        DaemonEvent::Other { kind: Some(k), .. } if k == "turn_complete" => Some(true),
        DaemonEvent::TurnEnded { .. } => Some(true),
        DaemonEvent::UserText { .. } => Some(false),
        e if is_turn_work(e) => Some(false),
        _ => None,
    }
}

/// Whether a frame replayed by `session/load` tells the open turn something it has not seen (L6):
/// how a tool it still waits on went on while the connection was down, or — for a turn resumed after
/// a restart, which knows none of its tools yet — any tool frame (F4 and the message map make the
/// already-seen ones harmless). Text is history — an answer is never glued to an old one — except
/// a resumed turn's own answer, after the replay showed its own prompt (D6).
pub fn is_news(turn: &TurnState, event: &DaemonEvent) -> bool {
    match event {
        // The answer of this turn's own prompt, which ended while the bridge was down (D6).
        DaemonEvent::AgentText { .. } => turn.resumed && turn.replay_at_own == Some(true),
        // A replayed heartbeat proves nothing is alive now, and it may have been counted when it
        // was live: counting it again would make the stored count disagree with what came (F1).
        DaemonEvent::ToolProgress { .. }
        | DaemonEvent::UserText { .. }
        | DaemonEvent::Thought { .. }
        | DaemonEvent::Usage { .. }
        | DaemonEvent::Plan { .. }
        | DaemonEvent::PermissionRequested(_) => false,
        DaemonEvent::ToolUpdated { call, .. }
        | DaemonEvent::ToolOutput { call, .. }
        | DaemonEvent::ToolFinished { call, .. } => {
            resumed_and_own(turn) || turn.tools.contains_key(call)
        }
        _ => resumed_and_own(turn),
    }
}

/// A resumed turn, and the replay is not inside an older turn's frames (D6: an older turn's
/// `turn_complete` must not end this one).
fn resumed_and_own(turn: &TurnState) -> bool {
    turn.resumed && turn.replay_at_own != Some(false)
}

/// Whether a prompt the replay shows is this turn's own (as stored: NUL shown as `␀`, D6). The
/// agent received it as sent — with the steer note and each part's `[name] ` — while the history
/// keeps it as typed; either form is its own.
#[must_use]
pub fn is_own_prompt(turn: &TurnState, text: &str) -> bool {
    is_prompt(&turn.row.prompt, text)
}

/// Whether a prompt the replay shows is the one stored as `stored` (see [`is_own_prompt`]).
#[must_use]
pub fn is_prompt(stored: &str, text: &str) -> bool {
    let shown = text.replace('\0', "\u{2400}");
    let stored = stored.trim();
    shown.trim() == stored || as_typed(&shown) == stored
}

/// D6: a turn taken back after a restart whose prompt never reached the daemon — the load's
/// replay names the daemon's prompts, the last of them is not this turn's (a daemon that replays
/// no prompts proves nothing) and the replay ends in that older turn's end (nothing ran after
/// it) — and of which nothing was seen: the bridge stopped after recording the prompt as sent and
/// before the daemon got it.
#[must_use]
pub fn never_reached(turn: &TurnState) -> bool {
    turn.resumed
        && turn.replay_at_own == Some(false)
        && turn.replay_settled
        && turn.tools.is_empty()
        && turn.outcomes.is_empty()
        && turn.answer.trim().is_empty()
        && turn.cancel_by.is_none()
        && turn.downloading.is_none()
}

/// A prompt as sent to the agent, as its people typed it: without the steer note first, the context
/// block after it ([`super::context`]) and the `[name] ` label each paragraph may start with (a label holds no bracket or line break).
fn as_typed(sent: &str) -> String {
    let sent = sent.trim();
    let sent = sent
        .strip_prefix(super::busy::STEER_NOTE)
        .unwrap_or(sent)
        .trim_start();
    let sent = super::context::strip(sent);
    sent.split("\n\n")
        .map(|part| {
            part.strip_prefix('[')
                .and_then(|rest| rest.split_once("] "))
                .filter(|(label, _)| !label.contains(['[', ']', '\n']))
                .map_or(part, |(_, typed)| typed)
        })
        .collect::<Vec<_>>()
        .join("\n\n")
        .trim()
        .to_owned()
}

/// A result that reaches the turn only through a load's replay ended while the connection was down:
/// the daemon's own words for a call it lost ("The tool had already completed; its output was
/// discarded.") would mislead, so the thread hears what the bridge knows first — for a turn
/// `resumed` after a restart, that the bridge restarted; a cancel then is the bridge's connection
/// closing, and the daemon's words for it are left out.
pub fn lost_while_running(event: DaemonEvent, resumed: bool) -> DaemonEvent {
    match event {
        DaemonEvent::ToolFinished {
            session,
            call,
            mut result,
        } if result.outcome != daemon_client::Outcome::Completed => {
            let theirs = result.summary.take();
            result.summary = Some(match theirs {
                _ if resumed && result.outcome == daemon_client::Outcome::Cancelled => {
                    "The bridge restarted while this ran; the agent stopped it when the bridge's connection closed.".to_owned()
                }
                Some(t) if resumed && !t.trim().is_empty() => format!(
                    "The bridge restarted while this ran; the agent reports: {t}"
                ),
                _ if resumed => "The bridge restarted while this ran.".to_owned(),
                Some(t) if !t.trim().is_empty() => format!(
                    "The connection to the agent was lost while this ran (the agent restarted or the network dropped); the agent reports: {t}"
                ),
                _ => "The connection to the agent was lost while this ran (the agent restarted or the network dropped).".to_owned(),
            });
            DaemonEvent::ToolFinished {
                session,
                call,
                result,
            }
        }
        other => other,
    }
}

/// For a turn taken back after a restart: a replayed result saying the daemon cancelled the last
/// call still running — it did so when the bridge's connection died, so nothing of the turn runs
/// any more and its end (which the daemon does not replay) will never come (D6).
#[must_use]
pub fn resumed_cancelled(
    turn: &TurnState,
    event: &DaemonEvent,
) -> Option<(daemon_client::ToolCallId, daemon_client::ToolResult)> {
    match event {
        DaemonEvent::ToolFinished { call, result, .. }
            if turn.resumed
                && result.outcome == daemon_client::Outcome::Cancelled
                && turn.tools.keys().all(|c| c == call) =>
        {
            Some((call.clone(), result.clone()))
        }
        _ => None,
    }
}

/// Whether a live (not replayed) frame is a running turn's work: text, a thought, a plan, a tool
/// frame (heartbeats included), a permission request or the turn's end. What a daemon sends about a
/// session that runs nothing — its command list after a load, usage — is not (L7).
pub fn is_turn_work(event: &DaemonEvent) -> bool {
    matches!(
        event,
        DaemonEvent::AgentText { .. }
            | DaemonEvent::Thought { .. }
            | DaemonEvent::Plan { .. }
            | DaemonEvent::ToolStarted { .. }
            | DaemonEvent::ToolUpdated { .. }
            | DaemonEvent::ToolProgress { .. }
            | DaemonEvent::ToolOutput { .. }
            | DaemonEvent::ToolFinished { .. }
            | DaemonEvent::LateUpdate { .. }
            | DaemonEvent::PermissionRequested(_)
            | DaemonEvent::TurnEnded { .. }
    )
}
