//! Verifying that an HTTP request came from Slack: `X-Slack-Signature: v0=<hex>` is the HMAC-SHA256 of
//! `v0:{X-Slack-Request-Timestamp}:{raw body}` keyed with the app's signing secret. Requests older or
//! newer than five minutes are refused, so a captured request cannot be replayed.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// How far a request's timestamp may be from now.
pub const WINDOW_SECS: i64 = 5 * 60;

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// A header was missing or not in the expected form.
    #[error("missing or malformed Slack signature headers")]
    Malformed,
    /// The timestamp is outside the five-minute window.
    #[error("the request timestamp is too old or too far in the future")]
    Stale,
    /// The signature does not match the body.
    #[error("the request signature does not match")]
    Mismatch,
}

/// Checks a request. `now` is unix seconds.
///
/// # Errors
/// [`SignatureError`] saying why the request is refused.
pub fn verify(
    secret: &[u8],
    timestamp: &str,
    body: &[u8],
    signature: &str,
    now: i64,
) -> Result<(), SignatureError> {
    // An empty key is no key: anyone can compute its HMAC (S1). Start-up refuses one; this is the
    // second lock.
    if secret.iter().all(u8::is_ascii_whitespace) {
        return Err(SignatureError::Mismatch);
    }
    let ts: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| SignatureError::Malformed)?;
    if (now - ts).abs() > WINDOW_SECS {
        return Err(SignatureError::Stale);
    }
    let hex_sig = signature
        .strip_prefix("v0=")
        .ok_or(SignatureError::Malformed)?;
    let expected = hex::decode(hex_sig).map_err(|_| SignatureError::Malformed)?;
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).map_err(|_| SignatureError::Malformed)?;
    mac.update(b"v0:");
    mac.update(timestamp.trim().as_bytes());
    mac.update(b":");
    mac.update(body);
    // `verify_slice` compares in constant time.
    mac.verify_slice(&expected)
        .map_err(|_| SignatureError::Mismatch)
}

/// Signs a request the way Slack does (for tests and the fake Slack).
#[must_use]
pub fn sign(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(format!("v0:{timestamp}:").as_bytes());
    mac.update(body);
    format!("v0={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"8f742231b10e8888abcd99yyyzzz85a5";
    /// The request from Slack's "verifying requests" documentation, with its published signature.
    const BODY: &[u8] = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";

    #[test]
    fn slack_signature_accepts_a_signed_request_within_the_window() {
        let sig = sign(SECRET, "1531420618", BODY);
        assert_eq!(
            verify(SECRET, "1531420618", BODY, &sig, 1_531_420_618 + 299),
            Ok(())
        );
        // The example from Slack's documentation.
        assert_eq!(
            sig,
            "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
        );
    }

    #[test]
    fn slack_signature_rejects_a_tampered_body_a_stale_timestamp_and_garbage() {
        let sig = sign(SECRET, "1531420618", BODY);
        let mut tampered = BODY.to_vec();
        tampered[0] = b'T';
        assert_eq!(
            verify(SECRET, "1531420618", &tampered, &sig, 1_531_420_618),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(SECRET, "1531420618", BODY, &sig, 1_531_420_618 + 301),
            Err(SignatureError::Stale)
        );
        assert_eq!(
            verify(SECRET, "1531420618", BODY, &sig, 1_531_420_618 - 301),
            Err(SignatureError::Stale)
        );
        assert_eq!(
            verify(SECRET, "soon", BODY, &sig, 0),
            Err(SignatureError::Malformed)
        );
        assert_eq!(
            verify(SECRET, "1531420618", BODY, "v1=abc", 1_531_420_618),
            Err(SignatureError::Malformed)
        );
        assert_eq!(
            verify(b"other secret", "1531420618", BODY, &sig, 1_531_420_618),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn s1_an_empty_signing_secret_verifies_nothing() {
        for key in [&b""[..], b"  "] {
            let sig = sign(key, "1531420618", BODY);
            assert_eq!(
                verify(key, "1531420618", BODY, &sig, 1_531_420_618),
                Err(SignatureError::Mismatch),
                "a request signed with an empty key is refused"
            );
        }
    }
}
