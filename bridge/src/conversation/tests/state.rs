use std::time::Duration;

use daemon_client::{DaemonEvent, EndCause, Outcome, ShellProgress, StallKind, StopReason};

use super::{
    Clock, call, cfg, ended, heartbeat, info, output, request, result, running, secs, session,
    started, text,
};
use crate::conversation::approvals::Pending;
use crate::conversation::event::{Mark, ToolOutcome};
use crate::conversation::state::{Admission, DaemonStep, Line, State, scoped_id};
use crate::core::OnStall;

/// The runner's part of a `tool_call`: the call was new and is now shown.
fn start(s: &mut State, clock: &Clock, n: u32, title: &str) {
    let c = cfg();
    assert_eq!(
        s.on_daemon(started(n, title), clock.now(), &c),
        DaemonStep::ToolStarted(call(n), info(title))
    );
    s.tool_running(call(n), title.to_owned(), clock.now(), true);
}

#[test]
fn f1_heartbeats_never_create_messages() {
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = running(&clock, &c);
    start(&mut s, &clock, 1, "sleep 60");
    for _ in 0..14 {
        clock.advance(secs(1));
        let step = s.on_daemon(heartbeat(1, ShellProgress::default()), clock.now(), &c);
        assert_eq!(step, DaemonStep::Heartbeat(None), "counted, nothing shown");
    }
    let turn = s.turn.as_ref().expect("turn");
    assert_eq!(turn.tools[&call(1)].unflushed, 14);
}

#[test]
fn f1_heartbeats_folded_into_one_event_count_as_many_and_keep_the_last_progress() {
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = running(&clock, &c);
    start(&mut s, &clock, 1, "sleep 60");
    clock.advance(secs(1));
    let last = ShellProgress {
        elapsed_ms: Some(1_000),
        ..ShellProgress::default()
    };
    let folded = DaemonEvent::ToolProgress {
        session: session(),
        call: call(1),
        progress: last,
        beats: 5,
    };
    assert_eq!(
        s.on_daemon(folded, clock.now(), &c),
        DaemonStep::Heartbeat(None)
    );
    let tool = &s.turn.as_ref().expect("turn").tools[&call(1)];
    assert_eq!((tool.heartbeats, tool.progress), (5, Some(last)));
    s.on_daemon(heartbeat(1, ShellProgress::default()), clock.now(), &c);
    let tool = &s.turn.as_ref().expect("turn").tools[&call(1)];
    assert_eq!(
        (tool.unflushed, tool.heartbeats),
        (6, 6),
        "five folded and one more"
    );
}

#[test]
fn f1_a_call_still_running_when_its_turn_ended_counts_its_heartbeats_and_takes_its_result() {
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = running(&clock, &c);
    start(&mut s, &clock, 1, "make release");
    // The runner's end of the turn: the call it never saw finish is kept.
    let turn = s.turn.take().expect("turn");
    s.keep_unfinished(&turn.row.id, turn.tools);
    clock.advance(secs(1));
    assert_eq!(
        s.on_daemon(heartbeat(1, ShellProgress::default()), clock.now(), &c),
        DaemonStep::Nothing
    );
    assert_eq!(
        s.unfinished[&call(1)].1.unflushed,
        1,
        "counted after the turn"
    );
    let finished = DaemonEvent::ToolFinished {
        session: session(),
        call: call(1),
        result: result(Outcome::Completed),
    };
    assert!(matches!(
        s.on_daemon(finished, clock.now(), &c),
        DaemonStep::ToolFinished(c, _) if c == call(1)
    ));
    // A result of a call nobody kept is late work, as before.
    let other = DaemonEvent::ToolFinished {
        session: session(),
        call: call(9),
        result: result(Outcome::Completed),
    };
    assert_eq!(s.on_daemon(other, clock.now(), &c), DaemonStep::Nothing);
    assert!(!s.late.is_empty(), "gathered for a late post");
}

