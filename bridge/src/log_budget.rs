//! A budget for the database driver's own log lines. sqlx warns once per pooled connection it finds
//! broken when it is handed back and once per acquire that waited past its threshold: while the
//! database is away that is hundreds of lines a minute, and the lines an on-call needs — the
//! bridge's own "the database failed this step for the moment; retrying it …" and "… went through"
//! — drown in them. Each of sqlx's call sites may log [`PER_WINDOW`] lines a minute; the rest of
//! that minute is dropped. The bridge's own lines
//! are never counted by it; the few of them that would come once per event while the database is
//! away (an event answered 503, an outbox step retried) go through a [`Repeats`] instead: the first
//! is logged, then one line every [`REPEAT_EVERY`] saying how many were left out.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing::Metadata;
use tracing::callsite::Identifier;
use tracing::subscriber::Interest;
use tracing_subscriber::layer::{Context, Filter};

/// Lines one sqlx call site may log in a window.
pub const PER_WINDOW: u32 = 3;

/// The window the budget is counted over.
pub const WINDOW: Duration = Duration::from_secs(60);

/// How often a line kept by [`Repeats`] is logged at most.
pub const REPEAT_EVERY: Duration = Duration::from_secs(10);

/// One of the bridge's own lines that comes once per event or per retry while a fault lasts: logged
/// the first time, then at most once every [`REPEAT_EVERY`], with how many occurrences were left
/// out since the last line logged (`left_out`), so the log says how often it happens without
/// saying it every time.
#[derive(Debug)]
pub struct Repeats {
    state: Mutex<Option<(Instant, u64)>>,
}

impl Repeats {
    /// A line not logged yet.
    #[must_use]
    pub const fn new() -> Self {
        Self {
            state: Mutex::new(None),
        }
    }

    /// `Some(left_out)` when this occurrence, at `now`, is to be logged (with how many were not
    /// since the last one that was); `None` when it is left out.
    pub fn due(&self, now: Instant) -> Option<u64> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match &mut *state {
            Some((at, left_out)) if now.saturating_duration_since(*at) < REPEAT_EVERY => {
                *left_out += 1;
                None
            }
            slot => {
                let left_out = slot.map_or(0, |(_, n)| n);
                *slot = Some((now, 0));
                Some(left_out)
            }
        }
    }
}

impl Default for Repeats {
    fn default() -> Self {
        Self::new()
    }
}

/// The filter (see the module's documentation).
#[derive(Debug, Default)]
pub struct DriverBudget {
    seen: Mutex<HashMap<Identifier, (Instant, u32)>>,
}

impl DriverBudget {
    /// Whether `target` is the driver's (budgeted).
    #[must_use]
    pub fn budgeted(target: &str) -> bool {
        target == "sqlx" || target.starts_with("sqlx::") || target.starts_with("sqlx_")
    }

    /// Whether a line of call site `site` may be logged at `now`.
    pub fn allow(&self, site: Identifier, now: Instant) -> bool {
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (since, count) = seen.entry(site).or_insert((now, 0));
        if now.saturating_duration_since(*since) >= WINDOW {
            (*since, *count) = (now, 0);
        }
        *count += 1;
        *count <= PER_WINDOW
    }
}

impl<S> Filter<S> for DriverBudget {
    fn enabled(&self, meta: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        !meta.is_event()
            || !Self::budgeted(meta.target())
            || self.allow(meta.callsite(), Instant::now())
    }

    fn max_level_hint(&self) -> Option<tracing_subscriber::filter::LevelFilter> {
        // Levels are the other filters' business. Without a hint here, combined with them (`and`)
        // in the binary's subscriber on PostgreSQL, its info lines were dropped (`pg_notices.rs` checks).
        Some(tracing_subscriber::filter::LevelFilter::TRACE)
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        // Decided line by line for the driver's call sites; the rest always pass this filter.
        if Self::budgeted(meta.target()) {
            Interest::sometimes()
        } else {
            Interest::always()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    /// Counts the events that reach it, by target.
    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<Vec<String>>>);

    impl<S: tracing::Subscriber> Layer<S> for Seen {
        fn on_event(&self, e: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
            self.0
                .lock()
                .expect("lock")
                .push(e.metadata().target().to_owned());
        }
    }

    #[test]
    fn the_drivers_warnings_are_limited_per_call_site_and_the_bridges_own_lines_never() {
        let seen = Seen::default();
        let subscriber =
            tracing_subscriber::registry().with(seen.clone().with_filter(DriverBudget::default()));
        tracing::subscriber::with_default(subscriber, || {
            for _ in 0..50 {
                tracing::warn!(target: "sqlx::pool::acquire", "acquired connection, but time to acquire exceeded slow threshold");
                tracing::warn!(target: "sqlx_core::pool::connection", "error occurred while testing the connection on-release");
                tracing::warn!(target: "chat_bridge::conversation", "the database failed this step for the moment; retrying it until it goes through");
            }
        });
        let seen = seen.0.lock().expect("lock").clone();
        let count = |t: &str| seen.iter().filter(|s| *s == t).count();
        assert_eq!(count("sqlx::pool::acquire"), PER_WINDOW as usize);
        assert_eq!(count("sqlx_core::pool::connection"), PER_WINDOW as usize);
        assert_eq!(count("chat_bridge::conversation"), 50);
    }

    #[test]
    fn a_driver_call_site_logs_again_once_its_window_has_passed() {
        // A real call site's identifier, taken from an event as it passes.
        #[derive(Clone, Default)]
        struct Site(Arc<Mutex<Option<Identifier>>>);
        impl<S: tracing::Subscriber> Layer<S> for Site {
            fn on_event(
                &self,
                e: &tracing::Event<'_>,
                _: tracing_subscriber::layer::Context<'_, S>,
            ) {
                *self.0.lock().expect("lock") = Some(e.metadata().callsite());
            }
        }
        let site = Site::default();
        tracing::subscriber::with_default(
            tracing_subscriber::registry().with(site.clone()),
            || {
                tracing::warn!(target: "sqlx::pool::acquire", "slow");
            },
        );
        let id = site
            .0
            .lock()
            .expect("lock")
            .clone()
            .expect("the event's call site");
        let budget = DriverBudget::default();
        let t0 = Instant::now();
        let first: Vec<bool> = (0..5).map(|_| budget.allow(id.clone(), t0)).collect();
        assert_eq!(first, [true, true, true, false, false]);
        assert!(!budget.allow(id.clone(), t0 + WINDOW - Duration::from_millis(1)));
        assert!(budget.allow(id, t0 + WINDOW), "a new window, a new budget");
    }

    /// On-call's log while the database is away: a line that would come once per event is logged
    /// the first time, then once per REPEAT_EVERY with the count of those left out meanwhile.
    #[test]
    fn a_repeated_line_is_logged_once_per_interval_with_the_count_left_out() {
        let r = Repeats::new();
        let t0 = Instant::now();
        assert_eq!(r.due(t0), Some(0), "the first is logged");
        for i in 1..=4 {
            assert_eq!(r.due(t0 + Duration::from_millis(i)), None);
        }
        assert_eq!(r.due(t0 + REPEAT_EVERY - Duration::from_millis(1)), None);
        assert_eq!(
            r.due(t0 + REPEAT_EVERY),
            Some(5),
            "the next line says five were left out"
        );
        assert_eq!(r.due(t0 + REPEAT_EVERY + Duration::from_millis(1)), None);
        assert_eq!(r.due(t0 + REPEAT_EVERY * 3), Some(1));
    }
}
