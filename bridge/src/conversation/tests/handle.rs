//! `State::handle`: an event in, the effects out, in order.

use daemon_client::{ShellProgress, StallKind, StopReason};

use super::{Clock, call, cfg, ended, heartbeat, info, running, secs, session, started};
use crate::conversation::effects::Effect;
use crate::conversation::event::Event;
use crate::conversation::state::{Line, State};
use crate::conversation::turn::Queued;
use crate::core::CoreConfig;

fn beat() -> Event {
    Event::Daemon(heartbeat(1, ShellProgress::default()))
}

fn prompt(n: u32) -> Queued {
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
fn f1_a_heartbeat_is_only_a_count_for_the_store_never_a_message() {
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = running(&clock, &c);
    assert_eq!(
        s.handle(Event::Daemon(started(1, "sleep 9")), clock.now(), &c),
        [Effect::AnnounceTool(call(1), info("sleep 9"))]
    );
    s.tool_running(call(1), "sleep 9".into(), clock.now(), true);
    for _ in 0..10 {
        assert_eq!(
            s.handle(beat(), clock.advance(secs(1)), &c),
            [Effect::FlushCounts]
        );
    }
}

#[test]
fn l5_a_heartbeat_past_progress_after_flushes_then_edits_the_line() {
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = running(&clock, &c);
    s.tool_running(call(1), "sleep 60".into(), clock.now(), true);
    let effects = s.handle(beat(), clock.advance(secs(16)), &c);
    assert_eq!(
        effects,
        [
            Effect::FlushCounts,
            Effect::ShowLine(Line {
                call: call(1),
                title: "sleep 60".into(),
                elapsed: secs(16),
                age: None
            })
        ]
    );
}

#[test]
fn a_timer_expires_approvals_then_shows_lines_then_announces_the_stall() {
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = running(&clock, &c);
    s.tool_running(call(1), "make".into(), clock.now(), true);
    s.approvals
        .ask(super::pending("p1", clock.now() + secs(100)));
    let effects = s.handle(Event::Timer, clock.advance(secs(120)), &c);
    assert_eq!(effects.len(), 2, "{effects:#?}");
    assert!(matches!(&effects[0], Effect::ExpireApproval(p) if p.db_id == "p1"));
    assert!(matches!(&effects[1], Effect::ShowLine(l) if l.call == call(1)));
    // The silence while the approval waited was the bridge's (L1): the idle limit counts from
    // when it closed.
    assert!(
        s.handle(Event::Timer, clock.advance(secs(119)), &c)
            .iter()
            .all(|e| !matches!(e, Effect::Stalled { .. })),
        "no stall before the idle limit has passed since the approval closed"
    );
    let effects = s.handle(Event::Timer, clock.advance(secs(1)), &c);
    assert!(
        effects.iter().any(|e| matches!(
            e,
            Effect::Stalled { stall, resumed: false, cancel: false } if stall.kind == StallKind::Idle
        )),
        "{effects:#?}"
    );
    assert!(
        s.handle(Event::Timer, clock.now(), &c).is_empty(),
        "nothing twice"
    );
}

#[test]
fn d3_a_resumed_turns_stall_says_it_was_resumed() {
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = running(&clock, &c);
    s.turn.as_mut().expect("turn").resumed = true;
    let effects = s.handle(Event::Timer, clock.advance(secs(120)), &c);
    assert!(
        matches!(effects.as_slice(), [Effect::Stalled { resumed: true, .. }]),
        "{effects:#?}"
    );
}

/// Found under load in CI: a turn taken back while the daemon could not be reached was closed as
/// stalled before the daemon was back to say what became of it.
#[test]
fn l7_d3_a_turn_taken_back_while_the_daemon_is_down_never_stalls_until_the_daemon_is_back() {
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = running(&clock, &c);
    s.turn.as_mut().expect("turn").resumed = true;
    s.daemon_down = true;
    for _ in 0..5 {
        let effects = s.handle(Event::Timer, clock.advance(secs(120)), &c);
        assert!(
            !effects.iter().any(|e| matches!(e, Effect::Stalled { .. })),
            "{effects:#?}"
        );
    }
    s.handle(Event::Connection(true), clock.now(), &c);
    let effects = s.handle(Event::Timer, clock.advance(secs(120)), &c);
    assert!(
        effects
            .iter()
            .any(|e| matches!(e, Effect::Stalled { resumed: true, .. })),
        "bounded again once the daemon is back: {effects:#?}"
    );
}

#[test]
fn queue_full_prompts_start_wait_or_are_refused() {
    let c = cfg();
    let clock = Clock::new();
    let mut idle = State::new(Some(session()));
    assert_eq!(
        idle.handle(Event::Prompt(prompt(1)), clock.now(), &c),
        [Effect::StartTurn(prompt(1))]
    );
    let mut s = running(&clock, &c);
    for n in 2..=3 {
        assert_eq!(
            s.handle(Event::Prompt(prompt(n)), clock.now(), &c),
            [Effect::Queued(prompt(n).event)]
        );
    }
    assert_eq!(
        s.handle(Event::Prompt(prompt(4)), clock.now(), &c),
        [Effect::QueueFull {
            waiting: 2,
            refused: "prompt 4".into(),
            message_id: Some("m4".into())
        }]
    );
}

#[test]
fn the_daemons_turn_end_ends_the_turn_and_nothing_attaches_without_one() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    assert_eq!(
        s.handle(Event::Daemon(ended(StopReason::EndTurn)), clock.now(), &c),
        [Effect::EndTurn(StopReason::EndTurn)]
    );
    let mut none = State::new(Some(session()));
    assert!(
        none.handle(Event::Daemon(ended(StopReason::EndTurn)), clock.now(), &c)
            .is_empty()
    );
    assert!(none.handle(Event::Timer, clock.now(), &c).is_empty());
}