#[test]
fn f1_calls_still_running_after_their_turns_are_counted_during_a_new_turn_and_the_oldest_let_go() {
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = running(&clock, &c);
    for n in 1..=65 {
        clock.advance(secs(1));
        start(&mut s, &clock, n, "sleep 600");
    }
    let turn = s.turn.take().expect("turn");
    s.keep_unfinished(&turn.row.id, turn.tools);
    assert_eq!(s.unfinished.len(), 64, "64 kept");
    assert!(
        !s.unfinished.contains_key(&call(1)) && s.unfinished.contains_key(&call(65)),
        "the one that started first is let go"
    );
    // A new turn runs; a call of the old one still beats.
    let mut next = running(&clock, &c);
    std::mem::swap(&mut s.turn, &mut next.turn);
    assert_eq!(
        s.on_daemon(heartbeat(2, ShellProgress::default()), clock.now(), &c),
        DaemonStep::Heartbeat(None)
    );
    assert_eq!(
        s.unfinished[&call(2)].1.unflushed,
        1,
        "counted during the new turn"
    );
}

#[test]
fn l5_a_heartbeat_past_progress_after_edits_the_line_once_per_interval() {
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = running(&clock, &c);
    start(&mut s, &clock, 1, "sleep 60");
    clock.advance(secs(15));
    let step = s.on_daemon(heartbeat(1, ShellProgress::default()), clock.now(), &c);
    assert_eq!(
        step,
        DaemonStep::Heartbeat(Some(Line {
            call: call(1),
            title: "sleep 60".into(),
            elapsed: secs(15),
            age: None
        }))
    );
    clock.advance(secs(10));
    let step = s.on_daemon(heartbeat(1, ShellProgress::default()), clock.now(), &c);
    assert_eq!(step, DaemonStep::Heartbeat(None));
    // Output re-arms nothing but its age.
    assert_eq!(
        s.on_daemon(output(1), clock.now(), &c),
        DaemonStep::Output(None)
    );
}

#[test]
fn d3_events_without_a_turn_open_none_and_only_the_text_waits_to_be_posted() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = State::new(Some(session()));
    for e in [
        started(1, "ls"),
        heartbeat(1, ShellProgress::default()),
        text("hi"),
        ended(StopReason::EndTurn),
    ] {
        assert_eq!(s.on_daemon(e, clock.now(), &c), DaemonStep::Nothing);
    }
    assert!(s.turn.is_none());
    // Work that arrives later is posted, not dropped (see tests/late.rs).
    assert!(!s.late.is_empty());
    assert!(!s.is_idle());
}

#[test]
fn f4_a_late_update_changes_nothing() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    let late = DaemonEvent::LateUpdate {
        session: session(),
        call: call(1),
    };
    assert_eq!(s.on_daemon(late, clock.now(), &c), DaemonStep::Nothing);
    // A heartbeat for a call that already finished (or never started) shows nothing either.
    let step = s.on_daemon(heartbeat(9, ShellProgress::default()), clock.now(), &c);
    assert_eq!(step, DaemonStep::Heartbeat(None));
    assert!(s.turn.as_ref().expect("turn").tools.is_empty());
}

#[test]
fn r5_the_answer_is_the_text_after_the_last_tool_call() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    s.on_daemon(text("Let me look. "), clock.now(), &c);
    start(&mut s, &clock, 1, "ls");
    s.on_daemon(text("Two files"), clock.now(), &c);
    s.on_daemon(text(" here."), clock.now(), &c);
    assert_eq!(s.turn.as_ref().expect("turn").answer, "Two files here.");
    // A call followed again after a replay does not throw the answer away.
    s.tool_running(call(2), "ls".into(), clock.now(), false);
    assert_eq!(s.turn.as_ref().expect("turn").answer, "Two files here.");
}

#[test]
fn r1_an_update_for_an_unknown_call_starts_it_and_a_new_title_retitles_it() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    let update = |title: &str| DaemonEvent::ToolUpdated {
        session: session(),
        call: call(1),
        info: info(title),
    };
    assert_eq!(
        s.on_daemon(update("ls"), clock.now(), &c),
        DaemonStep::ToolStarted(call(1), info("ls"))
    );
    s.tool_running(call(1), "ls".into(), clock.now(), true);
    assert_eq!(
        s.on_daemon(update("ls"), clock.now(), &c),
        DaemonStep::Nothing
    );
    assert_eq!(
        s.on_daemon(update("ls -la"), clock.now(), &c),
        DaemonStep::ToolRetitled {
            call: call(1),
            title: "ls -la".into(),
            kind: Some("execute".into())
        }
    );
    assert_eq!(
        s.turn.as_ref().expect("turn").tools[&call(1)].title,
        "ls -la"
    );
}

