//! The UI's session cookie: `<expiry ms>.<nonce>.<HMAC-SHA256>` under a key derived from the API
//! token — nothing stored, valid on every replica, checked in constant time, and void once it
//! expires or the token is rotated. Signing out also voids the cookie on the replica that served the
//! sign-out (a bounded in-memory list until the cookie would have expired), and ends that session's
//! live streams there.

use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The cookie's name.
pub const COOKIE: &str = "chat_bridge_ui";

/// At most this many signed-out sessions are remembered (the soonest to expire go first).
const MAX_SIGNED_OUT: usize = 10_000;

/// Issues and checks session cookies.
pub struct Sessions {
    key: [u8; 32],
    ttl_ms: i64,
    /// Signed-out sessions (nonce → expiry ms), refused until they would have expired.
    signed_out: std::sync::Mutex<std::collections::HashMap<String, i64>>,
    /// Bumped at each sign-out: live streams look whether theirs was it.
    sign_outs: tokio::sync::watch::Sender<u64>,
}

/// A valid session: when it expires, and its nonce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// Unix ms.
    pub expires_at: i64,
    /// Tells it apart from every other.
    pub nonce: String,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("ttl_ms", &self.ttl_ms)
            .finish_non_exhaustive()
    }
}

fn mac(key: &[u8], msg: &[u8]) -> HmacSha256 {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    m.update(msg);
    m
}

impl Sessions {
    /// Sessions signed under a key derived from `token` (a random key when there is none: then
    /// no cookie is ever issued), lasting `ttl_ms`.
    #[must_use]
    pub fn new(token: Option<&SecretString>, ttl_ms: i64) -> Self {
        let key = match token {
            Some(t) => mac(t.expose_secret().as_bytes(), b"chat-bridge ui session v1")
                .finalize()
                .into_bytes()
                .into(),
            None => rand::random(),
        };
        Self {
            key,
            ttl_ms,
            signed_out: std::sync::Mutex::default(),
            sign_outs: tokio::sync::watch::Sender::new(0),
        }
    }

    /// The session of a valid, unexpired, not signed-out cookie.
    #[must_use]
    pub fn session(&self, value: &str, now: i64) -> Option<Session> {
        self.viewer(value, now)?;
        let payload = self.open(value)?;
        let mut it = payload.split('.');
        let expires_at = it.next()?.parse::<i64>().ok()?;
        let nonce = it.next()?.to_owned();
        Some(Session { expires_at, nonce })
    }

    /// Signs the session of `value` out (when it is valid): refused from now on, here.
    pub fn sign_out(&self, value: &str, now: i64) {
        crate::core::lock(&self.signed_out).retain(|_, exp| *exp > now);
        let Some(session) = self.session(value, now) else {
            return;
        };
        {
            let mut out = crate::core::lock(&self.signed_out);
            if out.len() >= MAX_SIGNED_OUT
                && let Some(soonest) = out
                    .iter()
                    .min_by_key(|(_, exp)| **exp)
                    .map(|(n, _)| n.clone())
            {
                out.remove(&soonest);
            }
            out.insert(session.nonce, session.expires_at);
        }
        self.sign_outs.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Whether `session` was signed out here.
    #[must_use]
    pub fn signed_out(&self, session: &Session) -> bool {
        crate::core::lock(&self.signed_out).contains_key(&session.nonce)
    }

    /// Sign-outs as they happen.
    #[must_use]
    pub fn sign_outs(&self) -> tokio::sync::watch::Receiver<u64> {
        self.sign_outs.subscribe()
    }

    /// How long a session lasts, ms.
    #[must_use]
    pub fn ttl_ms(&self) -> i64 {
        self.ttl_ms
    }

    /// A new session's cookie value, valid until `now + ttl`.
    #[must_use]
    pub fn issue(&self, now: i64) -> String {
        let nonce: [u8; 16] = rand::random();
        self.seal(&format!(
            "{}.{}",
            now.saturating_add(self.ttl_ms),
            hex::encode(nonce)
        ))
    }

    /// A new session for `who` (single sign-on): the name travels in the signed payload.
    #[must_use]
    pub fn issue_as(&self, now: i64, who: &str) -> String {
        let nonce: [u8; 16] = rand::random();
        self.seal(&format!(
            "{}.{}.{}",
            now.saturating_add(self.ttl_ms),
            hex::encode(nonce),
            hex::encode(who.as_bytes())
        ))
    }

    /// `payload.<HMAC>` under this key (`payload` must have no character a cookie cannot hold).
    #[must_use]
    pub fn seal(&self, payload: &str) -> String {
        let sig = mac(&self.key, payload.as_bytes()).finalize().into_bytes();
        format!("{payload}.{}", hex::encode(sig))
    }

    /// The payload of a value [`Sessions::seal`] made, if its signature holds.
    #[must_use]
    pub fn open<'a>(&self, value: &'a str) -> Option<&'a str> {
        let (payload, sig) = value.rsplit_once('.')?;
        let sig = hex::decode(sig).ok()?;
        mac(&self.key, payload.as_bytes())
            .verify_slice(&sig)
            .ok()
            .map(|()| payload)
    }

    /// Who a valid, unexpired session cookie is for: the signed-in name, or `API token`.
    #[must_use]
    pub fn viewer(&self, value: &str, now: i64) -> Option<String> {
        let payload = self.open(value)?;
        let mut it = payload.split('.');
        let exp = it.next()?.parse::<i64>().ok()?;
        let nonce = it.next()?;
        if !(now < exp && exp - now <= self.ttl_ms) {
            return None;
        }
        if crate::core::lock(&self.signed_out).contains_key(nonce) {
            return None;
        }
        match it.next() {
            None => Some("API token".to_owned()),
            Some(who) => String::from_utf8(hex::decode(who).ok()?).ok(),
        }
    }

    /// Whether `value` is a cookie we issued that has not expired at `now`.
    #[must_use]
    pub fn check(&self, value: &str, now: i64) -> bool {
        self.viewer(value, now).is_some()
    }
}