fn said(user: &str, text: &str) -> Event {
    Event::Message(crate::conversation::event::Said {
        user: user.into(),
        text: text.into(),
        message_id: Some("m9".into()),
        event: Some(("slack".into(), "Ev9".into())),
        files: Vec::new(),
    })
}

/// A thread opened by `alice` (access.threads = owner).
fn owned(clock: &Clock) -> State {
    let mut s = running(clock, &cfg());
    s.owner = "alice".into();
    s.members = Some(vec!["bob".into()]);
    s
}

#[test]
fn a2_someone_elses_prompt_is_refused_before_anything_runs() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = owned(&clock);
    assert_eq!(
        s.handle(said("mallory", "rm -rf /"), clock.now(), &c),
        [Effect::Refuse {
            user: "mallory".into(),
            message_id: Some("m9".into()),
            refusal: crate::core::access::Refusal::NotAMember
        }]
    );
    assert!(s.queue.is_empty(), "nothing queued");
    let refused = s.handle(said("mallory", "/cancel"), clock.now(), &c);
    assert!(
        matches!(refused.as_slice(), [Effect::Refuse { .. }]),
        "{refused:?}"
    );
}

#[test]
fn a2_the_owner_and_invited_people_prompt_and_anyone_may_read() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = owned(&clock);
    for user in ["alice", "bob"] {
        let effects = s.handle(said(user, " make test "), clock.now(), &c);
        assert!(
            matches!(effects.as_slice(), [Effect::Prompt(q)] if q.text == "make test" && q.user == user),
            "{effects:?}"
        );
    }
    assert!(
        s.queue.is_empty(),
        "a prompt is admitted only after its 👀 is written"
    );
    assert_eq!(
        s.handle(said("mallory", "/status"), clock.now(), &c),
        [Effect::Command {
            user: "mallory".into(),
            command: crate::conversation::commands::Command::Status
        }]
    );
}

#[test]
fn a3_a_number_answers_the_one_waiting_approval_and_only_with_an_offered_option() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = owned(&clock);
    s.approvals
        .ask(super::pending("p1", clock.now() + secs(600)));
    assert_eq!(
        s.handle(said("bob", "1"), clock.now(), &c),
        [Effect::Answer {
            user: "bob".into(),
            request: "p1".into(),
            option: "proceed_once".into()
        }]
    );
    let forged = s.handle(said("bob", "7"), clock.now(), &c);
    assert!(
        matches!(
            forged.as_slice(),
            [Effect::Refuse {
                refusal: crate::core::access::Refusal::UnknownOption,
                ..
            }]
        ),
        "{forged:?}"
    );
    assert_eq!(
        s.approvals.len(),
        1,
        "the answer is the runner's to check (R6) and record"
    );
}

