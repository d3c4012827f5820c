//! A recording chat platform: the `Channel` a test hands the bridge, keeping every post and edit in
//! order, so tests can count messages created, edited, and caused by heartbeats.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chat_bridge::channel::{
    BoxFuture, Capabilities, Channel, DeliveryError, Message, Target, Tone,
};

/// One call the bridge made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// A new message with this id.
    Post(String, Message),
    /// An edit of message `id`.
    Edit(String, Message),
}

/// The recording platform.
#[derive(Debug, Default)]
pub struct Recorder {
    calls: Mutex<Vec<Call>>,
    next: AtomicU64,
    threadless: bool,
}

impl Recorder {
    /// A recorder that, like the console, has no threads (one conversation, told about the daemon
    /// connection in chat lines).
    #[must_use]
    pub fn threadless() -> Self {
        Self {
            threadless: true,
            ..Self::default()
        }
    }

    /// Every call so far.
    ///
    /// # Panics
    /// Never in practice (poisoned lock).
    #[must_use]
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().expect("lock").clone()
    }

    /// Messages created, in order.
    #[must_use]
    pub fn posts(&self) -> Vec<(String, Message)> {
        self.calls()
            .into_iter()
            .filter_map(|c| {
                if let Call::Post(id, m) = c {
                    Some((id, m))
                } else {
                    None
                }
            })
            .collect()
    }

    /// The latest state of each message, in creation order.
    #[must_use]
    pub fn latest(&self) -> Vec<(String, Message)> {
        let calls = self.calls();
        self.posts()
            .into_iter()
            .map(|(id, first)| {
                let last = calls
                    .iter()
                    .rev()
                    .find_map(|c| match c {
                        Call::Edit(e, m) if *e == id => Some(m.clone()),
                        _ => None,
                    })
                    .unwrap_or(first);
                (id, last)
            })
            .collect()
    }

    /// Edits of message `id`.
    #[must_use]
    pub fn edits_of(&self, id: &str) -> usize {
        self.calls()
            .iter()
            .filter(|c| matches!(c, Call::Edit(e, _) if e == id))
            .count()
    }

    /// Notices with `tone`.
    #[must_use]
    pub fn with_tone(&self, tone: Tone) -> Vec<Message> {
        self.latest()
            .into_iter()
            .map(|(_, m)| m)
            .filter(|m| m.tone == tone)
            .collect()
    }

    /// Waits until `pred` holds (30 s at most).
    ///
    /// # Panics
    /// When it does not.
    pub async fn wait_for(&self, what: &str, pred: impl Fn(&Self) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !pred(self) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}: {:#?}",
                self.calls()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Channel for Recorder {
    fn platform(&self) -> &'static str {
        "console"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            max_message_len: 40_000,
            answer_len: 40_000,
            output_cap: 3500,
            can_edit: true,
            has_buttons: true,
            has_threads: !self.threadless,
            has_reactions: false,
            takes_requests: false,
        }
    }

    fn post<'a>(
        &'a self,
        _target: &'a Target,
        message: &'a Message,
    ) -> BoxFuture<'a, Result<String, DeliveryError>> {
        Box::pin(async move {
            let id = format!("m{}", self.next.fetch_add(1, Ordering::SeqCst) + 1);
            self.calls
                .lock()
                .expect("lock")
                .push(Call::Post(id.clone(), message.clone()));
            Ok(id)
        })
    }

    fn edit<'a>(
        &'a self,
        _target: &'a Target,
        id: &'a str,
        message: &'a Message,
    ) -> BoxFuture<'a, Result<(), DeliveryError>> {
        Box::pin(async move {
            self.calls
                .lock()
                .expect("lock")
                .push(Call::Edit(id.to_owned(), message.clone()));
            Ok(())
        })
    }
}