#[test]
fn d3_turn_complete_ends_only_a_resumed_turn() {
    let c = cfg();
    let clock = Clock::new();
    let complete = || DaemonEvent::Other {
        session: Some(session()),
        method: "_qwen/notify".into(),
        kind: Some("turn_complete".into()),
        stop_reason: Some(StopReason::EndTurn),
    };
    let mut s = running(&clock, &c);
    assert_eq!(
        s.on_daemon(complete(), clock.now(), &c),
        DaemonStep::Nothing
    );
    s.turn.as_mut().expect("turn").resumed = true;
    assert_eq!(
        s.on_daemon(complete(), clock.now(), &c),
        DaemonStep::EndTurn(StopReason::EndTurn)
    );
    assert_eq!(
        s.on_daemon(ended(StopReason::Cancelled), clock.now(), &c),
        DaemonStep::EndTurn(StopReason::Cancelled)
    );
}

#[test]
fn l1_an_idle_turn_stalls_once_per_silence() {
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = running(&clock, &c);
    assert!(s.on_timer(clock.advance(secs(119)), &c).stall.is_none());
    let due = s.on_timer(clock.advance(secs(1)), &c);
    assert_eq!(due.stall.map(|st| st.kind), Some(StallKind::Idle));
    assert!(!due.cancel, "on_stall = notify only tells the thread");
    assert!(
        s.on_timer(clock.advance(secs(120)), &c).stall.is_none(),
        "one notice per silence"
    );
    // A frame re-arms it.
    s.on_daemon(text("."), clock.now(), &c);
    assert!(s.on_timer(clock.advance(secs(120)), &c).stall.is_some());
}

#[test]
fn l2_a_running_tools_own_timeout_lifts_the_idle_limit() {
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = running(&clock, &c);
    let mut i = info("sleep 300");
    i.timeout = Some(secs(300));
    s.on_daemon(
        DaemonEvent::ToolStarted {
            session: session(),
            call: call(1),
            info: i,
        },
        clock.now(),
        &c,
    );
    s.tool_running(call(1), "sleep 300".into(), clock.now(), true);
    let due = s.on_timer(clock.advance(secs(200)), &c);
    assert!(due.stall.is_none(), "timeout 300 s + grace 30 s binds");
    assert!(s.on_timer(clock.advance(secs(130)), &c).stall.is_some());
}

#[test]
fn l3_on_stall_cancel_records_the_cancel_after_the_stall() {
    let c = crate::core::CoreConfig {
        on_stall: OnStall::Cancel,
        ..cfg()
    };
    let mut clock = Clock::new();
    let mut s = running(&clock, &c);
    let due = s.on_timer(clock.advance(secs(120)), &c);
    assert!(due.stall.is_some() && due.cancel);
    let turn = s.turn.as_ref().expect("turn");
    assert_eq!(
        turn.liveness.first_cause(),
        Some(EndCause::Stalled(StallKind::Idle)),
        "stall then cancel is recorded as stall"
    );
    assert_eq!(
        s.mark_if_ended(Some(&StopReason::Cancelled)),
        Some(Mark::TimedOut)
    );
}

#[test]
fn d3_on_stall_cancel_is_not_sent_for_a_resumed_turn() {
    let c = crate::core::CoreConfig {
        on_stall: OnStall::Cancel,
        ..cfg()
    };
    let mut clock = Clock::new();
    let mut s = running(&clock, &c);
    s.turn.as_mut().expect("turn").resumed = true;
    let due = s.on_timer(clock.advance(secs(120)), &c);
    assert!(due.stall.is_some());
    assert!(
        !due.cancel,
        "a resumed turn is closed as interrupted instead"
    );
}

#[test]
fn t2_cancel_first_then_a_stall_keeps_cancelled() {
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = running(&clock, &c);
    s.record_cancel(clock.now(), secs(600));
    assert!(s.on_timer(clock.advance(secs(120)), &c).stall.is_some());
    assert_eq!(
        s.mark_if_ended(Some(&StopReason::Cancelled)),
        Some(Mark::Stopped)
    );
    let turn = s.turn.as_ref().expect("turn");
    assert_eq!(turn.liveness.first_cause(), Some(EndCause::Cancelled));
}

