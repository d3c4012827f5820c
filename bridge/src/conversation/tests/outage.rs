//! L7: while the daemon is unreachable, prompts are held in the conversation's bounded queue (their
//! inbox entries stay unhandled, so they are durable), the thread hears it once per outage, and
//! they run in order when the daemon is back.

use super::{Clock, cfg, running, secs, session};
use crate::channel::Tone;
use crate::conversation::effects::Effect;
use crate::conversation::event::{Event, PromptEnd};
use crate::conversation::state::{BACK_TEXT, HELD_TEXT, LOST_TEXT, State};
use crate::conversation::turn::Queued;

fn prompt(n: u32) -> Queued {
    Queued::new(
        "alice".into(),
        format!("prompt {n}"),
        Some(format!("m{n}")),
        Some(("slack".into(), format!("Ev{n}"))),
    )
}

fn held_notice() -> Effect {
    Effect::Notice(Tone::Warning, HELD_TEXT.to_owned())
}

fn down() -> State {
    let mut s = State::new(Some(session()));
    s.daemon_down = true;
    s
}

#[test]
fn l7_prompts_during_an_outage_are_held_with_one_notice_and_run_in_order_when_it_is_back() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = down();
    assert_eq!(
        s.handle(Event::Prompt(prompt(1)), clock.now(), &c),
        [Effect::Held(prompt(1).event), held_notice()],
        "the first held message gets the one notice"
    );
    assert_eq!(
        s.handle(Event::Prompt(prompt(2)), clock.now(), &c),
        [Effect::Held(prompt(2).event)],
        "the second one is held without another notice"
    );
    assert!(!s.is_idle(), "held prompts keep the conversation in memory");
    assert_eq!(
        s.handle(Event::Connection(true), clock.now(), &c),
        [Effect::RunQueued]
    );
    assert_eq!(s.queue.pop(), Some(prompt(1)), "first in, first run");
    assert_eq!(s.queue.pop(), Some(prompt(2)));
}

#[test]
fn l7_the_hold_is_bounded_by_the_queue() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = down();
    for n in 1..=2 {
        let effects = s.handle(Event::Prompt(prompt(n)), clock.now(), &c);
        assert_eq!(effects.first(), Some(&Effect::Held(prompt(n).event)));
    }
    assert_eq!(
        s.handle(Event::Prompt(prompt(3)), clock.now(), &c),
        [Effect::QueueFull {
            waiting: 2,
            refused: "prompt 3".into(),
            message_id: Some("m3".into())
        }],
        "queue_cap = 2 in these settings"
    );
    assert!(
        s.marks.pending().contains(&("slack".into(), "Ev3".into())),
        "the refused one is marked handled by its notice"
    );
}

#[test]
fn l7_a_new_outage_gets_a_new_notice() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = down();
    let _ = s.handle(Event::Prompt(prompt(1)), clock.now(), &c);
    let _ = s.handle(Event::Connection(true), clock.now(), &c);
    let _ = s.queue.pop();
    let _ = s.handle(Event::Connection(false), clock.now(), &c);
    assert_eq!(
        s.handle(Event::Prompt(prompt(2)), clock.now(), &c),
        [Effect::Held(prompt(2).event), held_notice()]
    );
}

#[test]
fn l7_a_prompt_behind_held_ones_waits_its_turn_even_when_the_daemon_is_back() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = down();
    let _ = s.handle(Event::Prompt(prompt(1)), clock.now(), &c);
    s.daemon_down = false;
    let effects = s.handle(Event::Prompt(prompt(2)), clock.now(), &c);
    assert_eq!(effects.first(), Some(&Effect::Held(prompt(2).event)));
    assert_eq!(s.queue.len(), 2, "never overtakes the held one");
}

#[test]
fn l7_a_turn_that_could_not_reach_the_agent_is_held_first_in_line_and_tried_again() {
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = State::new(Some(session()));
    let _ = s.handle(Event::Prompt(prompt(2)), clock.now(), &c);
    let _ = s.queue.pop();
    s.queue.admit(prompt(3), 5).expect("room");
    assert_eq!(
        s.handle(Event::Unreachable(prompt(2)), clock.now(), &c),
        [held_notice()]
    );
    assert_eq!(s.queue.len(), 2);
    assert!(s.daemon_down);
    // No reconnect is reported (the connection counted as up): tried again after `hold_retry`.
    let due = s.next_deadline(&c).expect("a retry is due");
    assert_eq!(due, clock.now() + c.hold_retry);
    assert_eq!(
        s.handle(Event::Timer, clock.advance(c.hold_retry - secs(1)), &c),
        []
    );
    assert_eq!(
        s.handle(Event::Timer, clock.advance(secs(1)), &c),
        [Effect::RunQueued]
    );
    assert_eq!(s.queue.pop(), Some(prompt(2)), "the held one first");
    // Unreachable again: no second notice in the same outage.
    assert_eq!(s.handle(Event::Unreachable(prompt(2)), clock.now(), &c), []);
}