/// The session cookie's value in a request, if any.
#[must_use]
pub fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (k, v) = pair.trim().split_once('=')?;
            (k == COOKIE).then_some(v)
        })
}

/// The `Set-Cookie` value that starts a session.
#[must_use]
pub fn set_cookie(value: &str, max_age_s: i64, secure: bool) -> String {
    format!(
        "{COOKIE}={value}; Path=/ui; Max-Age={max_age_s}; HttpOnly; SameSite=Strict{}",
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` value that ends it.
#[must_use]
pub fn clear_cookie(secure: bool) -> String {
    set_cookie("", 0, secure)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s1_session_cookies_verify_expire_and_resist_tampering() {
        let token: SecretString = "api-token-0123".into();
        let s = Sessions::new(Some(&token), 60_000);
        let v = s.issue(1_000);
        assert!(s.check(&v, 1_000) && s.check(&v, 60_999));
        assert!(!s.check(&v, 61_000), "expired");
        // Another token (rotated) voids it; so does any change to the payload or the signature.
        assert!(!Sessions::new(Some(&"other-token".into()), 60_000).check(&v, 1_000));
        let (payload, sig) = v.rsplit_once('.').expect("shape");
        let longer = payload.replacen(&61_000.to_string(), "99999999", 1);
        assert!(!s.check(&format!("{longer}.{sig}"), 1_000));
        let mut flipped = sig.to_owned().into_bytes();
        flipped[0] = if flipped[0] == b'0' { b'1' } else { b'0' };
        let flipped = String::from_utf8(flipped).expect("hex");
        assert!(!s.check(&format!("{payload}.{flipped}"), 1_000));
        for junk in ["", ".", "x.y.z", "1.2", &format!("{payload}.")] {
            assert!(!s.check(junk, 1_000), "{junk}");
        }
        // A single sign-on session carries its person, signed.
        let sso = s.issue_as(1_000, "ann@example.com");
        assert_eq!(s.viewer(&sso, 1_000).as_deref(), Some("ann@example.com"));
        assert_eq!(s.viewer(&v, 1_000).as_deref(), Some("API token"));
        let (p, sig) = sso.rsplit_once('.').expect("shape");
        let forged = format!(
            "{}{}",
            &p[..p.rfind('.').expect("who") + 1],
            hex::encode("root")
        );
        assert_eq!(s.viewer(&format!("{forged}.{sig}"), 1_000), None);
        // Without a token the key is random: nothing verifies but what this process issued.
        assert!(!Sessions::new(None, 60_000).check(&v, 1_000));
    }

    #[test]
    fn a_signed_out_session_is_refused_here_until_it_would_have_expired() {
        let s = Sessions::new(Some(&"api-token-0123".into()), 60_000);
        let (a, b) = (s.issue(1_000), s.issue(1_000));
        let outs = s.sign_outs();
        let session = s.session(&a, 1_000).expect("valid");
        assert_eq!(session.expires_at, 61_000);
        s.sign_out(&a, 2_000);
        assert!(outs.has_changed().expect("open"));
        assert!(!s.check(&a, 2_000) && s.signed_out(&session));
        assert!(s.check(&b, 2_000), "only that session");
        // Remembered only while it could still be used.
        s.sign_out(&b, 62_000);
        assert!(crate::core::lock(&s.signed_out).is_empty());
    }

    #[test]
    fn the_cookie_is_http_only_same_site_strict_and_secure_behind_tls() {
        assert_eq!(
            set_cookie("v", 60, true),
            "chat_bridge_ui=v; Path=/ui; Max-Age=60; HttpOnly; SameSite=Strict; Secure"
        );
        assert!(!set_cookie("v", 60, false).contains("Secure"));
        let mut h = HeaderMap::new();
        h.insert(
            "cookie",
            "a=b; chat_bridge_ui=xyz; c=d".parse().expect("value"),
        );
        assert_eq!(cookie(&h), Some("xyz"));
    }
}