#[test]
fn an_empty_message_does_nothing_at_all() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = owned(&clock);
    assert!(
        s.handle(said("mallory", "  \n "), clock.now(), &c)
            .is_empty()
    );
}

fn done(seq: u64, end: crate::conversation::event::PromptEnd) -> Event {
    Event::PromptDone { seq, end }
}

#[test]
fn a_late_return_of_an_older_prompt_call_changes_nothing() {
    use crate::conversation::event::PromptEnd;
    let c = cfg();
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    // The running turn's call is number 1.
    assert!(
        s.handle(done(0, PromptEnd::Failed("boom".into())), clock.now(), &c)
            .is_empty()
    );
    assert!(
        s.handle(done(1, PromptEnd::Answered), clock.now(), &c)
            .is_empty(),
        "the event stream ends it"
    );
    assert!(s.turn.is_some());
}

#[test]
fn d3_a_prompt_call_cut_by_shutdown_leaves_the_turn_open() {
    use crate::conversation::event::PromptEnd;
    let c = cfg();
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    assert!(
        s.handle(done(1, PromptEnd::Stopping), clock.now(), &c)
            .is_empty()
    );
    assert!(s.turn.is_some() && s.session.is_some());
}

#[test]
fn l6_a_lost_session_interrupts_the_running_calls_under_their_stored_ids_and_forgets_it() {
    use crate::conversation::event::{PromptEnd, TurnStatus};
    let c = cfg();
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    s.tool_running(call(1), "make".into(), clock.now(), true);
    let effects = s.handle(
        done(1, PromptEnd::SessionLost("unknown session".into())),
        clock.now(),
        &c,
    );
    assert_eq!(effects.len(), 3, "{effects:#?}");
    assert_eq!(
        effects[0],
        Effect::InterruptTools(vec![("s1/call-1".into(), "make".into())]),
        "scoped by the session the calls were stored under"
    );
    assert!(
        matches!(&effects[1], Effect::Notice(crate::channel::Tone::Error, t) if t.contains("unknown session"))
    );
    assert_eq!(effects[2], Effect::EndTurnAs(TurnStatus::Interrupted));
    assert!(
        s.session.is_none() && !s.session_ready,
        "the next message opens a new session"
    );
    assert_eq!(
        s.mark_if_ended(None),
        Some(crate::conversation::event::Mark::Failed)
    );
}

#[test]
fn an_agent_process_that_exits_interrupts_the_turn_once_and_keeps_the_session_for_a_reload() {
    use crate::conversation::event::{PromptEnd, TurnStatus};
    let c = cfg();
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    s.tool_running(call(1), "make".into(), clock.now(), true);
    let effects = s.handle(
        done(
            1,
            PromptEnd::AgentExited("the agent process exited (signal: 9)".into()),
        ),
        clock.now(),
        &c,
    );
    assert_eq!(effects.len(), 3, "{effects:#?}");
    assert_eq!(
        effects[0],
        Effect::InterruptTools(vec![("s1/call-1".into(), "make".into())])
    );
    assert!(
        matches!(&effects[1], Effect::Notice(crate::channel::Tone::Error, t) if t.contains("signal: 9") && t.contains("started again"))
    );
    assert_eq!(effects[2], Effect::EndTurnAs(TurnStatus::Interrupted));
    assert!(
        s.session.is_some() && !s.session_ready,
        "the session is loaded again before the next prompt"
    );
}

#[test]
fn a_prompt_the_agent_could_not_run_ends_the_turn_failed() {
    use crate::conversation::event::{PromptEnd, TurnStatus};
    let c = cfg();
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    let effects = s.handle(
        done(1, PromptEnd::Failed("refused".into())),
        clock.now(),
        &c,
    );
    assert!(
        matches!(&effects[0], Effect::Notice(_, t) if t == "The agent could not run this turn: refused")
    );
    assert_eq!(effects[1], Effect::EndTurnAs(TurnStatus::Failed));
    assert!(s.session.is_some(), "the session is still good");
}