#[test]
fn l5_the_timer_shows_due_lines_of_silent_tools() {
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = running(&clock, &c);
    start(&mut s, &clock, 1, "sleep 60");
    assert_eq!(s.next_deadline(&c), Some(clock.now() + secs(15)));
    let due = s.on_timer(clock.advance(secs(15)), &c);
    assert_eq!(due.lines.len(), 1);
    assert_eq!(due.lines[0].elapsed, secs(15));
    assert!(s.on_timer(clock.advance(secs(1)), &c).lines.is_empty());
    assert_eq!(s.next_deadline(&c), Some(clock.now() + secs(29)));
}

#[test]
fn approval_expiry_rejects_and_the_turn_is_not_marked_done() {
    let c = crate::core::CoreConfig {
        permission_timeout: secs(60),
        ..cfg()
    };
    let mut clock = Clock::new();
    let mut s = running(&clock, &c);
    let (req, requester) = s.permission(request(1), "owner", clock.now(), &c);
    s.approvals.ask(Pending {
        db_id: "p1".into(),
        request_id: req.request_id,
        title: "rm".into(),
        options: req.options,
        requester,
        expires: clock.now() + c.permission_timeout,
        detail: None,
    });
    assert!(!s.is_idle());
    assert_eq!(
        s.next_deadline(&c),
        Some(clock.now() + secs(60)),
        "the expiry comes first"
    );
    assert!(s.on_timer(clock.advance(secs(59)), &c).expired.is_empty());
    let due = s.on_timer(clock.advance(secs(1)), &c);
    assert_eq!(due.expired.len(), 1);
    assert!(due.stall.is_none());
    assert!(s.approvals.is_empty());
    assert_eq!(
        s.mark_if_ended(Some(&StopReason::EndTurn)),
        Some(Mark::Stopped)
    );
}

#[test]
fn a3_four_eyes_strips_always_and_the_requester_is_whoever_asked_for_the_turn() {
    let four_eyes = crate::core::CoreConfig {
        require_second_person: true,
        ..cfg()
    };
    let clock = Clock::new();
    let mut s = running(&clock, &four_eyes);
    let (req, requester) = s.permission(request(1), "owner", clock.now(), &four_eyes);
    assert_eq!(requester, "alice");
    assert!(req.options.iter().all(|o| o.kind != "allow_always"));
    assert_eq!(req.options.len(), 2);
    // No turn (a stray request): the thread's owner is the requester.
    let mut idle = State::new(Some(session()));
    let (_, requester) = idle.permission(request(2), "owner", clock.now(), &four_eyes);
    assert_eq!(requester, "owner");
}

#[test]
fn r6_a_rejected_answer_marks_the_turn_stopped_an_allowed_one_does_not() {
    let c = cfg();
    let clock = Clock::new();
    let p = super::pending("p1", clock.now());
    let mut s = running(&clock, &c);
    s.approval_closed(&p, Some("proceed_once"), clock.now());
    assert_eq!(
        s.mark_if_ended(Some(&StopReason::EndTurn)),
        Some(Mark::Done)
    );
    s.approval_closed(&p, Some("cancel"), clock.now());
    assert_eq!(
        s.mark_if_ended(Some(&StopReason::EndTurn)),
        Some(Mark::Stopped)
    );
}

#[test]
fn a_failed_tool_keeps_the_turn_from_done() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    start(&mut s, &clock, 1, "false");
    let step = s.on_daemon(
        DaemonEvent::ToolFinished {
            session: session(),
            call: call(1),
            result: result(Outcome::Failed),
        },
        clock.now(),
        &c,
    );
    assert!(matches!(step, DaemonStep::ToolFinished(..)));
    let tool = s.tool_done(&call(1), ToolOutcome::Failed);
    assert_eq!(tool.map(|t| t.title), Some("false".into()));
    assert_eq!(
        s.mark_if_ended(Some(&StopReason::EndTurn)),
        Some(Mark::Failed)
    );
}

#[test]
fn a_result_whose_write_failed_leaves_the_call_running_for_the_retry() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    start(&mut s, &clock, 1, "false");
    let tool = s.tool_done(&call(1), ToolOutcome::Failed);
    assert!(tool.is_some());
    // The database refused the result: undone, the call runs again and its outcome is not counted.
    s.tool_undone(call(1), tool);
    assert_eq!(
        s.mark_if_ended(Some(&StopReason::EndTurn)),
        Some(Mark::Done)
    );
    let again = s.tool_done(&call(1), ToolOutcome::Failed);
    assert_eq!(
        again.map(|t| t.title),
        Some("false".into()),
        "the retry finds the call"
    );
    assert_eq!(
        s.mark_if_ended(Some(&StopReason::EndTurn)),
        Some(Mark::Failed)
    );
}

