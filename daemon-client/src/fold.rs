//! Heartbeats read in one burst, folded per call before they are handed on (F1, P2).
//!
//! A heartbeat says only "this call is alive" (and its latest progress). When the connection has
//! more frames waiting than the bridge takes one by one, the heartbeats of each call among them are
//! handed on as one [`DaemonEvent::ToolProgress`] whose `beats` counts them and whose progress is
//! the last one's. Nothing else is folded, and nothing overtakes: any other event first hands on
//! every heartbeat folded before it, so each session's events keep their order. A heartbeat that
//! arrives alone is handed on alone, at once: the connection hands the fold on whenever it has no
//! frame waiting, and at [`FOLD_AT_MOST`] frames in any case.
//!
//! The fold lives in the classifier, behind its lock: the connection's reader folds a heartbeat of
//! an open call as it classifies it ([`Fold::beat`]), through the place kept with the call in the
//! classifier's table ([`FoldSlot`]) — no event made per frame, no second lookup. An event made
//! elsewhere (while a session replays its history, the connection marks its frames first) is
//! folded by [`Fold::add`], with its own index; a call folded both ways in one burst is handed on
//! as two events, each with its count (the bridge adds them up).

use std::cell::Cell;
use std::collections::HashMap;

use crate::event::{DaemonEvent, ShellProgress};
use crate::ids::{SessionId, ToolCallId};

/// Heartbeat frames folded before they are handed on even while more are waiting: a few
/// milliseconds of a daemon that sends a million a second (each fold handed on costs the router
/// and every conversation in it a step; 1,024 made those steps a fifth of the ingest bench).
pub(crate) const FOLD_AT_MOST: u32 = 4096;

/// Heartbeats waiting to be handed on, one event per call, in the order their calls first beat.
#[derive(Debug)]
pub(crate) struct Fold {
    events: Vec<DaemonEvent>,
    index: HashMap<(SessionId, ToolCallId), usize, foldhash::fast::RandomState>,
    frames: u32,
    /// Counts the takes, from 1: a [`FoldSlot`] of an earlier one (or a new one, 0) is stale.
    generation: u64,
}

impl Default for Fold {
    fn default() -> Self {
        Self {
            events: Vec::new(),
            index: HashMap::default(),
            frames: 0,
            generation: 1,
        }
    }
}

/// Where an open call's heartbeats sit in the fold, kept with the call by the classifier so that a
/// heartbeat is folded without a lookup of its own ([`Fold::beat`]): the fold's generation it was
/// last folded in, and its event's place then.
#[derive(Debug, Default)]
pub(crate) struct FoldSlot {
    generation: Cell<u64>,
    at: Cell<usize>,
}

impl Fold {
    /// Folds in `beats` heartbeats of `session`'s open call `call`, whose slot is `slot`: added to
    /// the call's event when the slot says it has one in this fold, else a new event for it.
    pub(crate) fn beat(
        &mut self,
        session: &SessionId,
        call: &ToolCallId,
        slot: &FoldSlot,
        progress: ShellProgress,
        beats: u32,
    ) {
        self.frames = self.frames.saturating_add(beats);
        if slot.generation.get() == self.generation
            && let Some(DaemonEvent::ToolProgress {
                progress: last,
                beats: count,
                ..
            }) = self.events.get_mut(slot.at.get())
        {
            *last = progress;
            *count = count.saturating_add(beats);
            return;
        }
        slot.generation.set(self.generation);
        slot.at.set(self.events.len());
        self.events.push(DaemonEvent::ToolProgress {
            session: session.clone(),
            call: call.clone(),
            progress,
            beats,
        });
    }

