//! L6: frames a `session/load` replays are history, except what the turn still waits on.

use daemon_client::{DaemonEvent, Outcome, StopReason};

use super::{Clock, call, cfg, info, result, running, secs, session, started, text};
use crate::conversation::event::ToolOutcome;
use crate::conversation::state::{DaemonStep, State};

fn start(s: &mut State, clock: &Clock, n: u32, title: &str) {
    assert_eq!(
        s.on_daemon(started(n, title), clock.now(), &cfg()),
        DaemonStep::ToolStarted(call(n), info(title))
    );
    s.tool_running(call(n), title.to_owned(), clock.now(), true);
}

fn replayed(event: DaemonEvent) -> DaemonEvent {
    DaemonEvent::Replayed {
        session: session(),
        event: Box::new(event),
    }
}

#[test]
fn l6_replayed_history_is_never_live_output_but_a_waiting_tools_result_is_news() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    start(&mut s, &clock, 1, "make");
    let old_text = DaemonEvent::AgentText {
        session: session(),
        text: "Command finished.".into(),
    };
    assert_eq!(
        s.on_daemon(replayed(old_text), clock.now(), &c),
        DaemonStep::Nothing
    );
    assert_eq!(
        s.turn.as_ref().expect("turn").answer,
        "",
        "nothing glued to the answer"
    );
    // A call of an earlier turn, replayed: not announced again.
    assert_eq!(
        s.on_daemon(replayed(started(7, "echo old")), clock.now(), &c),
        DaemonStep::Nothing
    );
    // The running call ended while the connection was down: its result is news.
    let finished = DaemonEvent::ToolFinished {
        session: session(),
        call: call(1),
        result: result(Outcome::Completed),
    };
    // Its heartbeats, replayed: history, not counted again (F1).
    assert_eq!(
        s.on_daemon(
            replayed(super::heartbeat(1, daemon_client::ShellProgress::default())),
            clock.now(),
            &c
        ),
        DaemonStep::Nothing
    );
    assert_eq!(s.turn.as_ref().expect("turn").tools[&call(1)].heartbeats, 0);
    assert!(matches!(
        s.on_daemon(replayed(finished), clock.now(), &c),
        DaemonStep::ToolFinished(c, _) if c == call(1)
    ));
    assert!(
        s.turn.as_ref().expect("turn").tools[&call(1)].ended_unseen,
        "it ended while the connection was down, at a time nobody here saw: no duration"
    );
}

#[test]
fn l6_a_turn_resumed_after_a_restart_follows_replayed_tool_frames_but_not_text() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    s.turn.as_mut().expect("turn").resumed = true;
    assert_eq!(
        s.on_daemon(replayed(started(1, "make")), clock.now(), &c),
        DaemonStep::ToolStarted(call(1), info("make"))
    );
    let old_text = DaemonEvent::AgentText {
        session: session(),
        text: "old".into(),
    };
    assert_eq!(
        s.on_daemon(replayed(old_text), clock.now(), &c),
        DaemonStep::Nothing
    );
}

#[test]
fn l6_a_failure_known_only_from_a_replay_says_the_connection_was_lost() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    start(&mut s, &clock, 1, "sleep 30");
    let mut failed = result(Outcome::Failed);
    failed.summary = Some("The tool had already completed; its output was discarded.".into());
    let step = s.on_daemon(
        replayed(DaemonEvent::ToolFinished {
            session: session(),
            call: call(1),
            result: failed,
        }),
        clock.now(),
        &c,
    );
    let DaemonStep::ToolFinished(_, r) = step else {
        panic!("{step:?}")
    };
    let summary = r.summary.unwrap_or_default();
    assert!(
        summary.starts_with("The connection to the agent was lost while this ran"),
        "{summary}"
    );
    assert!(
        summary.contains("its output was discarded"),
        "the agent's words are kept: {summary}"
    );
}

fn user(text: &str) -> DaemonEvent {
    replayed(DaemonEvent::UserText {
        session: session(),
        text: text.into(),
    })
}

