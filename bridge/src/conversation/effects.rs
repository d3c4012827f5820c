//! The chat actions a conversation writes and how each maps onto an outbox row (D1): a post or an
//! edit coalesces by its message key (R1: one message per tool call, edited in place), a reaction
//! or an ephemeral reply is a row of its own. The runner writes the row in the same transaction as
//! the state change that caused it. Pure.

use super::event::Mark;
use crate::channel::{ChatAction, Message, Target};
use crate::core::keys::MessageKey;
use crate::store::outbox::Kind;

/// Posts a message under `key`.
#[must_use]
pub fn post(target: &Target, key: &MessageKey, message: Message) -> ChatAction {
    ChatAction::Post {
        target: target.clone(),
        key: key.to_string(),
        message,
    }
}

/// Edits the message under `key` in place; a `progress` edit may be dropped under rate pressure.
#[must_use]
pub fn edit(target: &Target, key: &MessageKey, message: Message, progress: bool) -> ChatAction {
    ChatAction::Edit {
        target: target.clone(),
        key: key.to_string(),
        message,
        progress,
    }
}

/// Adds (or takes away) `mark` on the person's message `message_id`.
#[must_use]
pub fn react(target: &Target, message_id: &str, mark: Mark, add: bool) -> ChatAction {
    ChatAction::React {
        target: target.clone(),
        message_id: message_id.to_owned(),
        name: mark.as_str().to_owned(),
        add,
    }
}

/// A reply only `user` sees.
#[must_use]
pub fn ephemeral(target: &Target, user: &str, text: String) -> ChatAction {
    ChatAction::Ephemeral {
        target: target.clone(),
        user: user.to_owned(),
        text,
    }
}

/// The outbox row's kind and coalescing key for `action`.
#[must_use]
pub fn outbox_row(action: &ChatAction) -> (Kind, Option<&str>) {
    match action {
        ChatAction::Post { key, .. } => (Kind::Post, Some(key.as_str())),
        ChatAction::Edit { key, .. } => (Kind::Edit, Some(key.as_str())),
        ChatAction::Ephemeral { .. } | ChatAction::React { .. } => (Kind::Other, None),
    }
}

/// The actions that close a turn on the person's message: 👀 taken away, its outcome added.
#[must_use]
pub fn outcome_marks(target: &Target, message_id: &str, outcome: Mark) -> [ChatAction; 2] {
    [
        react(target, message_id, Mark::Received, false),
        react(target, message_id, outcome, true),
    ]
}