    /// Folds in a heartbeat; gives any other event back.
    pub(crate) fn add(&mut self, event: DaemonEvent) -> Option<DaemonEvent> {
        let DaemonEvent::ToolProgress {
            session,
            call,
            progress,
            beats,
        } = event
        else {
            return Some(event);
        };
        self.frames = self.frames.saturating_add(beats);
        let key = (session, call);
        if let Some(&i) = self.index.get(&key)
            && let Some(DaemonEvent::ToolProgress {
                progress: last,
                beats: count,
                ..
            }) = self.events.get_mut(i)
        {
            *last = progress;
            *count = count.saturating_add(beats);
            return None;
        }
        self.index.insert(key.clone(), self.events.len());
        let (session, call) = key;
        self.events.push(DaemonEvent::ToolProgress {
            session,
            call,
            progress,
            beats,
        });
        None
    }

    /// Whether it holds as many frames as are folded at most.
    pub(crate) fn full(&self) -> bool {
        self.frames >= FOLD_AT_MOST
    }

    /// Whether it holds nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Everything folded, in order; it is empty afterwards.
    pub(crate) fn take(&mut self) -> std::vec::Drain<'_, DaemonEvent> {
        self.index.clear();
        self.frames = 0;
        self.generation += 1;
        self.events.drain(..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat(session: &str, call: &str, elapsed: u64) -> DaemonEvent {
        DaemonEvent::ToolProgress {
            session: SessionId::parse(session).unwrap(),
            call: ToolCallId::parse(call).unwrap(),
            progress: ShellProgress {
                elapsed_ms: Some(elapsed),
                ..ShellProgress::default()
            },
            beats: 1,
        }
    }

    fn summary(events: &[DaemonEvent]) -> Vec<(String, String, u32, Option<u64>)> {
        events
            .iter()
            .map(|e| match e {
                DaemonEvent::ToolProgress {
                    session,
                    call,
                    progress,
                    beats,
                } => (
                    session.to_string(),
                    call.to_string(),
                    *beats,
                    progress.elapsed_ms,
                ),
                other => panic!("only heartbeats are folded: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn f1_heartbeats_of_one_call_fold_into_one_with_their_count_and_the_last_progress() {
        let mut fold = Fold::default();
        for (s, c, t) in [
            ("s1", "c1", 1),
            ("s2", "c1", 2),
            ("s1", "c1", 3),
            ("s1", "c2", 4),
            ("s2", "c1", 5),
            ("s1", "c1", 6),
        ] {
            assert!(fold.add(beat(s, c, t)).is_none());
        }
        let events: Vec<_> = fold.take().collect();
        assert_eq!(
            summary(&events),
            [
                ("s1".into(), "c1".into(), 3, Some(6)),
                ("s2".into(), "c1".into(), 2, Some(5)),
                ("s1".into(), "c2".into(), 1, Some(4)),
            ],
            "one event per call, in the order the calls first beat; a call id is its session's"
        );
        assert!(fold.is_empty());
        assert!(fold.add(beat("s1", "c1", 7)).is_none());
        assert_eq!(
            summary(&fold.take().collect::<Vec<_>>()),
            [("s1".into(), "c1".into(), 1, Some(7))],
            "after a take the count starts again"
        );
    }

    #[test]
    fn f1_anything_but_a_heartbeat_is_given_back_and_a_full_fold_says_so() {
        let mut fold = Fold::default();
        let done = DaemonEvent::TurnEnded {
            session: SessionId::parse("s1").unwrap(),
            stop_reason: crate::event::StopReason::EndTurn,
        };
        assert!(matches!(
            fold.add(done),
            Some(DaemonEvent::TurnEnded { .. })
        ));
        assert!(fold.is_empty());
        for i in 0..FOLD_AT_MOST {
            assert!(!fold.full(), "not full after {i} frames");
            assert!(fold.add(beat("s1", "c1", u64::from(i))).is_none());
        }
        assert!(fold.full());
        assert_eq!(
            summary(&fold.take().collect::<Vec<_>>()),
            [(
                "s1".into(),
                "c1".into(),
                FOLD_AT_MOST,
                Some(u64::from(FOLD_AT_MOST - 1))
            )]
        );
        assert!(!fold.full());
    }
}
