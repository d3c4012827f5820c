use crate::channel::{ChatAction, Message, Target, Tone};
use crate::conversation::effects::{edit, ephemeral, outbox_row, outcome_marks, post, react};
use crate::conversation::event::Mark;
use crate::core::keys::MessageKey;
use crate::store::outbox::Kind;

fn target() -> Target {
    Target {
        workspace: "T1".into(),
        channel: "C1".into(),
        thread: "1.1".into(),
    }
}

#[test]
fn d1_posts_and_edits_coalesce_by_their_message_key_r1() {
    let key = MessageKey::Tool("s1/call-1".into());
    let msg = Message::text(Tone::Neutral, "x");
    let p = post(&target(), &key, msg.clone());
    assert_eq!(outbox_row(&p), (Kind::Post, Some("tool:s1/call-1")));
    let e = edit(&target(), &key, msg, true);
    assert_eq!(outbox_row(&e), (Kind::Edit, Some("tool:s1/call-1")));
    assert!(matches!(e, ChatAction::Edit { progress: true, .. }));
}

#[test]
fn d1_reactions_and_ephemeral_replies_are_rows_of_their_own() {
    let r = react(&target(), "m1", Mark::Received, true);
    assert_eq!(outbox_row(&r), (Kind::Other, None));
    let e = ephemeral(&target(), "U2", "no".into());
    assert_eq!(outbox_row(&e), (Kind::Other, None));
}

#[test]
fn the_outcome_takes_the_eyes_away_then_adds_the_mark() {
    let [first, second] = outcome_marks(&target(), "m1", Mark::Failed);
    assert!(
        matches!(&first, ChatAction::React { name, add: false, .. } if name.parse::<Mark>() == Ok(Mark::Received)),
        "{first:?}"
    );
    assert!(
        matches!(&second, ChatAction::React { name, add: true, .. } if name.parse::<Mark>() == Ok(Mark::Failed)),
        "{second:?}"
    );
}