#[test]
fn r6_without_buttons_text_while_an_approval_waits_gets_a_hint_and_is_not_sent() {
    let clock = Clock::new();
    let ask = |s: &mut State| {
        s.approvals
            .ask(super::pending("p1", clock.now() + secs(600)));
    };
    let console = CoreConfig {
        buttons: false,
        ..cfg()
    };
    let mut s = owned(&clock);
    ask(&mut s);
    let effects = s.handle(said("alice", "yes"), clock.now(), &console);
    assert!(
        matches!(effects.as_slice(), [Effect::Notice(_, t)] if t == crate::conversation::commands::APPROVAL_HINT),
        "{effects:#?}"
    );
    // A number is still the answer.
    let effects = s.handle(said("alice", "1"), clock.now(), &console);
    assert!(
        matches!(effects.as_slice(), [Effect::Answer { option, .. }] if option == "proceed_once"),
        "{effects:#?}"
    );
    // With buttons, text is a prompt as ever (it waits behind the turn).
    let mut s = owned(&clock);
    ask(&mut s);
    let effects = s.handle(said("alice", "yes"), clock.now(), &cfg());
    assert!(
        !effects.iter().any(|e| matches!(e, Effect::Notice(..))),
        "{effects:#?}"
    );
}

#[test]
fn t2_a_cancel_the_daemon_never_confirms_ends_the_turn_after_the_grace_and_frees_the_thread() {
    use crate::conversation::event::TurnStatus;
    let c = cfg();
    let mut clock = Clock::new();
    let mut s = running(&clock, &c);
    s.tool_running(call(1), "sleep 60".into(), clock.now(), true);
    s.record_cancel(clock.now(), c.cancel_grace);
    let before = s.handle(Event::Timer, clock.advance(secs(9)), &c);
    assert!(before.is_empty(), "the daemon still has time: {before:#?}");
    let effects = s.handle(Event::Timer, clock.advance(secs(1)), &c);
    assert_eq!(effects.len(), 3, "{effects:#?}");
    assert!(
        matches!(&effects[0], Effect::LetGoTools(t) if t.len() == 1 && t[0].1 == "sleep 60"),
        "{effects:#?}"
    );
    assert!(
        matches!(&effects[1], Effect::Notice(_, t) if t.contains("did not confirm the cancel"))
    );
    assert_eq!(effects[2], Effect::EndTurnAs(TurnStatus::Cancelled));
    // After `/new` (its session goes with the next message) the notice does not promise more.
    let mut s = running(&clock, &c);
    s.abandon_session = true;
    s.record_cancel(clock.now(), c.cancel_grace);
    let effects = s.handle(Event::Timer, clock.advance(secs(10)), &c);
    assert!(
        effects.iter().any(|e| matches!(e, Effect::Notice(_, t) if t.contains("until the next message opens a new agent session"))),
        "{effects:#?}"
    );
    // A confirmation in time ends the turn the normal way: nothing is due then.
    let mut s = running(&clock, &c);
    s.record_cancel(clock.now(), c.cancel_grace);
    s.turn = None;
    assert!(
        s.handle(Event::Timer, clock.advance(secs(30)), &c)
            .is_empty()
    );
}

#[test]
fn p2_a_call_started_here_has_no_edit_waiting_until_one_is_queued_and_a_followed_one_may() {
    let c = cfg();
    let clock = Clock::new();
    let mut s = running(&clock, &c);
    s.tool_running(call(1), "make".into(), clock.now(), true);
    s.tool_running(call(2), "make test".into(), clock.now(), false);
    let queued = |s: &State, n| {
        s.turn
            .as_ref()
            .expect("turn")
            .tools
            .get(&call(n))
            .expect("tool")
            .edits_queued
    };
    assert!(
        !queued(&s, 1),
        "posted here, nothing edited yet: its result need not look"
    );
    assert!(
        queued(&s, 2),
        "followed again after a restart: an edit queued before may wait"
    );
    s.tool_edited(&call(1));
    assert!(
        queued(&s, 1),
        "a new title or progress line queued: its result replaces it"
    );
    s.tool_edited(&call(9));
}
