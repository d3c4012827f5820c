//! Steer or queue: what a prompt that arrives while a turn runs does (`turns.while_busy`, and
//! `/steer <text>` for one message). Pure.
//!
//! - `queue` (the default): it waits its turn behind the running one.
//! - `steer`: the running turn is cancelled and the new message runs next, with a note that the
//!   previous request was interrupted (steered messages keep their own order).
//! - `collect`: everything that arrives meanwhile is merged into one prompt for the next turn.

use serde::{Deserialize, Serialize};

use super::inbox::EventKey;
use super::turn::Queued;

/// `turns.while_busy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WhileBusy {
    /// Wait behind the running turn.
    #[default]
    Queue,
    /// Cancel the running turn, then run the new message.
    Steer,
    /// Merge what arrives into the next prompt.
    Collect,
}

/// What the agent is told first when its previous turn was cancelled for this message.
pub const STEER_NOTE: &str = "(Your previous request was interrupted by this message.)";

/// `/steer` with nothing after it.
pub const STEER_USAGE: &str =
    "Usage: `/steer <message>` — cancels the running turn and runs this message next.";

impl Queued {
    /// A prompt with no note and nothing merged into it.
    #[must_use]
    pub fn new(
        user: String,
        text: String,
        message_id: Option<String>,
        event: Option<EventKey>,
    ) -> Self {
        Self {
            user,
            text,
            message_id,
            event,
            files: Vec::new(),
            note: None,
            merged: Vec::new(),
        }
    }

    /// The files attached to it and to the messages merged into it, in order.
    #[must_use]
    pub fn all_files(&self) -> Vec<crate::channel::Attachment> {
        self.files
            .iter()
            .chain(self.merged.iter().flat_map(|m| m.files.iter()))
            .cloned()
            .collect()
    }

    /// Whether it was sent to steer (it cancels the running turn and goes ahead of the queue).
    #[must_use]
    pub fn steers(&self) -> bool {
        self.note.is_some()
    }

    /// Its inbox entries: its own and those of the messages merged into it.
    #[must_use]
    pub fn events(&self) -> Vec<EventKey> {
        self.event
            .iter()
            .chain(self.merged.iter().filter_map(|m| m.event.as_ref()))
            .cloned()
            .collect()
    }

    /// The platform ids of the messages merged into it (they get the turn's mark too).
    #[must_use]
    pub fn merged_messages(&self) -> Vec<String> {
        self.merged
            .iter()
            .filter_map(|m| m.message_id.clone())
            .collect()
    }

    /// Its parts in order, (who, what): itself, then what was merged into it.
    #[must_use]
    pub fn parts(&self) -> Vec<(&str, &str)> {
        std::iter::once((self.user.as_str(), self.text.as_str()))
            .chain(
                self.merged
                    .iter()
                    .map(|m| (m.user.as_str(), m.text.as_str())),
            )
            .collect()
    }

    /// The text the history keeps: the parts as typed, one per paragraph.
    #[must_use]
    pub fn typed(&self) -> String {
        self.parts()
            .into_iter()
            .map(|(_, t)| t)
            .collect::<Vec<_>>()
            .join("\n\n")
    }

    /// The text the agent receives: each part labelled by `label(user, text)` (the speaker, or as
    /// typed), parts apart by `sep`, the steer note first when there is one and `notes` is on.
    pub fn for_agent(
        &self,
        sep: &str,
        notes: bool,
        label: impl Fn(&str, &str) -> String,
    ) -> String {
        let body = self
            .parts()
            .into_iter()
            .map(|(u, t)| label(u, t))
            .collect::<Vec<_>>()
            .join(sep);
        match &self.note {
            Some(note) if notes => format!("{note}\n\n{body}"),
            _ => body,
        }
    }
}
