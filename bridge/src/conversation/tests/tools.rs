use daemon_client::ShellProgress;

use super::{Clock, secs};
use crate::conversation::tools::{ToolState, Tools, next_line_due};

#[test]
fn l5_no_progress_line_before_progress_after() {
    let mut clock = Clock::new();
    let mut t = ToolState::new("sleep 60".into(), clock.now());
    assert_eq!(
        t.progress_line(clock.advance(secs(14)), secs(15), secs(30)),
        None
    );
}

#[test]
fn l5_a_line_is_shown_then_edited_at_most_every_progress_every() {
    let mut clock = Clock::new();
    let mut t = ToolState::new("sleep 60".into(), clock.now());
    let first = t.progress_line(clock.advance(secs(15)), secs(15), secs(30));
    assert_eq!(first, Some((secs(15), None)));
    assert_eq!(
        t.progress_line(clock.advance(secs(29)), secs(15), secs(30)),
        None
    );
    let second = t.progress_line(clock.advance(secs(1)), secs(15), secs(30));
    assert_eq!(second, Some((secs(45), None)));
}

#[test]
fn l5_output_age_comes_from_the_heartbeat_when_it_says() {
    let mut clock = Clock::new();
    let mut t = ToolState::new("make".into(), clock.now());
    t.last_output = Some(clock.now());
    t.heartbeat(
        ShellProgress {
            last_output_age_ms: Some(4_000),
            ..ShellProgress::default()
        },
        1,
        clock.now(),
    );
    let (_, age) = t
        .progress_line(clock.advance(secs(20)), secs(15), secs(30))
        .expect("due");
    assert_eq!(age, Some(secs(4)));
}

#[test]
fn l5_output_age_otherwise_from_the_output_seen() {
    let mut clock = Clock::new();
    let mut t = ToolState::new("make".into(), clock.now());
    t.last_output = Some(clock.advance(secs(5)));
    let (elapsed, age) = t
        .progress_line(clock.advance(secs(12)), secs(15), secs(30))
        .expect("due");
    assert_eq!((elapsed, age), (secs(17), Some(secs(12))));
}

#[test]
fn p2_heartbeat_counts_are_handed_over_at_most_every_flush_interval() {
    let mut clock = Clock::new();
    let mut t = ToolState::new("sleep 60".into(), clock.now());
    assert!(
        !t.flush_due(clock.advance(secs(60)), secs(10), true),
        "no counts, no write"
    );
    t.heartbeat(ShellProgress::default(), 1, clock.now());
    t.heartbeat(ShellProgress::default(), 1, clock.now());
    assert_eq!(t.unflushed, 2);
    assert!(t.flush_due(clock.now(), secs(10), false));
    t.flushed_at(clock.now());
    t.heartbeat(ShellProgress::default(), 1, clock.now());
    assert!(!t.flush_due(clock.advance(secs(9)), secs(10), false));
    assert!(
        t.flush_due(clock.now(), secs(10), true),
        "the turn's end forces it"
    );
    assert!(t.flush_due(clock.advance(secs(1)), secs(10), false));
}

#[test]
fn l5_the_next_line_deadline_is_the_earliest_tools() {
    let mut clock = Clock::new();
    let mut tools = Tools::new();
    assert_eq!(next_line_due(&tools, secs(15), secs(30)), None);
    tools.insert(super::call(1), ToolState::new("a".into(), clock.now()));
    let later = clock.advance(secs(5));
    tools.insert(super::call(2), ToolState::new("b".into(), later));
    assert_eq!(
        next_line_due(&tools, secs(15), secs(30)),
        Some(later - secs(5) + secs(15))
    );
    let t = tools.get_mut(&super::call(1)).expect("tool");
    t.progress_shown = Some(later + secs(20));
    assert_eq!(
        next_line_due(&tools, secs(15), secs(30)),
        Some(later + secs(15))
    );
}
