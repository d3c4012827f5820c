use crate::conversation::commands::{Command, Parsed, invite_text, invite_usage, parse};
use crate::core::access::Act;

#[test]
fn a2_each_command_is_parsed_with_the_role_it_needs() {
    let table = [
        ("/new", Command::New, Act::New),
        ("/cancel", Command::Cancel, Act::Cancel),
        ("/status", Command::Status, Act::Read),
        ("/history", Command::History, Act::Read),
        ("/help", Command::Help, Act::Read),
        (
            "/invite <@U2>",
            Command::Invite("<@U2>".into()),
            Act::Invite,
        ),
        (
            "/uninvite <@U2>",
            Command::Uninvite("<@U2>".into()),
            Act::Invite,
        ),
    ];
    for (text, command, act) in table {
        let parsed = parse(text, 0);
        assert_eq!(parsed, Parsed::Command(command), "{text}");
        assert_eq!(parsed.act(), Some(act), "{text}");
    }
}

#[test]
fn a2_an_unknown_slash_word_is_a_prompt_and_needs_prompt_rights() {
    let parsed = parse("/etc/hosts is odd", 0);
    assert_eq!(parsed, Parsed::Prompt("/etc/hosts is odd".into()));
    assert_eq!(parsed.act(), Some(Act::Prompt));
}

#[test]
fn an_empty_or_blank_message_does_nothing() {
    assert_eq!(parse("", 0), Parsed::Empty);
    assert_eq!(parse(" \n\t ", 1), Parsed::Empty);
    assert_eq!(Parsed::Empty.act(), None);
}

#[test]
fn a3_a_number_while_one_approval_waits_is_an_answer_never_a_prompt() {
    assert_eq!(parse(" 2 ", 1), Parsed::Numbered(2));
    assert_eq!(parse("0", 1), Parsed::Numbered(0));
    // An answer is checked against the request (R6), not against the thread's roles.
    assert_eq!(Parsed::Numbered(2).act(), None);
}

#[test]
fn a_number_without_exactly_one_waiting_approval_is_a_prompt() {
    assert_eq!(parse("2", 0), Parsed::Prompt("2".into()));
    assert_eq!(parse("2", 2), Parsed::Prompt("2".into()));
    assert_eq!(parse("-1", 1), Parsed::Prompt("-1".into()));
}

#[test]
fn a_prompt_is_trimmed_and_a_command_keeps_only_its_argument() {
    assert_eq!(parse("  ls -la \n", 0), Parsed::Prompt("ls -la".into()));
    assert_eq!(
        parse("/invite   <@U2>  <@U3> ", 0),
        Parsed::Command(Command::Invite("<@U2>  <@U3>".into()))
    );
    // A slash command needs its slash first: text after a prompt word is a prompt.
    assert_eq!(
        parse("please /cancel", 0),
        Parsed::Prompt("please /cancel".into())
    );
}

#[test]
fn a2_invite_and_uninvite_say_what_changed() {
    let added = invite_text(true, "<@U1>", &["<@U2>".into(), "<@U3>".into()]);
    assert_eq!(
        added,
        "<@U1> invited <@U2>, <@U3>: they may now prompt, answer approvals and `/cancel` in this thread."
    );
    assert_eq!(
        invite_text(false, "<@U1>", &["<@U2>".into()]),
        "<@U1> removed <@U2> from this thread."
    );
    assert!(invite_text(true, "<@U1>", &[]).starts_with("Nobody new to invite"));
    assert!(invite_text(false, "<@U1>", &[]).starts_with("Nobody to remove"));
    assert!(invite_usage(false).contains("/uninvite @person"));
}
