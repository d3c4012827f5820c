//! Bearer-token checks (S1, issue 13 item 9), shared by every listener that takes a token: the
//! shell-agent's `/acp` handshake and the bridge's `/api/v1`.
//!
//! The comparison is constant-time including the length: both sides are hashed with SHA-256 and the
//! digests compared with [`subtle::ConstantTimeEq`], so neither where a guess first differs nor how
//! long the expected token is shows in the response time. The scheme name is matched
//! case-insensitively (RFC 7235 §2.1: `bearer`, `BEARER` and `Bearer` are the same scheme).

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The credentials of an `Authorization` header value when its scheme is `Bearer` (any case).
#[must_use]
pub fn bearer_credentials(header: &str) -> Option<&str> {
    let (scheme, rest) = header.trim_start().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = rest.trim_matches(' ');
    (!token.is_empty()).then_some(token)
}

/// Whether `given` equals `expected`, in time that depends on neither their contents nor their
/// lengths.
#[must_use]
pub fn tokens_match(given: &str, expected: &str) -> bool {
    let (a, b) = (
        Sha256::digest(given.as_bytes()),
        Sha256::digest(expected.as_bytes()),
    );
    bool::from(a.ct_eq(&b))
}

/// Whether an `Authorization` header value (if any) carries `Bearer <expected>`.
#[must_use]
pub fn bearer_matches(header: Option<&str>, expected: &str) -> bool {
    // Hash even when the header is missing or malformed, so that path costs the same.
    let given = header.and_then(bearer_credentials);
    tokens_match(given.unwrap_or(""), expected) && given.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s1_bearer_scheme_is_case_insensitive() {
        for header in [
            "Bearer tok",
            "bearer tok",
            "BEARER tok",
            "BeArEr tok",
            "Bearer  tok",
            "Bearer tok ",
        ] {
            assert!(bearer_matches(Some(header), "tok"), "{header:?}");
        }
        for header in ["Basic tok", "Bearertok", "tok", "Bearer", "Bearer ", ""] {
            assert!(!bearer_matches(Some(header), "tok"), "{header:?}");
        }
        assert!(!bearer_matches(None, "tok"));
    }

    #[test]
    fn s1_token_comparison_covers_every_byte_and_the_length() {
        assert!(tokens_match("secret-token", "secret-token"));
        for wrong in [
            "",
            "s",
            "secret-toke",
            "secret-token!",
            "Secret-token",
            "secret-tokeN",
        ] {
            assert!(!tokens_match(wrong, "secret-token"), "{wrong:?}");
        }
        // An empty expected token never matches a missing credential.
        assert!(!bearer_matches(None, ""));
        assert!(!bearer_matches(Some("Bearer "), ""));
    }
}
