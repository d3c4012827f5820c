//! What a person's message means: a command, a numbered answer to the one pending approval, or a
//! prompt for the agent. Pure: the runner acts on the answer.

use crate::core::access::Act;

/// A slash command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `/new`: start over with a new agent session.
    New,
    /// `/cancel`: stop the running turn and drop the queue.
    Cancel,
    /// `/status`: what is running.
    Status,
    /// `/history`: this thread's turns.
    History,
    /// `/help`.
    Help,
    /// `/invite @a @b` (the text after the word).
    Invite(String),
    /// `/uninvite @a` (the text after the word).
    Uninvite(String),
    /// `/steer <text>`: cancel the running turn and run this next.
    Steer(String),
    /// `/every <interval> <prompt>` (the text after the word).
    Every(String),
    /// `/at <HH:MM> <prompt>` (the text after the word).
    At(String),
    /// `/schedules`: this thread's schedules.
    Schedules,
    /// `/unschedule <id>`.
    Unschedule(String),
    /// `/diff`: the uncommitted changes in this thread's own checkout.
    Diff,
    /// `/done` or `/done force` (the text after the word): close the thread and remove its own
    /// checkout (the branch is kept).
    Done(String),
}

impl Command {
    /// What doing it asks of the person's role in the thread (A2).
    #[must_use]
    pub fn act(&self) -> Act {
        match self {
            Self::Status | Self::History | Self::Help => Act::Read,
            Self::New => Act::New,
            Self::Cancel => Act::Cancel,
            Self::Invite(_) | Self::Uninvite(_) => Act::Invite,
            Self::Steer(_) | Self::Every(_) | Self::At(_) => Act::Prompt,
            Self::Schedules | Self::Diff => Act::Read,
            Self::Unschedule(_) => Act::Cancel,
            Self::Done(_) => Act::New,
        }
    }
}

/// What a message is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Only whitespace: nothing to do.
    Empty,
    /// A number while exactly one approval waits: an answer to it (channels without buttons), never
    /// a command or a prompt (A3). `n` counts from 1.
    Numbered(usize),
    /// A command.
    Command(Command),
    /// A prompt for the agent (trimmed); an unknown `/word` is a prompt too.
    Prompt(String),
}

impl Parsed {
    /// What the message asks of the person's role (A2); `None` for an empty message or a numbered
    /// answer (answers are checked against the request, R6).
    #[must_use]
    pub fn act(&self) -> Option<Act> {
        match self {
            Self::Empty | Self::Numbered(_) => None,
            Self::Command(c) => Some(c.act()),
            Self::Prompt(_) => Some(Act::Prompt),
        }
    }
}

/// Reads `text`; `pending_approvals` is how many approvals wait in the thread.
#[must_use]
pub fn parse(text: &str, pending_approvals: usize) -> Parsed {
    let text = text.trim();
    if text.is_empty() {
        return Parsed::Empty;
    }
    if pending_approvals == 1
        && let Ok(n) = text.parse::<usize>()
    {
        return Parsed::Numbered(n);
    }
    let Some(cmd) = text.strip_prefix('/') else {
        return Parsed::Prompt(text.to_owned());
    };
    let word = cmd.split_whitespace().next().unwrap_or("");
    let rest = cmd[word.len()..].trim().to_owned();
    let command = match word {
        "new" => Command::New,
        "cancel" => Command::Cancel,
        "status" => Command::Status,
        "history" => Command::History,
        "help" => Command::Help,
        "invite" => Command::Invite(rest),
        "uninvite" => Command::Uninvite(rest),
        "steer" => Command::Steer(rest),
        "every" => Command::Every(rest),
        "at" => Command::At(rest),
        "schedules" => Command::Schedules,
        "unschedule" => Command::Unschedule(rest),
        "diff" => Command::Diff,
        "done" => Command::Done(rest),
        _ => return Parsed::Prompt(text.to_owned()),
    };
    Parsed::Command(command)
}

/// `/help`'s text.
pub const HELP: &str = "Each message is a prompt for the agent in this thread's session.\n/cancel — stop the running turn\n/steer <message> — stop the running turn and run this instead\n/every 1h <prompt> — run a prompt here on a schedule; /at 09:00 <prompt> — once, at that time (UTC)\n/schedules — this thread's schedules; /unschedule <id> — remove one\n/status — what is running\n/diff — the uncommitted changes in this thread's own checkout\n/done — close this thread (its own checkout is removed, its branch kept; `/done force` also with uncommitted changes)\n/new — start a new agent session\n/history — this thread's turns\n/invite @person — let someone prompt and approve here (the thread's owner)\n/uninvite @person — stop letting them\n/help — this text\nWhen an approval waits: the buttons, or where there are none, its option's number (1, 2, …).";

/// What a message that is not a number gets while an approval waits on a channel without buttons.
pub const APPROVAL_HINT: &str = "An approval is waiting: answer with its option's number (1, 2, …), or /cancel to stop the turn. Your message was not sent to the agent.";

/// What `/invite` or `/uninvite` says once done: `by` and `changed` as the platform names people.
#[must_use]
pub fn invite_text(add: bool, by: &str, changed: &[String]) -> String {
    match (add, changed.is_empty()) {
        (true, false) => format!(
            "{by} invited {}: they may now prompt, answer approvals and `/cancel` in this thread.",
            changed.join(", ")
        ),
        (false, false) => format!("{by} removed {} from this thread.", changed.join(", ")),
        (true, true) => "Nobody new to invite: they can already act in this thread.".to_owned(),
        (false, true) => "Nobody to remove: they were not invited to this thread.".to_owned(),
    }
}

/// What `/invite` or `/uninvite` without anyone named says.
#[must_use]
pub fn invite_usage(add: bool) -> String {
    let verb = if add { "invite" } else { "uninvite" };
    format!("Usage: `/{verb} @person …` — name the people by mentioning them.")
}
