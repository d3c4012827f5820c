use super::{Clock, option, options, pending, secs};
use crate::conversation::approvals::{Approvals, Numbered, offered};

#[test]
fn a3_four_eyes_never_offers_allow_always() {
    let kept: Vec<String> = offered(options(), true)
        .into_iter()
        .map(|o| o.kind)
        .collect();
    assert_eq!(kept, ["allow_once", "reject_once"]);
}

#[test]
fn r6_without_four_eyes_every_option_is_offered_in_the_daemons_order() {
    assert_eq!(offered(options(), false), options());
}

#[test]
fn a3_a_numbered_answer_picks_the_nth_offered_option() {
    let clock = Clock::new();
    let mut a = Approvals::default();
    a.ask(pending("p1", clock.now() + secs(600)));
    assert_eq!(
        a.numbered(3),
        Some(Numbered::Option {
            request: "p1".into(),
            option: "cancel".into()
        })
    );
}

#[test]
fn a3_offered_options_only_a_number_past_them_picks_nothing() {
    let clock = Clock::new();
    let mut a = Approvals::default();
    a.ask(pending("p1", clock.now() + secs(600)));
    assert_eq!(a.numbered(0), Some(Numbered::NoSuchOption));
    assert_eq!(a.numbered(4), Some(Numbered::NoSuchOption));
    assert_eq!(a.numbered(usize::MAX), Some(Numbered::NoSuchOption));
    // Two waiting: a number names no single request.
    a.ask(pending("p2", clock.now() + secs(600)));
    assert_eq!(a.numbered(1), None);
}

#[test]
fn approval_expiry_takes_only_the_requests_that_are_due() {
    let mut clock = Clock::new();
    let mut a = Approvals::default();
    a.ask(pending("short", clock.now() + secs(60)));
    a.ask(pending("long", clock.now() + secs(600)));
    assert!(a.take_expired(clock.advance(secs(59))).is_empty());
    let gone = a.take_expired(clock.advance(secs(1)));
    assert_eq!(gone.len(), 1);
    assert_eq!(gone[0].db_id, "short");
    assert_eq!(a.len(), 1);
    assert!(a.get("long").is_some());
}

#[test]
fn approval_expiry_deadline_is_the_earliest_waiting_one() {
    let clock = Clock::new();
    let mut a = Approvals::default();
    assert_eq!(a.next_deadline(), None);
    a.ask(pending("long", clock.now() + secs(600)));
    a.ask(pending("short", clock.now() + secs(60)));
    assert_eq!(a.next_deadline(), Some(clock.now() + secs(60)));
}

#[test]
fn r6_the_first_decision_wins() {
    let clock = Clock::new();
    let mut a = Approvals::default();
    a.ask(pending("p1", clock.now() + secs(600)));
    assert!(a.take("p1").is_some());
    assert!(
        a.take("p1").is_none(),
        "a second click finds nothing to decide"
    );
    assert!(a.is_empty());
}

#[test]
fn r6_a_decision_is_told_with_the_options_label_and_rejects_are_known() {
    let clock = Clock::new();
    let p = pending("p1", clock.now() + secs(600));
    assert_eq!(p.label("proceed_once"), "proceed_once label");
    assert_eq!(p.label("forged"), "forged");
    assert!(p.rejects("cancel"));
    assert!(!p.rejects("proceed_once"));
    assert!(!p.rejects("forged"));
    assert_eq!(p.option_ids(), ["proceed_once", "proceed_always", "cancel"]);
    let _ = option("x", "reject_always");
}