#[test]
fn l7_prompts_behind_a_running_turn_wait_for_it_not_for_the_reconnect() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    let _ = s.handle(Event::Connection(false), clock.now(), &c);
    assert_eq!(
        s.handle(Event::Prompt(prompt(2)), clock.now(), &c),
        [Effect::Queued(prompt(2).event)],
        "queued behind the turn as always"
    );
    assert_eq!(
        s.handle(Event::Connection(true), clock.now(), &c),
        [],
        "the running turn's end starts it, not the reconnect"
    );
    let seq = s.turn.as_ref().expect("turn").prompt_seq;
    let _ = s.handle(
        Event::PromptDone {
            seq,
            end: PromptEnd::Answered,
        },
        clock.now(),
        &c,
    );
    assert_eq!(s.queue.len(), 1);
}

#[test]
fn l7_the_console_says_connection_loss_and_recovery_as_chat_lines_once_each() {
    let mut c = cfg();
    c.announce_connection = true;
    let clock = Clock::new();
    let mut s = State::new(Some(session()));
    assert_eq!(
        s.handle(Event::Connection(false), clock.now(), &c),
        [Effect::Notice(Tone::Warning, LOST_TEXT.to_owned())]
    );
    assert_eq!(
        s.handle(Event::Connection(false), clock.now(), &c),
        [],
        "once per outage"
    );
    assert_eq!(
        s.handle(Event::Connection(true), clock.now(), &c),
        [Effect::Notice(Tone::Success, BACK_TEXT.to_owned())]
    );
    assert_eq!(s.handle(Event::Connection(true), clock.now(), &c), []);
    let mut threads = cfg();
    threads.announce_connection = false;
    assert_eq!(
        s.handle(Event::Connection(false), clock.now(), &threads),
        [],
        "Slack and Discord threads hear about it only when a message is held"
    );
}

#[test]
fn l7_a_turn_open_across_a_reconnect_that_hears_nothing_live_is_ended_as_interrupted_once() {
    use super::{info, started};
    use crate::conversation::event::TurnStatus;
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = running(&clock, &c);
    let _ = s.handle(Event::Daemon(started(1, "sleep 5")), clock.now(), &c);
    s.tool_running(super::call(1), "sleep 5".into(), clock.now(), true);
    let _ = s.handle(Event::Connection(false), clock.now(), &c);
    assert_eq!(s.handle(Event::Connection(true), clock.now(), &c), []);
    assert_eq!(
        s.turn.as_ref().and_then(|t| t.orphan_by),
        Some(clock.now() + c.reconnect_grace),
        "bounded from the reconnect on"
    );
    // The load's replay is history, not a sign of life.
    let replay = daemon_client::DaemonEvent::Replayed {
        session: session(),
        event: Box::new(daemon_client::DaemonEvent::ToolStarted {
            session: session(),
            call: super::call(1),
            info: info("sleep 5"),
        }),
    };
    let _ = s.handle(Event::Daemon(replay), clock.advance(secs(1)), &c);
    // Nor is session chatter after a load (qwen's command list).
    let chatter = daemon_client::DaemonEvent::Other {
        session: Some(session()),
        method: "session/update".into(),
        kind: Some("available_commands_update".into()),
        stop_reason: None,
    };
    let _ = s.handle(Event::Daemon(chatter), clock.now(), &c);
    let effects: Vec<Effect> = s
        .handle(Event::Timer, clock.advance(c.reconnect_grace), &c)
        .into_iter()
        .filter(|e| !matches!(e, Effect::ShowLine(_)))
        .collect();
    assert_eq!(
        effects,
        [
            Effect::InterruptTools(vec![("s1/call-1".into(), "sleep 5".into())]),
            Effect::Notice(
                Tone::Warning,
                crate::conversation::state::orphaned_text(c.reconnect_grace)
            ),
            Effect::EndTurnAs(TurnStatus::Interrupted),
        ]
    );
    assert!(
        s.abandon_session,
        "D6: the next prompt opens a new session, or the daemon would run the cut-off one again"
    );
    assert_eq!(
        s.handle(Event::Timer, clock.advance(c.reconnect_grace), &c),
        [],
        "reported once"
    );
}

#[test]
fn l7_a_live_frame_after_a_reconnect_keeps_the_turn() {
    use super::started;
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = running(&clock, &c);
    let _ = s.handle(Event::Connection(false), clock.now(), &c);
    let _ = s.handle(Event::Connection(true), clock.now(), &c);
    let _ = s.handle(
        Event::Daemon(started(2, "echo on")),
        clock.advance(secs(2)),
        &c,
    );
    assert!(s.turn.as_ref().expect("turn").orphan_by.is_none());
    let effects = s.handle(Event::Timer, clock.advance(c.reconnect_grace), &c);
    assert!(
        effects
            .iter()
            .all(|e| !matches!(e, Effect::EndTurnAs(_) | Effect::InterruptTools(_))),
        "{effects:#?}"
    );
    assert!(s.turn.is_some());
}
