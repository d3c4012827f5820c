use daemon_client::{EndCause, Stall, StallKind, StopReason};

use super::{Clock, cfg, row, secs, session};
use crate::conversation::event::{Mark, ToolOutcome, TurnStatus, end_cause_word};
use crate::conversation::turn::{
    Queue, Queued, TurnState, queue_full_text, stall_text, status_text,
};

fn turn(clock: &Clock) -> TurnState {
    TurnState::new(row("t1", "alice"), cfg().liveness, clock.now(), false, 1)
}

fn queued(n: u32) -> Queued {
    Queued {
        user: "alice".into(),
        text: format!("prompt {n}"),
        message_id: Some(format!("m{n}")),
        event: Some(("slack".into(), format!("Ev{n}"))),
        files: Vec::new(),
        note: None,
        merged: Vec::new(),
    }
}

#[test]
fn t2_first_cause_stall_then_cancel_is_recorded_as_stall() {
    let mut clock = Clock::new();
    let mut t = turn(&clock);
    assert!(t.liveness.poll(clock.advance(secs(120))).is_some());
    t.liveness.record_cancel();
    let e = t.ending(Some(&StopReason::Cancelled), None);
    assert_eq!(e.status, TurnStatus::Stalled);
    assert_eq!(e.end_cause, Some("stalled_idle"));
    assert_eq!(e.mark, Mark::TimedOut);
}

#[test]
fn t2_cancel_first_then_a_timeout_stays_cancelled() {
    let mut clock = Clock::new();
    let mut t = turn(&clock);
    t.liveness.record_cancel();
    assert!(
        t.liveness.poll(clock.advance(secs(3600))).is_some(),
        "the wall limit still fires"
    );
    let e = t.ending(Some(&StopReason::EndTurn), None);
    assert_eq!(e.status, TurnStatus::Cancelled);
    assert_eq!(e.end_cause, Some("cancelled"));
    assert_eq!(e.mark, Mark::Stopped);
}

#[test]
fn l3_the_wall_limit_is_recorded_as_its_own_cause() {
    let mut clock = Clock::new();
    let mut t = turn(&clock);
    // Frames keep the idle limit re-armed; the wall limit still ends it.
    for _ in 0..40 {
        clock.advance(secs(90));
        t.liveness.observe(&super::text("."), clock.now());
    }
    let stall = t.liveness.poll(clock.now()).expect("wall");
    assert_eq!(stall.kind, StallKind::Wall);
    assert_eq!(t.ending(None, None).end_cause, Some("stalled_wall"));
}

#[test]
fn a_status_forced_by_the_bridge_wins_over_any_cause() {
    let clock = Clock::new();
    let mut t = turn(&clock);
    t.liveness.record_cancel();
    let e = t.ending(None, Some(TurnStatus::Interrupted));
    assert_eq!(e.status, TurnStatus::Interrupted);
    assert_eq!(
        e.end_cause,
        Some("cancelled"),
        "the cause is still recorded"
    );
    assert_eq!(e.mark, Mark::Failed);
}

#[test]
fn a_cancelled_stop_reason_without_a_cause_is_cancelled_and_other_stops_end() {
    assert_eq!(
        TurnStatus::decide(None, None, Some(&StopReason::Cancelled)),
        TurnStatus::Cancelled
    );
    for stop in [
        StopReason::EndTurn,
        StopReason::MaxTokens,
        StopReason::Refusal,
    ] {
        assert_eq!(
            TurnStatus::decide(None, None, Some(&stop)),
            TurnStatus::Ended
        );
    }
    assert_eq!(TurnStatus::decide(None, None, None), TurnStatus::Ended);
    assert_eq!(
        TurnStatus::decide(None, Some(EndCause::Cancelled), Some(&StopReason::EndTurn)),
        TurnStatus::Cancelled
    );
}

