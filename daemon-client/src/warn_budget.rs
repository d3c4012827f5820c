//! How often one kind of warning is logged: a daemon that sends garbage must not flood the log
//! (F2 logs each malformed frame at warn; a hostile daemon sent 1,000 in a burst). The first few of
//! a minute are logged each, the rest are counted and summed up in one line when the next minute's
//! first one comes or the connection ends; the metrics count them all.

use std::time::Duration;

use tokio::time::Instant;

/// Lines a minute, at most.
pub(crate) const PER_MINUTE: u32 = 10;

const WINDOW: Duration = Duration::from_secs(60);

/// What to log for one more occurrence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Its own line; `skipped` occurrences of the last window went without one (say so first).
    Log {
        /// Left unlogged in the window before.
        skipped: u64,
    },
    /// Its own line, and from here on this window's are only counted (say so).
    LogLast,
    /// Counted, not logged.
    Count,
}

/// A budget of [`PER_MINUTE`] lines a minute.
#[derive(Debug)]
pub(crate) struct WarnBudget {
    since: Option<Instant>,
    logged: u32,
    skipped: u64,
}

impl WarnBudget {
    pub(crate) const fn new() -> Self {
        Self {
            since: None,
            logged: 0,
            skipped: 0,
        }
    }

    /// The occurrences left unlogged so far, taken (said when the connection ends, so a burst's
    /// count is not lost when no further one comes).
    pub(crate) fn take_skipped(&mut self) -> u64 {
        std::mem::take(&mut self.skipped)
    }

    /// One more occurrence at `now`.
    pub(crate) fn take(&mut self, now: Instant) -> Verdict {
        let mut skipped = 0;
        if self
            .since
            .is_none_or(|since| now.saturating_duration_since(since) >= WINDOW)
        {
            skipped = std::mem::take(&mut self.skipped);
            self.since = Some(now);
            self.logged = 0;
        }
        self.logged = self.logged.saturating_add(1);
        match self.logged {
            n if n < PER_MINUTE => Verdict::Log { skipped },
            n if n == PER_MINUTE => Verdict::LogLast,
            _ => {
                self.skipped += 1;
                Verdict::Count
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// F2: a burst gets ten lines, the last saying the rest are only counted; the next minute's
    /// first says how many went unlogged, and the budget starts again.
    #[test]
    fn f2_a_burst_of_warnings_is_logged_ten_a_minute_and_the_rest_summed_up() {
        let t0 = Instant::now();
        let mut b = WarnBudget::new();
        let verdicts: Vec<Verdict> = (0..1000).map(|_| b.take(t0)).collect();
        assert_eq!(
            verdicts
                .iter()
                .filter(|v| matches!(v, Verdict::Log { skipped: 0 }))
                .count(),
            9
        );
        assert_eq!(verdicts[9], Verdict::LogLast);
        assert!(verdicts[10..].iter().all(|v| *v == Verdict::Count));
        assert_eq!(
            b.take(t0 + Duration::from_secs(59)),
            Verdict::Count,
            "still the same minute"
        );
        assert_eq!(
            b.take(t0 + Duration::from_secs(61)),
            Verdict::Log { skipped: 991 },
            "the next minute's first line says how many went without one"
        );
        assert_eq!(
            b.take(t0 + Duration::from_secs(62)),
            Verdict::Log { skipped: 0 }
        );
        for _ in 0..20 {
            b.take(t0 + Duration::from_secs(63));
        }
        // Two logged in this minute already: eight more are, twelve are not.
        assert_eq!(b.take_skipped(), 12, "taken when the connection ends");
        assert_eq!(b.take_skipped(), 0, "once");
    }
}