fn turn_complete() -> DaemonEvent {
    replayed(DaemonEvent::Other {
        session: Some(session()),
        method: "_qwen/notify".into(),
        kind: Some("turn_complete".into()),
        stop_reason: Some(StopReason::EndTurn),
    })
}

/// D6: after a restart, the replay of a daemon that replays prompts (qwen) is read by prompt: an
/// older turn's frames and its end are history; this turn's own prompt, its tools, its answer and
/// its end are how it went while the bridge was down — recorded, not re-sent.
#[test]
fn d6_a_resumed_turn_takes_only_the_frames_after_its_own_prompt_in_the_replay() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    s.turn.as_mut().expect("turn").resumed = true;
    // `running` stores the prompt "echo hi".
    assert_eq!(
        s.on_daemon(user("echo before"), clock.now(), &c),
        DaemonStep::Nothing
    );
    assert_eq!(
        s.on_daemon(replayed(started(1, "echo before")), clock.now(), &c),
        DaemonStep::Nothing,
        "an older turn's call"
    );
    assert_eq!(
        s.on_daemon(turn_complete(), clock.now(), &c),
        DaemonStep::Nothing,
        "an older turn's end does not end this one"
    );
    assert_eq!(
        s.on_daemon(user("echo hi"), clock.now(), &c),
        DaemonStep::Nothing
    );
    assert_eq!(
        s.on_daemon(replayed(started(2, "echo hi")), clock.now(), &c),
        DaemonStep::ToolStarted(call(2), info("echo hi")),
        "its own call"
    );
    s.tool_running(call(2), "echo hi".into(), clock.now(), true);
    let text = DaemonEvent::AgentText {
        session: session(),
        text: "Command finished.".into(),
    };
    let _ = s.on_daemon(replayed(text), clock.now(), &c);
    assert_eq!(
        s.turn.as_ref().expect("turn").answer,
        "Command finished.",
        "its own answer is kept"
    );
    assert_eq!(
        s.on_daemon(turn_complete(), clock.now(), &c),
        DaemonStep::EndTurn(daemon_client::StopReason::EndTurn),
        "its own end ends it"
    );
}

/// D6 with issue 22: the daemon replays a prompt as the agent received it (`[name] text`, a steer
/// note, merged parts each with its speaker); the turn stores it as typed. It is still its own.
#[test]
fn d6_a_resumed_turn_knows_its_own_prompt_sent_with_speaker_labels_and_a_steer_note() {
    let c = cfg();
    let clock = Clock::new();
    for (sent, own) in [
        ("[Alice Smith] echo hi".to_owned(), true),
        (
            format!(
                "{}\n\n[alice] echo hi",
                crate::conversation::busy::STEER_NOTE
            ),
            true,
        ),
        ("[bob] echo before".to_owned(), false),
        ("[alice] echo hi there".to_owned(), false),
        // Mention etiquette: the context block goes first (after a steer note).
        (
            format!(
                "{}\n[bob] the build is red)\n\n[alice] echo hi",
                crate::conversation::context::HEAD
            ),
            true,
        ),
        (
            format!(
                "{}\n\n{}\n[bob] x)\n\n[alice] echo hi",
                crate::conversation::busy::STEER_NOTE,
                crate::conversation::context::HEAD
            ),
            true,
        ),
    ] {
        let mut s = running(&clock, &c);
        s.turn.as_mut().expect("turn").resumed = true;
        let _ = s.on_daemon(user(&sent), clock.now(), &c);
        assert_eq!(
            s.turn.as_ref().expect("turn").replay_at_own,
            Some(own),
            "{sent:?}"
        );
    }
    let mut s = running(&clock, &c);
    s.turn.as_mut().expect("turn").row.prompt = "add a test\n\nand a benchmark".into();
    s.turn.as_mut().expect("turn").resumed = true;
    let _ = s.on_daemon(
        user("[alice] add a test\n\n[bob] and a benchmark"),
        clock.now(),
        &c,
    );
    assert_eq!(
        s.turn.as_ref().expect("turn").replay_at_own,
        Some(true),
        "merged parts, each with its speaker"
    );
}