#[test]
fn the_stored_words_are_the_store_schemas() {
    let words: Vec<&str> = [
        TurnStatus::Ended,
        TurnStatus::Cancelled,
        TurnStatus::Stalled,
        TurnStatus::Interrupted,
        TurnStatus::Failed,
    ]
    .map(TurnStatus::as_str)
    .to_vec();
    assert_eq!(
        words,
        ["ended", "cancelled", "stalled", "interrupted", "failed"]
    );
    assert_eq!(
        end_cause_word(EndCause::Stalled(StallKind::Idle)),
        "stalled_idle"
    );
    let outcomes: Vec<&str> = [
        ToolOutcome::Completed,
        ToolOutcome::Failed,
        ToolOutcome::TimedOut,
        ToolOutcome::Cancelled,
        ToolOutcome::Interrupted,
    ]
    .map(ToolOutcome::as_str)
    .to_vec();
    assert_eq!(
        outcomes,
        [
            "completed",
            "failed",
            "timed_out",
            "cancelled",
            "interrupted"
        ]
    );
    for o in [
        daemon_client::Outcome::Completed,
        daemon_client::Outcome::Failed,
        daemon_client::Outcome::TimedOut,
        daemon_client::Outcome::Cancelled,
    ] {
        assert_eq!(ToolOutcome::from(o).as_str(), o.as_str(), "F3 words agree");
    }
}

#[test]
fn mark_done_only_when_every_tool_of_the_turn_completed() {
    use ToolOutcome::{Completed, Failed};
    assert_eq!(Mark::of_turn(TurnStatus::Ended, &[], false), Mark::Done);
    assert_eq!(
        Mark::of_turn(TurnStatus::Ended, &[Completed, Completed], false),
        Mark::Done
    );
    assert_eq!(
        Mark::of_turn(TurnStatus::Ended, &[Completed, Failed], false),
        Mark::Failed
    );
}

#[test]
fn mark_timed_out_when_a_tool_timed_out_even_if_the_agent_ended_well() {
    use ToolOutcome::{Completed, Failed, TimedOut};
    assert_eq!(
        Mark::of_turn(TurnStatus::Ended, &[Completed, TimedOut, Failed], false),
        Mark::TimedOut
    );
    assert_eq!(
        Mark::of_turn(TurnStatus::Stalled, &[Completed], false),
        Mark::TimedOut
    );
}

#[test]
fn mark_stopped_when_cancelled_or_rejected() {
    use ToolOutcome::{Cancelled, Completed, TimedOut};
    assert_eq!(
        Mark::of_turn(TurnStatus::Ended, &[Completed], true),
        Mark::Stopped
    );
    assert_eq!(
        Mark::of_turn(TurnStatus::Ended, &[Cancelled, TimedOut], false),
        Mark::Stopped
    );
    assert_eq!(
        Mark::of_turn(TurnStatus::Cancelled, &[Completed], false),
        Mark::Stopped
    );
}

#[test]
fn mark_failed_when_the_turn_could_not_run_or_was_interrupted() {
    assert_eq!(Mark::of_turn(TurnStatus::Failed, &[], false), Mark::Failed);
    assert_eq!(
        Mark::of_turn(TurnStatus::Ended, &[ToolOutcome::Interrupted], false),
        Mark::Failed
    );
    assert_eq!(
        Mark::of_turn(TurnStatus::Interrupted, &[], true),
        Mark::Failed
    );
}

#[test]
fn marks_round_trip_and_names_stored_by_earlier_versions_still_read() {
    for m in Mark::ALL {
        assert_eq!(m.as_str().parse::<Mark>(), Ok(m));
    }
    let legacy = [
        ("eyes", Mark::Received),
        ("white_check_mark", Mark::Done),
        ("x", Mark::Failed),
        ("warning", Mark::TimedOut),
        ("black_square_for_stop", Mark::Stopped),
        ("no_entry_sign", Mark::Refused),
    ];
    for (name, m) in legacy {
        assert_eq!(name.parse::<Mark>(), Ok(m), "{name}");
    }
    assert!("tada".parse::<Mark>().is_err());
}

#[test]
fn queue_full_refuses_past_the_cap_and_keeps_order() {
    let mut q = Queue::default();
    assert_eq!(q.admit(queued(1), 2), Ok(()));
    assert_eq!(q.admit(queued(2), 2), Ok(()));
    assert_eq!(q.admit(queued(3), 2), Err(2));
    assert_eq!(q.len(), 2);
    assert_eq!(q.pop().map(|q| q.text), Some("prompt 1".into()));
    assert_eq!(q.admit(queued(4), 2), Ok(()));
    assert_eq!(q.pop().map(|q| q.text), Some("prompt 2".into()));
    assert_eq!(q.pop().map(|q| q.text), Some("prompt 4".into()));
    assert!(q.is_empty());
    assert!(queue_full_text(2, "ls", false).starts_with("The queue is full (2 messages waiting"));
    assert!(queue_full_text(1, "ls", false).starts_with("The queue is full (1 message waiting"));
}

