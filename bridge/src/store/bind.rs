//! Every value the store binds goes through here, so text from outside is always storable (S4).
//!
//! PostgreSQL `text` cannot hold a NUL character (`invalid byte sequence for encoding "UTF8": 0x00`),
//! and `jsonb` refuses `\u0000` inside a JSON string too; SQLite holds both. One NUL in a command's
//! output (`printf 'a\0b'`, `find -print0`, `cat` of a binary file) or in a chat message used to make
//! the whole transaction fail on PostgreSQL — nothing stored, nothing posted. Here NUL becomes the
//! visible U+2400 `␀` on every backend, so both store and show the same thing.
//!
//! The rule is enforced, not remembered: `clippy.toml` forbids sqlx's own `bind`, and the store
//! binds with [`BindExt::arg`], which takes only [`Arg`] values — text is made storable by its
//! [`Arg`] impl, JSON columns say so with [`Json`]. A new column cannot forget.
//!
//! Rust strings are valid UTF-8 already (invalid bytes from the PTY become U+FFFD in the shell agent,
//! `String::from_utf8_lossy`), so NUL is the only character the backends disagree on.

use std::borrow::Cow;

use sqlx::any::AnyArguments;
use sqlx::{Any, Encode, Type};

/// What NUL is stored (and shown) as: U+2400 SYMBOL FOR NULL.
pub const NUL_SYMBOL: char = '\u{2400}';

/// `text` made storable on every backend: each NUL becomes [`NUL_SYMBOL`]. Borrows when there is
/// nothing to change.
#[must_use]
pub fn storable(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', "\u{2400}"))
    } else {
        Cow::Borrowed(text)
    }
}

/// JSON text made storable: a `\u0000` escape inside a string (what `serde_json` writes for NUL)
/// becomes [`NUL_SYMBOL`], as does a raw NUL. Other escapes are kept as they are; an escaped
/// backslash followed by `u0000` (the six characters typed by someone) is not an escape and is kept.
/// The result is still valid JSON whenever the input was.
#[must_use]
pub fn storable_json(json: &str) -> Cow<'_, str> {
    if !json.contains("\\u0000") && !json.contains('\0') {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len());
    let mut rest = json;
    while let Some(i) = rest.find(['\\', '\0']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(after) = tail.strip_prefix('\0') {
            out.push(NUL_SYMBOL);
            rest = after;
        } else if let Some(after) = tail.strip_prefix("\\u0000") {
            out.push(NUL_SYMBOL);
            rest = after;
        } else {
            // Any other escape: copy the backslash and the character it escapes, so `\\` is never
            // mistaken for the start of an escape.
            let escaped = tail[1..].chars().next().map_or(0, char::len_utf8);
            out.push_str(&tail[..1 + escaped]);
            rest = &tail[1 + escaped..];
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// A JSON document bound for a text column (outbox actions, inbox payloads, permission options):
/// made storable with [`storable_json`] instead of [`storable`].
#[derive(Debug, Clone, Copy)]
pub struct Json<'a>(pub &'a str);

/// A value the store may bind. Text is made storable on the way (see the module docs).
pub trait Arg {
    /// What sqlx binds.
    type Out: for<'q> Encode<'q, Any> + Type<Any> + Send + 'static;
    /// Converts, making text storable.
    fn into_arg(self) -> Self::Out;
}

impl Arg for &str {
    type Out = String;
    fn into_arg(self) -> String {
        storable(self).into_owned()
    }
}

impl Arg for &String {
    type Out = String;
    fn into_arg(self) -> String {
        self.as_str().into_arg()
    }
}

impl Arg for String {
    type Out = String;
    fn into_arg(self) -> String {
        match storable(&self) {
            Cow::Borrowed(_) => self,
            Cow::Owned(s) => s,
        }
    }
}

impl Arg for Json<'_> {
    type Out = String;
    fn into_arg(self) -> String {
        storable_json(self.0).into_owned()
    }
}

impl<T: Arg> Arg for Option<T>
where
    Option<T::Out>: for<'q> Encode<'q, Any> + Type<Any>,
{
    type Out = Option<T::Out>;
    fn into_arg(self) -> Self::Out {
        self.map(Arg::into_arg)
    }
}

macro_rules! plain_arg {
    ($($t:ty),*) => {$(
        impl Arg for $t {
            type Out = $t;
            fn into_arg(self) -> $t {
                self
            }
        }
    )*};
}
plain_arg!(i64, i32, bool);

