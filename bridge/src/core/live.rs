//! What runs right now, as this replica's conversations hold it in memory: each open turn, its
//! running tool calls and their liveness (the last heartbeat, when the turn would count as stalled).
//! The history pages' "running now" view reads it instead of the store, so it is live and costs the
//! database nothing.
//!
//! Each conversation's runner publishes its own entry after every step it takes (a message, a
//! daemon frame, a timer); the [`Board`] keeps the latest per conversation and bumps a version on a
//! [`tokio::sync::watch`] channel when an entry changed. A reader subscribes, waits for a new
//! version and takes a [`Board::snapshot`]. Publishing is a short lock and a comparison — never held
//! across an await — so a thousand sessions heartbeating every second cost next to nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use daemon_client::ShellProgress;
use tokio::sync::watch;

use super::lock;

/// A running tool call of an open turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveTool {
    /// The agent's call id, scoped by its session (tells calls apart on the board).
    pub id: String,
    /// Its stored id (`tool_calls.id`: the tool call's page), once stored; `None`: no link yet.
    pub stored_id: Option<String>,
    /// Its title (the command, for a shell).
    pub title: String,
    /// When the bridge saw it start (unix ms).
    pub started_at: i64,
    /// Heartbeats this replica has seen for it.
    pub heartbeats: u64,
    /// When the last one arrived (unix ms).
    pub last_heartbeat: Option<i64>,
    /// What the last one said (elapsed, output age, lines, bytes, timeout).
    pub progress: Option<ShellProgress>,
    /// It waits for an approval: not running yet.
    pub awaiting_approval: bool,
}

/// An open turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveTurn {
    /// Its conversation's id.
    pub conversation_id: String,
    /// The turn's id.
    pub turn_id: String,
    /// 1, 2, … within the conversation.
    pub seq: i64,
    /// The conversation's platform.
    pub platform: String,
    /// The conversation's project.
    pub project: String,
    /// The conversation's channel.
    pub channel: String,
    /// Who asked.
    pub user: String,
    /// The prompt (shown redacted and shortened).
    pub prompt: String,
    /// When it started (unix ms).
    pub started_at: i64,
    /// When the last frame of its session arrived (unix ms): heartbeats re-arm the idle limit (L1).
    pub last_frame: i64,
    /// When the binding limit fires if nothing arrives meanwhile (unix ms; L1, L2).
    pub stall_at: Option<i64>,
    /// A limit fired (L3).
    pub stalled: bool,
    /// `/cancel` was sent and the daemon has not ended the turn yet.
    pub cancelling: bool,
    /// Prompts waiting behind it.
    pub queued: usize,
    /// Its running tool calls, oldest first.
    pub tools: Vec<LiveTool>,
}

/// What this replica runs now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Bumped on every change.
    pub version: u64,
    /// Open turns, oldest first.
    pub turns: Vec<LiveTurn>,
}

/// The open turns of this replica, one entry per conversation, and a version readers wait on.
#[derive(Debug)]
pub struct Board {
    turns: Mutex<HashMap<String, (u64, LiveTurn)>>,
    version: watch::Sender<u64>,
    runners: AtomicU64,
}

impl Default for Board {
    fn default() -> Self {
        Self {
            turns: Mutex::new(HashMap::new()),
            version: watch::Sender::new(0),
            runners: AtomicU64::new(0),
        }
    }
}

impl Board {
    /// A new board, shared.
    #[must_use]
    pub fn shared() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A token for one runner: its entries are its own, so a runner letting go never removes the
    /// entry of the one that took its conversation over.
    #[must_use]
    pub fn runner(&self) -> u64 {
        self.runners.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// `runner`'s conversation `conversation` now has `turn` open (`None`: none). Readers are
    /// woken only when that changes something.
    pub fn publish(&self, runner: u64, conversation: &str, turn: Option<LiveTurn>) {
        let changed = {
            let mut turns = lock(&self.turns);
            match turn {
                Some(t) => match turns.get_mut(conversation) {
                    Some((owner, old)) if *old == t && *owner == runner => false,
                    Some(entry) => {
                        *entry = (runner, t);
                        true
                    }
                    None => {
                        turns.insert(conversation.to_owned(), (runner, t));
                        true
                    }
                },
                None => match turns.get(conversation) {
                    Some((owner, _)) if *owner == runner => {
                        turns.remove(conversation);
                        true
                    }
                    _ => false,
                },
            }
        };
        if changed {
            // Nobody waiting (no running view open): the version moves without waking anyone.
            let watched = self.version.receiver_count() > 0;
            self.version.send_if_modified(|v| {
                *v += 1;
                watched
            });
        }
    }

    /// Wakes on every change: `changed()` on it, then [`Board::snapshot`].
    #[must_use]
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// The open turns now, oldest first.
    #[must_use]
    pub fn snapshot(&self) -> Snapshot {
        let version = *self.version.borrow();
        let mut turns: Vec<LiveTurn> = lock(&self.turns).values().map(|(_, t)| t.clone()).collect();
        turns.sort_by(|a, b| {
            (a.started_at, &a.conversation_id).cmp(&(b.started_at, &b.conversation_id))
        });
        Snapshot { version, turns }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(conv: &str, started_at: i64) -> LiveTurn {
        LiveTurn {
            conversation_id: conv.into(),
            turn_id: format!("{conv}-t"),
            seq: 1,
            platform: "console".into(),
            project: "default".into(),
            channel: "c".into(),
            user: "alice".into(),
            prompt: "sleep 5".into(),
            started_at,
            last_frame: started_at,
            stall_at: None,
            stalled: false,
            cancelling: false,
            queued: 0,
            tools: Vec::new(),
        }
    }

    #[test]
    fn a_change_bumps_the_version_and_a_repeat_does_not() {
        let b = Board::default();
        let rx = b.subscribe();
        let r = b.runner();
        b.publish(r, "c2", Some(turn("c2", 20)));
        b.publish(r, "c1", Some(turn("c1", 10)));
        assert_eq!(*rx.borrow(), 2);
        b.publish(r, "c1", Some(turn("c1", 10)));
        b.publish(r, "c3", None);
        assert_eq!(*rx.borrow(), 2, "nothing changed");
        let s = b.snapshot();
        assert_eq!(s.version, 2);
        assert_eq!(
            s.turns
                .iter()
                .map(|t| t.conversation_id.as_str())
                .collect::<Vec<_>>(),
            ["c1", "c2"],
            "oldest first"
        );
        let mut later = turn("c1", 10);
        later.tools.push(LiveTool {
            id: "x".into(),
            title: "sleep 5".into(),
            started_at: 11,
            heartbeats: 1,
            last_heartbeat: Some(12),
            progress: None,
            awaiting_approval: false,
            stored_id: None,
        });
        b.publish(r, "c1", Some(later));
        assert_eq!(*rx.borrow(), 3);
        b.publish(r, "c1", None);
        assert_eq!(b.snapshot().turns.len(), 1);
    }

    #[test]
    fn a_runner_never_removes_the_entry_of_the_runner_that_took_over() {
        let b = Board::default();
        let (old, new) = (b.runner(), b.runner());
        b.publish(old, "c1", Some(turn("c1", 10)));
        b.publish(new, "c1", Some(turn("c1", 10)));
        b.publish(old, "c1", None);
        assert_eq!(b.snapshot().turns.len(), 1);
        b.publish(new, "c1", None);
        assert!(b.snapshot().turns.is_empty());
    }
}
