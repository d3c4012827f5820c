//! Typed names for what the core writes down as strings: the logical key of each chat message (the
//! outbox's coalescing key and the message map's key) and the value a button carries back. One
//! `Display` and one `FromStr` each, round-trip tested, so the formats live in one place. The
//! strings are stored (outbox, message map) and sent to platforms (button values): they never change.

use std::fmt;
use std::str::FromStr;

/// The logical key of a chat message: which message a post creates and an edit changes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MessageKey {
    /// A tool call's message (R1), by its session-scoped call id.
    Tool(String),
    /// A permission request's message (R6), by its stored id.
    Permission(String),
    /// A turn's answer (R5), by the turn's id.
    Answer(String),
    /// A further part of a long answer (the second is 2), by the turn's id.
    AnswerPart(String, usize),
    /// A draft the answer streams into (R5), by the turn's id and its number within the turn.
    Draft(String, usize),
    /// A notice from the bridge: when (Unix ms) and its number within the conversation's runner.
    Notice(i64, u64),
    /// The notice that an inbound event was set aside (S4), by the event's id.
    DeadLetter(String),
}

impl fmt::Display for MessageKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tool(call) => write!(f, "tool:{call}"),
            Self::Permission(id) => write!(f, "perm:{id}"),
            Self::Answer(turn) => write!(f, "answer:{turn}"),
            Self::AnswerPart(turn, n) => write!(f, "answer-part:{turn}:{n}"),
            Self::Draft(turn, n) => write!(f, "draft:{turn}:{n}"),
            Self::Notice(at, n) => write!(f, "notice:{at}:{n}"),
            Self::DeadLetter(event) => write!(f, "dead-letter:{event}"),
        }
    }
}

/// A string that is no key (or no button value) the core makes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a chat-bridge key: {0:?}")]
pub struct UnknownKey(String);

impl FromStr for MessageKey {
    type Err = UnknownKey;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || UnknownKey(s.to_owned());
        let (kind, rest) = s.split_once(':').ok_or_else(bad)?;
        if rest.is_empty() {
            return Err(bad());
        }
        match kind {
            "tool" => Ok(Self::Tool(rest.to_owned())),
            "perm" => Ok(Self::Permission(rest.to_owned())),
            "answer" => Ok(Self::Answer(rest.to_owned())),
            "answer-part" | "draft" => {
                let (turn, n) = rest.rsplit_once(':').ok_or_else(bad)?;
                if turn.is_empty() {
                    return Err(bad());
                }
                let n = n.parse().map_err(|_| bad())?;
                Ok(if kind == "draft" {
                    Self::Draft(turn.to_owned(), n)
                } else {
                    Self::AnswerPart(turn.to_owned(), n)
                })
            }
            "dead-letter" => Ok(Self::DeadLetter(rest.to_owned())),
            "notice" => {
                let (at, n) = rest.split_once(':').ok_or_else(bad)?;
                Ok(Self::Notice(
                    at.parse().map_err(|_| bad())?,
                    n.parse().map_err(|_| bad())?,
                ))
            }
            _ => Err(bad()),
        }
    }
}

/// What a button click says: the value the core put on the button.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ButtonValue {
    /// An answer to a permission request (its stored id) with one of its options.
    Permission {
        /// The stored request id.
        request: String,
        /// The chosen option id (checked against the offered ones before use).
        option: String,
    },
}

impl fmt::Display for ButtonValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Permission { request, option } => write!(f, "perm:{request}:{option}"),
        }
    }
}

impl FromStr for ButtonValue {
    type Err = UnknownKey;

    /// Strict: a value from a platform is hostile until parsed.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || UnknownKey(s.to_owned());
        let mut parts = s.splitn(3, ':');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("perm"), Some(request), Some(option))
                if !request.is_empty() && !option.is_empty() =>
            {
                Ok(Self::Permission {
                    request: request.to_owned(),
                    option: option.to_owned(),
                })
            }
            _ => Err(bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_keys_round_trip_and_keep_their_stored_form() {
        let cases = [
            (
                MessageKey::Tool("sess-1/call-7".into()),
                "tool:sess-1/call-7",
            ),
            (MessageKey::Permission("p-1".into()), "perm:p-1"),
            (MessageKey::Answer("t-1".into()), "answer:t-1"),
            (MessageKey::AnswerPart("t-1".into(), 2), "answer-part:t-1:2"),
            (MessageKey::Draft("t-1".into(), 1), "draft:t-1:1"),
            (
                MessageKey::Notice(1_700_000_000_000, 3),
                "notice:1700000000000:3",
            ),
            (MessageKey::DeadLetter("Ev1:x".into()), "dead-letter:Ev1:x"),
        ];
        for (key, text) in cases {
            assert_eq!(key.to_string(), text);
            assert_eq!(text.parse::<MessageKey>(), Ok(key));
        }
    }

    #[test]
    fn unknown_or_empty_message_keys_are_refused() {
        for s in [
            "",
            "tool",
            "tool:",
            "dead-letter:",
            "edit:x",
            "notice:x:1",
            "notice:1",
            "notice:1:-1",
        ] {
            assert!(s.parse::<MessageKey>().is_err(), "{s:?}");
        }
    }

    #[test]
    fn a3_button_values_round_trip_and_hand_made_ones_are_refused() {
        let v = ButtonValue::Permission {
            request: "req-1".into(),
            option: "allow:once".into(),
        };
        assert_eq!(v.to_string(), "perm:req-1:allow:once");
        assert_eq!("perm:req-1:allow:once".parse::<ButtonValue>(), Ok(v));
        for s in [
            "",
            "perm",
            "perm:req-1",
            "perm::allow",
            "perm:req-1:",
            "tool:x:y",
            "PERM:a:b",
        ] {
            assert!(s.parse::<ButtonValue>().is_err(), "{s:?}");
        }
    }
}