/// D6 (a CI run of the Q1 crash suite): the bridge was killed after recording a prompt as sent and
/// before the daemon got it. The load's replay names the daemon's prompts, the last an older one:
/// at the replay's end the turn asks to be sent again (with the daemon's last prompt, which the
/// runner checks against the turn before). Its own prompt in the replay, anything of it seen, no
/// prompt replayed at all, or a turn not taken back after a restart: nothing is sent again.
#[test]
fn d6_a_resumed_turn_whose_prompt_the_replay_does_not_show_asks_to_be_sent_again() {
    let c = cfg();
    let clock = Clock::new();
    let ended = || DaemonEvent::ReplayEnded { session: session() };
    let resumed = || {
        let mut s = running(&clock, &c);
        s.turn.as_mut().expect("turn").resumed = true;
        s
    };
    let mut s = resumed();
    let _ = s.on_daemon(user("echo before"), clock.now(), &c);
    let _ = s.on_daemon(replayed(started(1, "echo before")), clock.now(), &c);
    let _ = s.on_daemon(turn_complete(), clock.now(), &c);
    assert_eq!(
        s.on_daemon(ended(), clock.now(), &c),
        DaemonStep::NeverReached("echo before".into())
    );
    assert!(!s.abandon_session, "the session goes on");

    // The older turn's frames come after its end, or it never ended: something ran after it.
    let mut s = resumed();
    let _ = s.on_daemon(user("echo before"), clock.now(), &c);
    let _ = s.on_daemon(turn_complete(), clock.now(), &c);
    let _ = s.on_daemon(replayed(started(3, "echo hi")), clock.now(), &c);
    assert_eq!(s.on_daemon(ended(), clock.now(), &c), DaemonStep::Nothing);
    let mut s = resumed();
    let _ = s.on_daemon(user("echo before"), clock.now(), &c);
    let _ = s.on_daemon(replayed(started(1, "echo before")), clock.now(), &c);
    assert_eq!(s.on_daemon(ended(), clock.now(), &c), DaemonStep::Nothing);
    // Its own prompt is there: it reached the daemon.
    let mut s = resumed();
    let _ = s.on_daemon(user("echo before"), clock.now(), &c);
    let _ = s.on_daemon(user("echo hi"), clock.now(), &c);
    assert_eq!(s.on_daemon(ended(), clock.now(), &c), DaemonStep::Nothing);
    // No prompt replayed (a daemon that replays none, or a session's first prompt): unknown.
    let mut s = resumed();
    assert_eq!(s.on_daemon(ended(), clock.now(), &c), DaemonStep::Nothing);
    // Something of it seen (a call it knows), or a cancel asked for: not sent again.
    let mut s = resumed();
    let _ = s.on_daemon(user("echo before"), clock.now(), &c);
    s.tool_running(call(2), "echo hi".into(), clock.now(), true);
    assert_eq!(s.on_daemon(ended(), clock.now(), &c), DaemonStep::Nothing);
    let mut s = resumed();
    let _ = s.on_daemon(user("echo before"), clock.now(), &c);
    s.turn
        .as_mut()
        .expect("turn")
        .record_cancel(clock.now(), secs(10));
    assert_eq!(s.on_daemon(ended(), clock.now(), &c), DaemonStep::Nothing);
    // A live turn's session loaded again (a reconnect): not a restart's unknown prompt.
    let mut s = running(&clock, &c);
    let _ = s.on_daemon(user("echo before"), clock.now(), &c);
    assert_eq!(s.on_daemon(ended(), clock.now(), &c), DaemonStep::Nothing);
    // The step happens once: the turn is sent again as a live one.
    let mut s = resumed();
    let _ = s.on_daemon(user("echo before"), clock.now(), &c);
    s.turn.as_mut().expect("turn").resumed = false;
    assert_eq!(s.on_daemon(ended(), clock.now(), &c), DaemonStep::Nothing);
}

