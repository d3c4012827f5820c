//! Wall-clock time, injected: the store's `*_at` columns hold Unix milliseconds, and the code that
//! writes or compares them (the outbox's retry times, the inbox's keep window, the HTTP stats) asks a
//! [`Clock`] for "now", so tests can set it ([`ManualClock`]) instead of sleeping.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// Where "now" comes from.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Unix time in milliseconds.
    fn now_ms(&self) -> i64;
}

/// The system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        crate::store::now_ms()
    }
}

/// A clock that moves only when told to (tests).
#[derive(Debug, Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    /// A clock reading `ms`.
    #[must_use]
    pub fn at(ms: i64) -> Self {
        Self(AtomicI64::new(ms))
    }

    /// Moves it forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.0.fetch_add(by, Ordering::SeqCst);
    }

    /// Sets it to `ms`.
    pub fn set(&self, ms: i64) {
        self.0.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl<C: Clock + ?Sized> Clock for std::sync::Arc<C> {
    fn now_ms(&self) -> i64 {
        (**self).now_ms()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let c = ManualClock::at(1_000);
        assert_eq!(c.now_ms(), 1_000);
        c.advance(Duration::from_millis(250));
        assert_eq!(c.now_ms(), 1_250);
        c.set(5);
        assert_eq!(c.now_ms(), 5);
    }

    #[test]
    fn the_system_clock_reads_unix_milliseconds() {
        let now = SystemClock.now_ms();
        // 2020-01-01 and 2100-01-01: a reading in seconds or nanoseconds would fall outside.
        assert!(
            (1_577_836_800_000..4_102_444_800_000).contains(&now),
            "{now}"
        );
    }
}
