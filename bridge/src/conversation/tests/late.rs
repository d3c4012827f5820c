//! Work that arrives later: updates with no turn open are posted once, gathered and rate-limited;
//! replayed history never is (L6).

use daemon_client::{DaemonEvent, Outcome};

use super::{Clock, cfg, result, secs, session, started};
use crate::conversation::Effect;
use crate::conversation::event::Event;
use crate::conversation::late::{LATE_CAP, LATE_EVERY, LATE_QUIET};
use crate::conversation::state::State;

fn text(t: &str) -> Event {
    Event::Daemon(DaemonEvent::AgentText {
        session: session(),
        text: t.to_owned(),
    })
}

fn posted(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::PostLate(t) => Some(t.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn late_text_with_no_turn_open_is_posted_once_after_the_agent_goes_quiet() {
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = State::new(Some(session()));
    assert!(s.handle(text("The build "), clock.now(), &c).is_empty());
    assert!(
        !s.is_idle(),
        "a runner with late work waiting is not let go"
    );
    clock.advance(LATE_QUIET / 2);
    assert!(
        s.handle(text("finished: green."), clock.now(), &c)
            .is_empty()
    );
    assert_eq!(s.late.deadline(), Some(clock.now() + LATE_QUIET));
    clock.advance(LATE_QUIET / 2);
    assert!(
        posted(&s.handle(Event::Timer, clock.now(), &c)).is_empty(),
        "not while it is still talking"
    );
    clock.advance(LATE_QUIET);
    assert_eq!(
        posted(&s.handle(Event::Timer, clock.now(), &c)),
        ["The build finished: green."],
        "one message for the burst"
    );
    clock.advance(secs(60));
    assert!(
        posted(&s.handle(Event::Timer, clock.now(), &c)).is_empty(),
        "posted once"
    );
    assert!(s.is_idle());
    assert_eq!(s.next_deadline(&c), None);
}

#[test]
fn late_messages_are_rate_limited_and_nothing_is_lost_between_them() {
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = State::new(Some(session()));
    s.handle(text("one"), clock.now(), &c);
    let first = clock.advance(LATE_QUIET);
    assert_eq!(posted(&s.handle(Event::Timer, first, &c)), ["one"]);
    clock.advance(secs(2));
    s.handle(text("two"), clock.now(), &c);
    clock.advance(LATE_QUIET);
    s.handle(text(" three"), clock.now(), &c);
    assert_eq!(
        s.late.deadline(),
        Some(first + LATE_EVERY),
        "held until the interval passed"
    );
    clock.advance(secs(3));
    assert!(posted(&s.handle(Event::Timer, clock.now(), &c)).is_empty());
    assert_eq!(
        posted(&s.handle(Event::Timer, first + LATE_EVERY, &c)),
        ["two three"]
    );
}

#[test]
fn a_background_tool_that_finishes_later_is_named_with_its_outcome() {
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = State::new(Some(session()));
    s.handle(Event::Daemon(started(4, "cargo test")), clock.now(), &c);
    // Heartbeats and output of a call nobody waits on are not posted.
    s.handle(
        Event::Daemon(DaemonEvent::ToolOutput {
            session: session(),
            call: super::call(4),
            text: "running 12 tests".into(),
        }),
        clock.now(),
        &c,
    );
    assert!(s.late.is_empty());
    s.handle(
        Event::Daemon(DaemonEvent::ToolFinished {
            session: session(),
            call: super::call(4),
            result: result(Outcome::Failed),
        }),
        clock.now(),
        &c,
    );
    clock.advance(LATE_QUIET);
    let out = posted(&s.handle(Event::Timer, clock.now(), &c));
    assert_eq!(out.len(), 1);
    assert!(out[0].starts_with("❌ cargo test"), "{out:?}");
}

#[test]
fn l6_replayed_frames_with_no_turn_open_are_history_and_never_posted() {
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = State::new(Some(session()));
    let old = DaemonEvent::AgentText {
        session: session(),
        text: "an answer from last week".into(),
    };
    s.handle(
        Event::Daemon(DaemonEvent::Replayed {
            session: session(),
            event: Box::new(old),
        }),
        clock.now(),
        &c,
    );
    assert!(s.late.is_empty());
    clock.advance(secs(30));
    assert!(posted(&s.handle(Event::Timer, clock.now(), &c)).is_empty());
}

#[test]
fn late_text_past_the_cap_keeps_the_newest_and_says_so() {
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = State::new(Some(session()));
    s.handle(text(&"é".repeat(LATE_CAP)), clock.now(), &c);
    s.handle(text("the end"), clock.now(), &c);
    clock.advance(LATE_QUIET);
    let out = posted(&s.handle(Event::Timer, clock.now(), &c));
    assert!(out[0].starts_with("… (earlier late output left out)"));
    assert!(out[0].ends_with("the end"));
    assert!(out[0].len() <= LATE_CAP + 64);
}