/// Binding through [`Arg`] — the only way the store binds (sqlx's `bind` is forbidden by
/// `clippy.toml`).
pub trait BindExt: Sized {
    /// Binds the next `$N`, making text storable.
    #[must_use]
    fn arg<A: Arg>(self, value: A) -> Self;
}

impl BindExt for sqlx::query::Query<'_, Any, AnyArguments> {
    #[allow(clippy::disallowed_methods)]
    fn arg<A: Arg>(self, value: A) -> Self {
        self.bind(value.into_arg())
    }
}

impl<O> BindExt for sqlx::query::QueryAs<'_, Any, O, AnyArguments> {
    #[allow(clippy::disallowed_methods)]
    fn arg<A: Arg>(self, value: A) -> Self {
        self.bind(value.into_arg())
    }
}

impl<O> BindExt for sqlx::query::QueryScalar<'_, Any, O, AnyArguments> {
    #[allow(clippy::disallowed_methods)]
    fn arg<A: Arg>(self, value: A) -> Self {
        self.bind(value.into_arg())
    }
}

/// A statement's first row, read once the statement has finished — its commit or its error
/// included (D1). sqlx's `fetch_optional` and `fetch_one` on the `Any` driver return the first
/// row as it arrives, and PostgreSQL sends a writing statement's row before the statement has
/// finished; `clippy.toml` forbids them, and the store reads single rows through here, so a new
/// `INSERT … RETURNING` cannot forget.
pub trait FetchExt<O>: Sized {
    /// The first row, if any, once the statement has finished.
    fn first<'e, 'c: 'e, E>(
        self,
        executor: E,
    ) -> impl std::future::Future<Output = Result<Option<O>, sqlx::Error>> + Send + 'e
    where
        E: 'e + sqlx::Executor<'c, Database = Any>,
        Self: 'e;

    /// The first row once the statement has finished; [`sqlx::Error::RowNotFound`] when there is
    /// none.
    fn only<'e, 'c: 'e, E>(
        self,
        executor: E,
    ) -> impl std::future::Future<Output = Result<O, sqlx::Error>> + Send + 'e
    where
        E: 'e + sqlx::Executor<'c, Database = Any>,
        Self: 'e,
    {
        let first = self.first(executor);
        async move { first.await?.ok_or(sqlx::Error::RowNotFound) }
    }
}

impl<O> FetchExt<O> for sqlx::query::QueryAs<'_, Any, O, AnyArguments>
where
    O: Send + Unpin + for<'r> sqlx::FromRow<'r, sqlx::any::AnyRow>,
{
    async fn first<'e, 'c: 'e, E>(self, executor: E) -> Result<Option<O>, sqlx::Error>
    where
        E: 'e + sqlx::Executor<'c, Database = Any>,
        Self: 'e,
    {
        Ok(self.fetch_all(executor).await?.into_iter().next())
    }
}

impl<O> FetchExt<O> for sqlx::query::QueryScalar<'_, Any, O, AnyArguments>
where
    O: Send + Unpin,
    (O,): for<'r> sqlx::FromRow<'r, sqlx::any::AnyRow>,
{
    async fn first<'e, 'c: 'e, E>(self, executor: E) -> Result<Option<O>, sqlx::Error>
    where
        E: 'e + sqlx::Executor<'c, Database = Any>,
        Self: 'e,
    {
        Ok(self.fetch_all(executor).await?.into_iter().next())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s4_nul_becomes_a_visible_symbol() {
        assert_eq!(storable("a\0b\0"), "a␀b␀");
        assert!(matches!(storable("plain ☃ \u{1b}[0m"), Cow::Borrowed(_)));
    }

    #[test]
    fn s4_json_nul_escapes_become_the_symbol_and_stay_valid_json() {
        let value = serde_json::json!({"text": "a\0b", "typed": "\\u0000", "k\0": ["\0\\"]});
        let json = serde_json::to_string(&value).unwrap();
        let stored = storable_json(&json);
        let back: serde_json::Value = serde_json::from_str(&stored).unwrap();
        assert_eq!(
            back,
            serde_json::json!({"text": "a␀b", "typed": "\\u0000", "k␀": ["␀\\"]})
        );
        assert!(matches!(
            storable_json("{\"a\":\"\\\\n\"}"),
            Cow::Borrowed(_)
        ));
    }
}
