//! Steer or queue (`turns.while_busy`, `/steer`): what a prompt that arrives while a turn runs does.

use super::{Clock, cfg, running};
use crate::conversation::Effect;
use crate::conversation::busy::{STEER_NOTE, STEER_USAGE, WhileBusy};
use crate::conversation::event::{Event, Said};
use crate::conversation::state::State;
use crate::conversation::turn::Queued;
use crate::core::CoreConfig;

fn said(user: &str, text: &str, n: u32) -> Event {
    Event::Message(Said {
        user: user.to_owned(),
        text: text.to_owned(),
        message_id: Some(format!("m{n}")),
        event: Some(("slack".into(), format!("Ev{n}"))),
        files: Vec::new(),
    })
}

/// A message taken through the state as the runner does: its meaning, then its admission.
fn send(
    s: &mut State,
    c: &CoreConfig,
    clock: &Clock,
    user: &str,
    text: &str,
    n: u32,
) -> Vec<Effect> {
    let mut out = Vec::new();
    for e in s.handle(said(user, text, n), clock.now(), c) {
        match e {
            Effect::Prompt(q) => out.extend(s.handle(Event::Prompt(q), clock.now(), c)),
            other => out.push(other),
        }
    }
    out
}

fn mode(m: WhileBusy) -> CoreConfig {
    CoreConfig {
        while_busy: m,
        queue_cap: 5,
        threads: crate::config::ThreadAccess::Shared,
        ..cfg()
    }
}

#[test]
fn collect_merges_three_messages_that_arrive_during_a_turn_into_one_prompt() {
    let c = mode(WhileBusy::Collect);
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    let first = send(&mut s, &c, &clock, "alice", "add a test", 1);
    assert_eq!(
        first,
        [Effect::Queued(Some(("slack".into(), "Ev1".into())))]
    );
    let second = send(&mut s, &c, &clock, "bob", "and a benchmark", 2);
    assert_eq!(
        second,
        [Effect::Collected(Some(("slack".into(), "Ev2".into())))]
    );
    let third = send(&mut s, &c, &clock, "alice", "then commit", 3);
    assert_eq!(
        third,
        [Effect::Collected(Some(("slack".into(), "Ev3".into())))]
    );
    assert_eq!(s.queue.len(), 1, "one prompt waits");
    let q = s.queue.pop().expect("the merged prompt");
    assert_eq!(q.typed(), "add a test\n\nand a benchmark\n\nthen commit");
    assert_eq!(
        q.for_agent("\n\n", true, |u, t| format!("[{u}] {t}")),
        "[alice] add a test\n\n[bob] and a benchmark\n\n[alice] then commit",
        "each part keeps its speaker"
    );
    assert_eq!(
        q.events().len(),
        3,
        "all three are marked handled when it starts"
    );
    assert_eq!(
        q.merged_messages(),
        ["m2", "m3"],
        "and all three get the turn's mark"
    );
}

#[test]
fn queue_mode_keeps_each_message_its_own_turn() {
    let c = mode(WhileBusy::Queue);
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    for n in 1..=3 {
        assert!(matches!(
            send(&mut s, &c, &clock, "alice", "x", n)[..],
            [Effect::Queued(_)]
        ));
    }
    assert_eq!(s.queue.len(), 3);
}

#[test]
fn steer_mode_cancels_the_running_turn_and_the_new_message_goes_first_with_a_note() {
    let c = mode(WhileBusy::Steer);
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    s.queue
        .admit(Queued::new("bob".into(), "older".into(), None, None), 5)
        .expect("room");
    assert!(matches!(
        send(&mut s, &c, &clock, "alice", "stop, do this", 1)[..],
        [Effect::Steer(_)]
    ));
    assert!(matches!(
        send(&mut s, &c, &clock, "alice", "and this", 2)[..],
        [Effect::Steer(_)]
    ));
    let next = s.queue.pop().expect("next");
    assert_eq!(
        next.text, "stop, do this",
        "steered messages go ahead, in their order"
    );
    assert_eq!(
        next.for_agent("\n\n", true, |_, t| t.to_owned()),
        format!("{STEER_NOTE}\n\nstop, do this")
    );
    assert_eq!(s.queue.pop().expect("then").text, "and this");
    assert_eq!(s.queue.pop().expect("then").text, "older");
}