/// D6 (outside tester): the turn before had the same text as this one. Its prompt in the replay reads
/// as this turn's own, but a frame of a call stored for an earlier turn shows it is not: what follows
/// is that turn's history — its end does not end this turn. If this turn's prompt comes after it,
/// that one's frames are this turn's; if it never comes, this turn never reached the daemon.
#[test]
fn d6_a_prompt_with_the_text_of_the_turn_before_is_told_from_it_by_the_calls_stored_for_that_one() {
    let c = cfg();
    let clock = Clock::new();
    let ended = || DaemonEvent::ReplayEnded { session: session() };
    let finished = |n: u32| {
        replayed(DaemonEvent::ToolFinished {
            session: session(),
            call: call(n),
            result: result(Outcome::Completed),
        })
    };
    let resumed = || {
        let mut s = running(&clock, &c);
        let earlier = crate::conversation::state::scoped_id(Some(&session()), &call(1));
        let turn = s.turn.as_mut().expect("turn");
        turn.resumed = true;
        turn.earlier_calls.insert(earlier);
        s
    };
    // `running` stores the prompt "echo hi"; the turn before was "echo hi" too, with call-1.
    // (a) This turn's prompt never reached the daemon.
    let mut s = resumed();
    assert_eq!(
        s.on_daemon(user("echo hi"), clock.now(), &c),
        DaemonStep::Nothing
    );
    assert_eq!(
        s.on_daemon(replayed(started(1, "echo hi")), clock.now(), &c),
        DaemonStep::Nothing,
        "the earlier turn's call is not announced as this turn's"
    );
    assert_eq!(
        s.on_daemon(finished(1), clock.now(), &c),
        DaemonStep::Nothing
    );
    assert_eq!(
        s.on_daemon(turn_complete(), clock.now(), &c),
        DaemonStep::Nothing,
        "the earlier turn's end does not end this one"
    );
    assert_eq!(
        s.on_daemon(ended(), clock.now(), &c),
        DaemonStep::NeverReached("echo hi".into())
    );
    // (b) It reached the daemon and its command still runs.
    let mut s = resumed();
    for e in [
        user("echo hi"),
        replayed(started(1, "echo hi")),
        finished(1),
        turn_complete(),
    ] {
        assert_eq!(s.on_daemon(e, clock.now(), &c), DaemonStep::Nothing);
    }
    let _ = s.on_daemon(user("echo hi"), clock.now(), &c);
    assert_eq!(
        s.on_daemon(replayed(started(2, "echo hi")), clock.now(), &c),
        DaemonStep::ToolStarted(call(2), info("echo hi")),
        "its own call"
    );
    s.tool_running(call(2), "echo hi".into(), clock.now(), true);
    assert_eq!(s.on_daemon(ended(), clock.now(), &c), DaemonStep::Nothing);
    assert!(s.turn.is_some(), "still running");
}

/// D6: the daemon's last prompt is recognised as a stored one as the replay shows it (labels, a
/// NUL shown as `␀`), and not when it differs.
#[test]
fn d6_a_replayed_prompt_is_matched_to_a_stored_one_as_sent() {
    use crate::conversation::replay::is_prompt;
    assert!(is_prompt("echo before", "echo before"));
    assert!(is_prompt("echo before", "[alice] echo before"));
    assert!(is_prompt("a \u{2400} b", "a \0 b"));
    assert!(!is_prompt("echo before", "echo before2"));
    assert!(!is_prompt("echo before", "[alice] echo hi"));
}

#[test]
fn d6_a_daemon_that_replays_no_prompts_is_followed_as_before() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    s.turn.as_mut().expect("turn").resumed = true;
    assert!(matches!(
        s.on_daemon(replayed(started(1, "echo hi")), clock.now(), &c),
        DaemonStep::ToolStarted(..)
    ));
}

/// D6: a prompt that reached the daemon, which then ended its turn with nothing done (the bridge's
/// crash cut it off), is reported interrupted — not re-sent, and the thread moves to a new session
/// because qwen would fold the unanswered prompt into the next one.
#[test]
fn d6_a_resumed_prompt_the_daemon_ended_with_nothing_done_is_interrupted_not_re_run() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    s.turn.as_mut().expect("turn").resumed = true;
    let _ = s.on_daemon(user("echo hi"), clock.now(), &c);
    assert_eq!(
        s.on_daemon(turn_complete(), clock.now(), &c),
        DaemonStep::CutOff
    );
    assert!(s.abandon_session);
}