#[test]
fn a_queue_full_notice_names_the_refused_message_by_its_start() {
    let text = queue_full_text(5, "  make test\nand then deploy", false);
    assert!(text.contains("; “make test…” was not queued."), "{text}");
    let long = "x".repeat(200);
    let text = queue_full_text(5, &long, true);
    assert!(
        text.contains(&format!("; “{}…” was not queued.", "x".repeat(59))),
        "{text}"
    );
    assert!(queue_full_text(1, "ls -la", false).contains("; “ls -la” was not queued."));
}

#[test]
fn queue_cancel_drops_every_waiting_prompt() {
    let mut q = Queue::default();
    q.admit(queued(1), 5).expect("room");
    q.admit(queued(2), 5).expect("room");
    let dropped = q.drain();
    assert_eq!(dropped, vec![queued(1), queued(2)]);
    assert!(q.is_empty());
}

#[test]
fn l3_the_stall_notice_says_which_limit_and_keeps_the_turn_open() {
    let idle = Stall {
        kind: StallKind::Idle,
        limit: secs(120),
        silent_for: secs(120),
        elapsed: secs(300),
    };
    let (text, interrupted) = stall_text(&idle, false);
    assert_eq!(
        text,
        "No word from the agent for 2m 0s — the turn is still open; `/cancel` stops it."
    );
    assert!(!interrupted);
    let wall = Stall {
        kind: StallKind::Wall,
        ..idle
    };
    assert!(
        stall_text(&wall, false)
            .0
            .starts_with("This turn has run for 5m 0s")
    );
}

#[test]
fn d3_a_resumed_turn_that_stays_silent_is_closed_as_interrupted() {
    let stall = Stall {
        kind: StallKind::Idle,
        limit: secs(120),
        silent_for: secs(120),
        elapsed: secs(120),
    };
    let (text, interrupted) = stall_text(&stall, true);
    assert!(interrupted);
    // The duration sits after "for", the session notice at the end (the outside tester saw them
    // swapped).
    assert_eq!(
        text,
        format!(
            "No word from the agent for 2m 0s after the bridge restarted; this turn's end was not seen, so it is marked interrupted and was not re-run. {}",
            crate::conversation::state::FRESH_SESSION_TEXT
        )
    );
}

#[test]
fn status_says_idle_with_the_session_or_what_runs() {
    let mut clock = Clock::new();
    assert_eq!(
        status_text(None, None, 0, secs(0), clock.now()),
        "Idle. Session: none yet."
    );
    assert_eq!(
        status_text(None, Some(&session()), 0, secs(0), clock.now()),
        "Idle. Session: s1."
    );
    let mut t = turn(&clock);
    t.tools.insert(
        super::call(1),
        crate::conversation::tools::ToolState::new("make".into(), clock.now()),
    );
    let text = status_text(Some(&t), None, 2, secs(90), clock.advance(secs(75)));
    assert_eq!(
        text,
        "A turn is running (1m 30s so far).\n• make — running for 1m 15s, no output yet\n2 messages queued."
    );
}

/// L7 (outside tester's report, item 5): during an outage nothing runs; a full queue says the agent
/// is unreachable and that this message was not queued, and `/status` says the agent is unreachable.
#[test]
fn l7_a_full_queue_during_an_outage_says_the_agent_is_unreachable_and_this_message_was_not_queued()
{
    assert_eq!(
        queue_full_text(5, "make test", true),
        "The agent is unreachable and 5 messages are already queued; “make test” was not queued. Send it again once the agent is back, or `/cancel` what is queued."
    );
    let clock = Clock::new();
    let text = crate::conversation::turn::status_with_outage(
        status_text(None, Some(&session()), 2, secs(0), clock.now()),
        true,
    );
    assert_eq!(
        text,
        "Idle. Session: s1.\n2 messages queued.\nThe agent is unreachable; queued messages run when it is back."
    );
}