#[test]
fn a_lost_session_interrupts_every_running_tool() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    start(&mut s, &clock, 1, "make");
    start(&mut s, &clock, 2, "make test");
    let mut gone = s.interrupt_tools();
    gone.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(
        gone,
        vec![(call(1), "make".into()), (call(2), "make test".into())]
    );
    let turn = s.turn.as_ref().expect("turn");
    assert!(turn.tools.is_empty());
    assert_eq!(
        turn.outcomes,
        [ToolOutcome::Interrupted, ToolOutcome::Interrupted]
    );
}

#[test]
fn d2_a_conversation_is_idle_only_when_the_store_holds_everything() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = State::new(None);
    assert!(s.is_idle());
    assert_eq!(s.next_deadline(&c), None);
    s.marks.add(Some(("slack".into(), "Ev1".into())));
    assert!(!s.is_idle(), "an entry waits to be marked");
    s.marks.committed(&s.marks.pending());
    assert!(s.is_idle());
    let r = running(&clock, &c);
    assert!(!r.is_idle());
}

#[test]
fn r1_tool_ids_are_scoped_by_the_session_and_notices_are_counted() {
    let mut s = State::new(Some(session()));
    assert_eq!(s.scoped(&call(1)), "s1/call-1");
    assert_eq!(scoped_id(None, &call(1)), "call-1");
    assert_eq!(s.next_notice_key(5).to_string(), "notice:5:1");
    assert_eq!(s.next_notice_key(5).to_string(), "notice:5:2");
}

fn prompt(n: u32) -> crate::conversation::turn::Queued {
    crate::conversation::turn::Queued {
        user: "alice".into(),
        text: format!("prompt {n}"),
        message_id: None,
        event: Some(("slack".into(), format!("Ev{n}"))),
        files: Vec::new(),
        note: None,
        merged: Vec::new(),
    }
}

#[test]
fn a_prompt_starts_a_turn_when_nothing_runs_and_waits_otherwise() {
    let c = cfg();
    let clock = Clock::new();
    let mut idle = State::new(Some(session()));
    assert_eq!(
        idle.admit(prompt(1), c.queue_cap),
        Admission::Start(prompt(1))
    );
    assert!(idle.queue.is_empty());
    let mut busy = running(&clock, &c);
    assert_eq!(busy.admit(prompt(2), c.queue_cap), Admission::Queued);
    assert_eq!(busy.queue.len(), 1);
    assert!(
        busy.marks.is_empty(),
        "a waiting prompt is marked when its turn starts"
    );
}

#[test]
fn queue_full_refuses_the_prompt_and_its_notice_marks_it_handled_d2() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    assert_eq!(s.admit(prompt(1), c.queue_cap), Admission::Queued);
    assert_eq!(s.admit(prompt(2), c.queue_cap), Admission::Queued);
    assert_eq!(s.admit(prompt(3), c.queue_cap), Admission::Full(2));
    assert_eq!(s.queue.len(), 2);
    assert_eq!(
        s.marks.pending(),
        vec![("slack".to_owned(), "Ev3".to_owned())]
    );
}

#[test]
fn r6_a_call_waiting_for_approval_shows_no_running_line_and_runs_from_the_decision() {
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = running(&clock, &c);
    start(&mut s, &clock, 1, "Shell");
    let (req, _) = s.permission(request(1), "owner", clock.now(), &c);
    assert_eq!(
        s.turn.as_ref().expect("turn").tools[&call(1)].title,
        "rm -rf build",
        "the call takes the request's title: its result names the command"
    );
    assert_eq!(req.info.title.as_deref(), Some("rm -rf build"));
    s.approval_asked(req.call.as_ref(), "p1");
    let t = clock.advance(secs(40));
    let due = s.on_timer(t, &c);
    assert!(due.lines.is_empty(), "waiting is not running: {due:?}");
    let p = super::pending("p1", t + secs(600));
    s.approval_closed(&p, Some("proceed_once"), t);
    let t = clock.advance(secs(16));
    let due = s.on_timer(t, &c);
    assert_eq!(due.lines.len(), 1, "{due:?}");
    assert_eq!(
        due.lines[0].elapsed,
        secs(16),
        "running time counts from the decision"
    );
}