/// D6 (outside tester's report, item 1): the bridge is killed while a command runs; qwen cancels
/// the command when the connection dies and does not replay the turn's end. The resumed turn reads
/// the cancel in the load's replay and ends at once as interrupted, so the queued follow-up runs —
/// no idle-limit wait, and a second restart (a new `State`, the same replay) ends it at once too.
#[test]
fn d6_a_resumed_turn_whose_command_the_replay_shows_cancelled_ends_at_once() {
    use crate::conversation::effects::Effect;
    use crate::conversation::event::{Event, TurnStatus};
    let c = cfg();
    for _restart in 0..2 {
        let clock = Clock::new();
        let mut s = running(&clock, &c);
        s.turn.as_mut().expect("turn").resumed = true;
        let _ = s.on_daemon(user("echo hi"), clock.now(), &c);
        let _ = s.on_daemon(replayed(started(1, "sleep 30")), clock.now(), &c);
        s.tool_running(call(1), "sleep 30".into(), clock.now(), true);
        let mut cancelled = result(Outcome::Cancelled);
        cancelled.summary =
            Some("The tool had already completed; its output was discarded.".into());
        let effects = s.handle(
            Event::Daemon(replayed(DaemonEvent::ToolFinished {
                session: session(),
                call: call(1),
                result: cancelled,
            })),
            clock.now(),
            &c,
        );
        let [
            Effect::FinishTool(finished, r),
            Effect::Notice(_, notice),
            Effect::EndTurnAs(TurnStatus::Interrupted),
        ] = effects.as_slice()
        else {
            panic!("{effects:?}")
        };
        assert_eq!(finished, &call(1));
        assert_eq!(
            r.summary.as_deref(),
            Some(
                "The bridge restarted while this ran; the agent stopped it when the bridge's connection closed."
            ),
            "the daemon's 'had already completed' is not repeated"
        );
        assert!(
            notice.contains("marked interrupted and was not re-run"),
            "{notice}"
        );
        assert!(s.abandon_session, "the next message opens a new session");
    }
}

/// D6: a cancel replayed while another call of the resumed turn still runs does not end the turn.
#[test]
fn d6_a_replayed_cancel_with_another_call_running_does_not_end_the_turn() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    s.turn.as_mut().expect("turn").resumed = true;
    let _ = s.on_daemon(user("echo hi"), clock.now(), &c);
    for n in [1, 2] {
        let _ = s.on_daemon(replayed(started(n, "sleep")), clock.now(), &c);
        s.tool_running(call(n), "sleep".into(), clock.now(), true);
    }
    let step = s.on_daemon(
        replayed(DaemonEvent::ToolFinished {
            session: session(),
            call: call(1),
            result: result(Outcome::Cancelled),
        }),
        clock.now(),
        &c,
    );
    assert!(matches!(step, DaemonStep::ToolFinished(..)), "{step:?}");
}

/// A live `turn_complete` of a resumed turn, with the stop reason the daemon gave.
fn live_complete(stop: StopReason) -> DaemonEvent {
    DaemonEvent::Other {
        session: Some(session()),
        method: "_qwen/notify".into(),
        kind: Some("turn_complete".into()),
        stop_reason: Some(stop),
    }
}

