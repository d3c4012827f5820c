//! Identifiers that cross the daemon link, parsed once at the edge.
//!
//! A session id or tool-call id is an opaque, non-empty string chosen by the daemon. JSON-RPC request
//! ids may be numbers or strings (qwen answers with `_qwen_perm_<uuid>_1`), so [`RequestId`] keeps
//! whichever form it was given and serialises it back the same way.

use std::fmt;
use std::sync::Arc;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest identifier accepted from the wire; longer ones are treated as malformed input.
pub const MAX_ID_LEN: usize = 512;

/// Why an identifier was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// The identifier was the empty string.
    #[error("identifier is empty")]
    Empty,
    /// The identifier exceeded [`MAX_ID_LEN`] bytes.
    #[error("identifier is {0} bytes long (at most {MAX_ID_LEN})")]
    TooLong(usize),
}

fn check(s: &str) -> Result<(), IdError> {
    if s.is_empty() {
        Err(IdError::Empty)
    } else if s.len() > MAX_ID_LEN {
        Err(IdError::TooLong(s.len()))
    } else {
        Ok(())
    }
}

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Parses an identifier received from the daemon.
            ///
            /// # Errors
            /// [`IdError`] when the string is empty or longer than [`MAX_ID_LEN`].
            pub fn parse(s: &str) -> Result<Self, IdError> {
                check(s)?;
                Ok(Self(Arc::from(s)))
            }

            /// The identifier as sent on the wire.
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), &*self.0)
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
                Self::parse(&s).map_err(de::Error::custom)
            }
        }
    };
}

string_id!(
    /// A daemon session: one chat thread's conversation with the agent.
    SessionId
);
string_id!(
    /// One tool call inside a session (`toolCallId`).
    ToolCallId
);

/// A JSON-RPC request id: a number or a string, echoed back exactly as received.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RequestId {
    /// A numeric id (the bridge's own requests use these).
    Number(i64),
    /// A string id (qwen's permission requests use these).
    String(Arc<str>),
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Number(n) => write!(f, "{n}"),
            Self::String(s) => f.write_str(s),
        }
    }
}

impl From<i64> for RequestId {
    fn from(n: i64) -> Self {
        Self::Number(n)
    }
}

impl From<&str> for RequestId {
    fn from(s: &str) -> Self {
        Self::String(Arc::from(s))
    }
}

impl Serialize for RequestId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Number(n) => s.serialize_i64(*n),
            Self::String(v) => s.serialize_str(v),
        }
    }
}

impl<'de> Deserialize<'de> for RequestId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RequestId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON-RPC id (integer or string)")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RequestId, E> {
                Ok(RequestId::Number(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RequestId, E> {
                i64::try_from(v)
                    .map(RequestId::Number)
                    .map_err(|_| E::custom("request id out of range"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RequestId, E> {
                if v.len() > MAX_ID_LEN {
                    return Err(E::custom("request id too long"));
                }
                Ok(RequestId::String(Arc::from(v)))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_oversized_ids_are_rejected() {
        assert_eq!(SessionId::parse(""), Err(IdError::Empty));
        assert!(matches!(
            ToolCallId::parse(&"x".repeat(MAX_ID_LEN + 1)),
            Err(IdError::TooLong(_))
        ));
        assert_eq!(
            SessionId::parse("abc").map(|s| s.to_string()),
            Ok("abc".to_owned())
        );
    }

    #[test]
    fn request_ids_round_trip_in_their_own_form() {
        for raw in [r#"7"#, r#""_qwen_perm_6c8e_1""#] {
            let id: RequestId = serde_json::from_str(raw).expect("id");
            assert_eq!(serde_json::to_string(&id).expect("ser"), raw);
        }
        assert!(serde_json::from_str::<RequestId>("1.5").is_err());
        assert!(serde_json::from_str::<RequestId>("null").is_err());
    }
}