#[test]
fn r6_a_decided_approval_says_what_was_decided_and_by_whom() {
    use crate::conversation::approvals::decided_heading;
    let cases = [
        (Some("allow_once"), "Allow", "✅ Allowed once by @alice"),
        (
            Some("allow_always"),
            "Always",
            "✅ Allowed always by @alice",
        ),
        (Some("reject_once"), "Reject", "🚫 Rejected by @alice"),
        (Some("reject_always"), "Never", "🚫 Rejected by @alice"),
        (Some("other"), "Maybe", "☑️ Maybe — @alice"),
        (None, "Maybe", "☑️ Maybe — @alice"),
    ];
    for (kind, label, heading) in cases {
        assert_eq!(decided_heading("@alice", kind, label), heading, "{kind:?}");
    }
}

#[test]
fn r5_the_answer_streams_into_a_draft_edited_at_most_every_stream_every() {
    let c = crate::core::CoreConfig {
        stream_every: Some(Duration::from_millis(1500)),
        ..cfg()
    };
    let mut clock = Clock::new();
    let mut s = running(&clock, &c);
    // The first text shows at once, in draft 1.
    assert_eq!(
        s.on_daemon(text("Hello"), clock.now(), &c),
        DaemonStep::Draft(1, "Hello".into())
    );
    // More text within 1.5 s waits; the edit is due 1.5 s after the last one.
    let at = clock.advance(Duration::from_millis(500));
    assert_eq!(s.on_daemon(text(", wor"), at, &c), DaemonStep::Nothing);
    assert_eq!(s.on_daemon(text("ld"), at, &c), DaemonStep::Nothing);
    assert_eq!(
        s.next_deadline(&c),
        Some(at + Duration::from_millis(1000)),
        "the runner wakes for it"
    );
    assert_eq!(s.on_timer(at, &c).draft, None, "not due yet");
    let due = s.on_timer(clock.advance(Duration::from_millis(1000)), &c);
    assert_eq!(
        due.draft,
        Some((1, "Hello, world".into())),
        "coalesced into one edit"
    );
    assert_eq!(
        s.on_timer(clock.advance(secs(5)), &c).draft,
        None,
        "nothing new: no edit"
    );
    // After a tool call the next stretch of text is a new draft.
    s.tool_running(call(1), "ls".into(), clock.now(), true);
    assert_eq!(
        s.on_daemon(text("Done."), clock.advance(secs(1)), &c),
        DaemonStep::Draft(2, "Done.".into())
    );
    // Streaming off: the text is kept for the end, nothing is shown on the way.
    let mut s = running(&clock, &cfg());
    assert_eq!(
        s.on_daemon(text("Hello"), clock.now(), &cfg()),
        DaemonStep::Nothing
    );
    assert_eq!(s.turn.as_ref().map(|t| t.answer.as_str()), Some("Hello"));
}

#[test]
fn l1_a_turn_waiting_for_a_persons_approval_does_not_stall_and_counts_from_the_decision() {
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = running(&clock, &c);
    start(&mut s, &clock, 1, "Shell");
    let (req, _) = s.permission(request(1), "owner", clock.now(), &c);
    let expires = clock.now() + secs(900);
    s.approvals.ask(super::pending("p1", expires));
    s.approval_asked(req.call.as_ref(), "p1");
    // Ten minutes of a person thinking: the daemon is silent because it waits for us.
    for _ in 0..10 {
        let due = s.on_timer(clock.advance(secs(60)), &c);
        assert!(due.stall.is_none(), "waiting for a decision is no stall");
    }
    let p = s.approvals.take("p1").expect("waiting");
    let t = clock.now();
    s.approval_closed(&p, Some("proceed_once"), t);
    assert!(
        s.on_timer(clock.advance(secs(119)), &c).stall.is_none(),
        "the idle limit counts from the decision"
    );
    let due = s.on_timer(clock.advance(secs(1)), &c);
    assert_eq!(
        due.stall.map(|st| st.kind),
        Some(StallKind::Idle),
        "a daemon silent after the decision still stalls"
    );
}
