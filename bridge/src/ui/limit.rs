//! Sign-in attempts with a token are limited per client address: after `http.ui_login_attempts`
//! wrong tokens within `http.ui_login_window`, that address is refused (429 with `Retry-After`)
//! until the oldest of them is a window old — the token cannot be guessed at line speed. The table
//! is bounded ([`MAX_CLIENTS`] addresses): when it is full, addresses whose failures have all aged
//! out go first, then the one quiet the longest. IPv6 addresses count per /64, the block one
//! client usually holds.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use crate::core::lock;

/// At most this many client addresses are remembered.
pub const MAX_CLIENTS: usize = 10_000;

/// The failures of one client address.
#[derive(Debug, Default)]
struct Failures {
    /// When each wrong token came (unix ms), oldest first; at most `attempts` kept.
    at: VecDeque<i64>,
    /// The refusal of this block was logged at warn (later ones go to debug).
    warned: bool,
}

/// What a sign-in attempt may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Check its token.
    Go,
    /// Refused unchecked: this many seconds until the address may try again; `first`: the first
    /// refusal of this block (log it at warn).
    Refused {
        /// Seconds to wait (`Retry-After`).
        retry_after_s: u64,
        /// The first refusal of this block.
        first: bool,
    },
}

/// The per-address limit on wrong tokens.
#[derive(Debug)]
pub struct LoginLimit {
    attempts: usize,
    window_ms: i64,
    clients: Mutex<HashMap<IpAddr, Failures>>,
    cap: usize,
}

/// The address a client is counted under: IPv4 as is (also when mapped into IPv6), IPv6 by /64.
#[must_use]
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut s = v6.segments();
                s[4..].fill(0);
                IpAddr::V6(s.into())
            }
        },
    }
}

/// The client's address: from `client_ip_header` when it is set and the request carries a
/// parseable one (of `X-Forwarded-For`, the last entry: the one the trusted proxy appended, not those
/// the client sent), else the TCP peer's (every client counts as one when the server was started
/// without connection info).
#[must_use]
pub fn client_ip(
    client_ip_header: Option<&axum::http::HeaderName>,
    headers: &axum::http::HeaderMap,
    peer: Option<std::net::SocketAddr>,
) -> IpAddr {
    let from_proxy = client_ip_header.and_then(|h| {
        let v = headers.get_all(h).iter().next_back()?.to_str().ok()?;
        v.rsplit(',').next()?.trim().parse().ok()
    });
    from_proxy
        .unwrap_or_else(|| peer.map_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), |p| p.ip()))
}

impl LoginLimit {
    /// At most `attempts` wrong tokens per address within `window` (each at least 1).
    #[must_use]
    pub fn new(attempts: u32, window: Duration) -> Self {
        Self::with_cap(attempts, window, MAX_CLIENTS)
    }

    /// The same, remembering at most `cap` addresses.
    #[must_use]
    pub fn with_cap(attempts: u32, window: Duration, cap: usize) -> Self {
        Self {
            attempts: usize::try_from(attempts.max(1)).unwrap_or(usize::MAX),
            window_ms: i64::try_from(window.as_millis()).unwrap_or(i64::MAX).max(1),
            clients: Mutex::new(HashMap::new()),
            cap: cap.max(1),
        }
    }

    fn prune(&self, f: &mut Failures, now: i64) {
        while f.at.front().is_some_and(|&t| t <= now - self.window_ms) {
            f.at.pop_front();
        }
        if f.at.len() < self.attempts {
            f.warned = false;
        }
    }

    /// Whether `ip` may try a token at `now` (unix ms).
    pub fn check(&self, ip: IpAddr, now: i64) -> Verdict {
        let mut clients = lock(&self.clients);
        let Some(f) = clients.get_mut(&client_key(ip)) else {
            return Verdict::Go;
        };
        self.prune(f, now);
        match f.at.front() {
            Some(&oldest) if f.at.len() >= self.attempts => {
                let wait_ms = (oldest + self.window_ms - now).max(1);
                let first = !f.warned;
                f.warned = true;
                Verdict::Refused {
                    retry_after_s: u64::try_from(wait_ms).unwrap_or(1).div_ceil(1000),
                    first,
                }
            }
            _ => Verdict::Go,
        }
    }

