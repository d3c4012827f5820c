//! Inbox bookkeeping inside a conversation (D2, S4): which inbox entries the next committed
//! transaction marks handled — the event being handled, or queued prompts dropped by `/cancel`. An
//! entry is marked in the transaction that acts on it, so a crash before it leaves the event in
//! the inbox for the next start and a crash after it never runs it twice. Pure.

/// An inbound event's inbox key: (platform, event id).
pub type EventKey = (String, String);

/// Entries waiting to be marked handled by the next commit.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Marks {
    keys: Vec<EventKey>,
}

impl Marks {
    /// Adds `event` (once) for the next commit to mark.
    pub fn add(&mut self, event: Option<EventKey>) {
        if let Some(event) = event
            && !self.keys.contains(&event)
        {
            self.keys.push(event);
        }
    }

    /// Removes `event`; whether it was there.
    pub fn take(&mut self, event: &EventKey) -> bool {
        let before = self.keys.len();
        self.keys.retain(|m| m != event);
        self.keys.len() != before
    }

    /// What the next commit marks.
    #[must_use]
    pub fn pending(&self) -> Vec<EventKey> {
        self.keys.clone()
    }

    /// `done` were marked by a committed transaction.
    pub fn committed(&mut self, done: &[EventKey]) {
        self.keys.retain(|m| !done.contains(m));
    }

    /// Nothing waits to be marked.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}