#[test]
fn slash_steer_steers_one_message_in_queue_mode_and_is_a_plain_prompt_when_idle() {
    let c = mode(WhileBusy::Queue);
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    assert!(matches!(
        send(&mut s, &c, &clock, "alice", "/steer use rg instead", 1)[..],
        [Effect::Steer(_)]
    ));
    assert_eq!(s.queue.pop().expect("it").text, "use rg instead");
    assert!(matches!(
        &send(&mut s, &c, &clock, "alice", "/steer", 2)[..],
        [Effect::Notice(_, t)] if t == STEER_USAGE
    ));
    let mut idle = State::new(None);
    match &send(&mut idle, &c, &clock, "alice", "/steer ls", 3)[..] {
        [Effect::StartTurn(q)] => {
            assert_eq!(q.text, "ls");
            assert_eq!(q.note, None, "nothing was interrupted");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a2_steering_is_prompting_an_outsider_is_refused() {
    let c = CoreConfig {
        threads: crate::config::ThreadAccess::Owner,
        ..mode(WhileBusy::Steer)
    };
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    s.owner = "alice".into();
    s.members = Some(Vec::new());
    assert!(matches!(
        send(&mut s, &c, &clock, "mallory", "/steer rm -rf /", 1)[..],
        [Effect::Refuse { .. }]
    ));
    assert!(s.queue.is_empty());
}

#[test]
fn steering_a_full_queue_is_refused_with_the_queue_full_notice() {
    let c = CoreConfig {
        queue_cap: 1,
        ..mode(WhileBusy::Steer)
    };
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    assert!(matches!(
        send(&mut s, &c, &clock, "alice", "a", 1)[..],
        [Effect::Steer(_)]
    ));
    assert_eq!(
        send(&mut s, &c, &clock, "alice", "b", 2),
        [Effect::QueueFull {
            waiting: 1,
            refused: "b".into(),
            message_id: Some("m2".into())
        }]
    );
}

// L7 with `while_busy`: held prompts (the agent unreachable) run first and in order; nothing
// steers past them, merges into them, or interrupts a turn while the daemon is down.

#[test]
fn l7_steer_while_the_daemon_is_down_waits_behind_held_prompts_and_interrupts_nothing() {
    let c = mode(WhileBusy::Steer);
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    let _ = s.handle(Event::Connection(false), clock.now(), &c);
    assert!(matches!(
        send(&mut s, &c, &clock, "alice", "first", 1)[..],
        [Effect::Queued(_)]
    ));
    assert!(matches!(
        send(&mut s, &c, &clock, "bob", "/steer second", 2)[..],
        [Effect::Queued(_)]
    ));
    let first = s.queue.pop().expect("first");
    assert_eq!(first.text, "first", "no steer overtakes a waiting prompt");
    let second = s.queue.pop().expect("second");
    assert_eq!(second.text, "second");
    assert_eq!(second.note, None, "nothing was interrupted for it");
}

#[test]
fn l7_collect_does_not_merge_into_held_prompts_and_steer_does_not_start_past_them() {
    for m in [WhileBusy::Collect, WhileBusy::Steer] {
        let c = mode(m);
        let clock = Clock::new();
        let mut s = State::new(Some(super::session()));
        let _ = s.handle(Event::Connection(false), clock.now(), &c);
        let first = send(&mut s, &c, &clock, "alice", "one", 1);
        assert!(
            matches!(first[..], [Effect::Held(_), Effect::Notice(..)]),
            "{m:?}: {first:?}"
        );
        // Back, but the held prompt has not run yet: the next one still waits behind it.
        let _ = s.handle(Event::Connection(true), clock.now(), &c);
        let second = send(&mut s, &c, &clock, "bob", "/steer two", 2);
        assert!(
            matches!(second[..], [Effect::Held(_), ..]),
            "{m:?}: {second:?}"
        );
        assert_eq!(s.queue.len(), 2, "{m:?}: held apart, not merged");
        let one = s.queue.pop().expect("one");
        assert_eq!((one.text.as_str(), one.merged.len()), ("one", 0), "{m:?}");
        let two = s.queue.pop().expect("two");
        assert_eq!((two.text.as_str(), two.note.as_deref()), ("two", None));
    }
}

#[test]
fn l7_one_timer_posts_late_work_and_retries_held_prompts() {
    use daemon_client::DaemonEvent;
    let c = mode(WhileBusy::Queue);
    let mut clock = Clock::new();
    let mut s = State::new(Some(super::session()));
    let _ = s.handle(
        Event::Daemon(DaemonEvent::AgentText {
            session: super::session(),
            text: "done late".into(),
        }),
        clock.now(),
        &c,
    );
    let q = Queued::new("alice".into(), "held".into(), None, None);
    let _ = s.handle(Event::Unreachable(q), clock.now(), &c);
    clock.advance(crate::conversation::late::LATE_QUIET.max(c.hold_retry));
    let effects = s.handle(Event::Timer, clock.now(), &c);
    assert!(
        effects
            .iter()
            .any(|e| matches!(e, Effect::PostLate(t) if t == "done late")),
        "{effects:?}"
    );
    assert!(effects.contains(&Effect::RunQueued), "{effects:?}");
}