/// D6 (the real qwen daemon, killed 1.4-1.6 s into a turn): the bridge dies while the model is
/// still answering; the new process loads the session while the prompt is in flight, and the
/// daemon — which cancels a prompt when the connection that sent it closes — streams the call it
/// refused to start ("cancelled before execution", outcome failed) and a `turn_complete` whose stop
/// reason is `cancelled`. Nothing ran: the turn is interrupted (not "ended", which would say the
/// agent finished it), not re-run, and the next message opens a new session.
#[test]
fn d6_a_resumed_turn_the_daemon_ends_as_cancelled_is_interrupted_not_ended() {
    use crate::conversation::effects::Effect;
    use crate::conversation::event::{Event, TurnStatus};
    let c = cfg();
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    s.turn.as_mut().expect("turn").resumed = true;
    let _ = s.on_daemon(started(1, "echo c0 >> count.txt"), clock.now(), &c);
    s.tool_running(call(1), "echo c0 >> count.txt".into(), clock.now(), true);
    let mut refused = result(Outcome::Failed);
    refused.summary = Some("Tool call was cancelled before execution.".into());
    let step = s.on_daemon(
        DaemonEvent::ToolFinished {
            session: session(),
            call: call(1),
            result: refused,
        },
        clock.now(),
        &c,
    );
    assert!(matches!(step, DaemonStep::ToolFinished(..)), "{step:?}");
    let _ = s.tool_done(&call(1), ToolOutcome::Failed);
    let effects = s.handle(
        Event::Daemon(live_complete(StopReason::Cancelled)),
        clock.now(),
        &c,
    );
    let [
        Effect::InterruptTools(running),
        Effect::Notice(_, notice),
        Effect::EndTurnAs(TurnStatus::Interrupted),
    ] = effects.as_slice()
    else {
        panic!("{effects:?}")
    };
    assert!(running.is_empty(), "{running:?}");
    assert!(notice.contains("was not re-run"), "{notice}");
    assert!(s.abandon_session, "the next message opens a new session");
}

/// D6: a call still running when the daemon ends the resumed turn as cancelled is closed as
/// interrupted with the turn; with nothing done at all, the turn was cut off.
#[test]
fn d6_a_resumed_turn_ended_as_cancelled_closes_its_running_calls_and_nothing_done_is_cut_off() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    s.turn.as_mut().expect("turn").resumed = true;
    let _ = s.on_daemon(started(1, "sleep 30"), clock.now(), &c);
    s.tool_running(call(1), "sleep 30".into(), clock.now(), true);
    let step = s.on_daemon(live_complete(StopReason::Cancelled), clock.now(), &c);
    let DaemonStep::ResumedStopped(running) = step else {
        panic!("{step:?}")
    };
    assert_eq!(running.len(), 1);
    assert_eq!(running[0].1, "sleep 30");

    let mut s = running_resumed(&clock, &c);
    assert_eq!(
        s.on_daemon(live_complete(StopReason::Cancelled), clock.now(), &c),
        DaemonStep::CutOff,
        "no replay named the prompt, but the daemon says it stopped it with nothing done"
    );
    assert!(s.abandon_session);
}

/// D6: a resumed turn someone here cancelled (`/cancel`) ends as cancelled, and a resumed turn the
/// agent finished ends as ended — only a cancel nobody asked for means the restart stopped it.
#[test]
fn d6_a_resumed_turn_cancelled_from_chat_or_finished_ends_as_the_daemon_says() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = running_resumed(&clock, &c);
    let _ = s.on_daemon(text("working"), clock.now(), &c);
    s.record_cancel(clock.now(), secs(10));
    assert_eq!(
        s.on_daemon(live_complete(StopReason::Cancelled), clock.now(), &c),
        DaemonStep::EndTurn(StopReason::Cancelled)
    );
    assert!(!s.abandon_session);

    let mut s = running_resumed(&clock, &c);
    let _ = s.on_daemon(text("done"), clock.now(), &c);
    assert_eq!(
        s.on_daemon(live_complete(StopReason::EndTurn), clock.now(), &c),
        DaemonStep::EndTurn(StopReason::EndTurn)
    );
    let mut s = running_resumed(&clock, &c);
    let _ = s.on_daemon(text("long"), clock.now(), &c);
    assert_eq!(
        s.on_daemon(live_complete(StopReason::MaxTokens), clock.now(), &c),
        DaemonStep::EndTurn(StopReason::MaxTokens),
        "the daemon's stop reason is kept"
    );
}

fn running_resumed(clock: &Clock, c: &crate::core::CoreConfig) -> State {
    let mut s = running(clock, c);
    s.turn.as_mut().expect("turn").resumed = true;
    s
}