    /// `ip` gave a wrong token at `now`.
    pub fn failed(&self, ip: IpAddr, now: i64) {
        let key = client_key(ip);
        let mut clients = lock(&self.clients);
        if !clients.contains_key(&key) && clients.len() >= self.cap {
            clients.retain(|_, f| f.at.back().is_some_and(|&t| t > now - self.window_ms));
            if clients.len() >= self.cap {
                let quietest = clients
                    .iter()
                    .min_by_key(|(_, f)| f.at.back().copied().unwrap_or(i64::MIN))
                    .map(|(k, _)| *k);
                if let Some(k) = quietest {
                    clients.remove(&k);
                }
            }
        }
        let f = clients.entry(key).or_default();
        self.prune(f, now);
        f.at.push_back(now);
        while f.at.len() > self.attempts {
            f.at.pop_front();
        }
    }

    /// `ip` signed in: its failures are forgotten.
    pub fn succeeded(&self, ip: IpAddr) {
        lock(&self.clients).remove(&client_key(ip));
    }

    /// Addresses remembered now.
    #[must_use]
    pub fn len(&self) -> usize {
        lock(&self.clients).len()
    }

    /// No address is remembered.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn s_login1_the_nth_wrong_token_blocks_the_address_for_the_rest_of_the_window() {
        let l = LoginLimit::new(3, Duration::from_secs(60));
        let (a, b) = (ip("192.0.2.1"), ip("192.0.2.2"));
        for t in [0, 1_000, 2_000] {
            assert_eq!(l.check(a, t), Verdict::Go);
            l.failed(a, t);
        }
        assert_eq!(
            l.check(a, 2_500),
            Verdict::Refused {
                retry_after_s: 58,
                first: true
            }
        );
        assert_eq!(
            l.check(a, 30_000),
            Verdict::Refused {
                retry_after_s: 30,
                first: false
            },
            "logged once per block"
        );
        assert_eq!(l.check(b, 2_500), Verdict::Go, "another address is not");
        assert_eq!(
            l.check(a, 60_000),
            Verdict::Go,
            "the oldest failure left the window"
        );
        l.failed(a, 60_000);
        assert!(matches!(
            l.check(a, 60_001),
            Verdict::Refused { first: true, .. }
        ));
        l.succeeded(a);
        assert_eq!(l.check(a, 60_002), Verdict::Go, "a success forgets");
    }

    #[test]
    fn s_login1_ipv6_counts_per_64_and_mapped_ipv4_as_ipv4() {
        let l = LoginLimit::new(2, Duration::from_secs(60));
        l.failed(ip("2001:db8:1:2::1"), 0);
        l.failed(ip("2001:db8:1:2:ffff::9"), 0);
        assert!(matches!(
            l.check(ip("2001:db8:1:2::77"), 1),
            Verdict::Refused { .. }
        ));
        assert_eq!(l.check(ip("2001:db8:1:3::1"), 1), Verdict::Go);
        l.failed(ip("::ffff:192.0.2.9"), 0);
        l.failed(ip("192.0.2.9"), 0);
        assert!(matches!(
            l.check(ip("192.0.2.9"), 1),
            Verdict::Refused { .. }
        ));
    }

    #[test]
    fn s_login1_the_table_is_bounded_and_drops_aged_out_then_quietest_addresses() {
        let l = LoginLimit::with_cap(2, Duration::from_secs(60), 3);
        l.failed(ip("10.0.0.1"), 0);
        l.failed(ip("10.0.0.2"), 70_000);
        l.failed(ip("10.0.0.3"), 71_000);
        l.failed(ip("10.0.0.4"), 72_000);
        assert_eq!(l.len(), 3, "10.0.0.1 aged out and went first");
        l.failed(ip("10.0.0.5"), 73_000);
        assert_eq!(l.len(), 3);
        l.failed(ip("10.0.0.2"), 73_500);
        assert_eq!(
            l.check(ip("10.0.0.2"), 74_000),
            Verdict::Go,
            "the quietest (10.0.0.2) was dropped to make room"
        );
        for i in 0..1000 {
            l.failed(ip(&format!("10.1.{}.{}", i / 250, i % 250)), 80_000 + i);
        }
        assert_eq!(l.len(), 3, "never more than the cap");
    }
}
