//! A hand-written, validating single-pass reader for the hot `session/update` frames.
//!
//! Heartbeats, results and chunks are most of what a daemon sends; going through serde's visitors
//! for them costs about as much as a whole `serde_json::Value` parse. This reader walks the frame
//! once, validates all of it as `serde_json` would (string escapes, control characters, number
//! grammar, nesting, nothing after the value), and reads the fields the classifier needs straight
//! into the borrowed [`UpdateParams`] the serde path produces.
//!
//! It only ever *accepts less*: whenever a frame holds anything it is not sure to read exactly as
//! `serde_json` would — an `id`, an escaped key, a duplicate known key, a surrogate escape (S4
//! repairs those), a number that is not a plain integer where one is typed, an array where serde
//! would read a struct from a sequence, deep nesting, invalid JSON — it returns `None` and the frame
//! takes the serde path, unchanged. Property tests over arbitrary bytes, mutated captures and all
//! of Unicode check that both paths classify every frame the same.

use std::borrow::Cow;

use crate::event::{ShellProgress, Usage};
use crate::wire::{Content, ContentBlock, Meta, RawOutput, ToolCallContent, Update, UpdateParams};

/// Deeper than this, the reader gives the frame to serde (whose own limit is 128).
const MAX_DEPTH: u32 = 48;

/// Reads the params of a `session/update` notification into `out` (which the caller made
/// empty), when `text` is certainly one and reads plainly; `None` means "take the serde path"
/// (which also owns every error message), and `out` is then to be dropped. Filled in place rather
/// than returned: the decoded update is large, and moving it cost a copy per frame.
pub(crate) fn session_update<'a>(
    text: &'a str,
    out: &mut UpdateParams<'a, Option<Meta<'a>>>,
) -> Option<()> {
    let mut r = Reader {
        text,
        b: text.as_bytes(),
        i: 0,
    };
    let mut method = None;
    let mut params = false;
    r.object(|r, key| {
        match key {
            // A request or a response: the serde path reads those.
            b"id" => return None,
            b"method" => once(&mut method, r.string()?)?,
            b"params" => {
                if params {
                    return None;
                }
                params = true;
                r.params(out)?;
            }
            _ => r.skip(1)?,
        }
        Some(())
    })?;
    r.ws();
    if r.i != r.b.len() || method.as_deref() != Some("session/update") || !params {
        return None;
    }
    Some(())
}

/// Whether the reader takes `text` (tests: which frames the hot path reads).
#[cfg(test)]
pub(crate) fn reads(text: &str) -> bool {
    let mut out = UpdateParams {
        session_id: None,
        update: None,
    };
    session_update(text, &mut out).is_some()
}

/// Sets a field read once; a second occurrence makes serde's derive fail, so the reader gives up.
fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(value);
    Some(())
}

/// Marks key `bit` of an object as read; a repeated known key gives up (see [`once`]).
fn first(seen: &mut u16, bit: u32) -> Option<()> {
    let mask = 1u16 << bit;
    if *seen & mask != 0 {
        return None;
    }
    *seen |= mask;
    Some(())
}

/// A known key's slot for an optional value: a repeated key gives up (see [`once`]).
fn once_opt<T>(seen: &mut u16, bit: u32, slot: &mut Option<T>, value: Option<T>) -> Option<()> {
    first(seen, bit)?;
    *slot = value;
    Some(())
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Bit 7 of each byte of `w` that is `"`, `\\` or below 0x20 (the lowest flagged byte is exact;
/// borrows may flag bytes above it, which are never looked at), and whether that lowest flagged
/// byte is a `"` (exact too: a spurious quote flag sits above a real quote, so never lowest).
fn specials(w: u64) -> (u64, bool) {
    let zero = |v: u64| v.wrapping_sub(ONES) & !v;
    let quote = zero(w ^ (ONES * u64::from(b'"'))) & HIGHS;
    let backslash = zero(w ^ (ONES * u64::from(b'\\')));
    let control = w.wrapping_sub(ONES * 0x20) & !w;
    let hits = quote | ((backslash | control) & HIGHS);
    (hits, hits & hits.wrapping_neg() & quote != 0)
}

/// The character of the four hex digits of a `\\u` escape; `None` for bad digits or a surrogate.
fn hex_char(digits: &[u8]) -> Option<char> {
    let mut n = 0u32;
    for d in digits {
        n = n * 16 + char::from(*d).to_digit(16)?;
    }
    if digits.len() != 4 {
        return None;
    }
    char::from_u32(n)
}

struct Reader<'a> {
    text: &'a str,
    b: &'a [u8],
    i: usize,
}

impl<'a> Reader<'a> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    /// The next byte that is not whitespace, the reader placed at it. Frames come compact, so
    /// the byte at the reader is tried first.
    fn peek(&mut self) -> Option<u8> {
        let c = *self.b.get(self.i)?;
        if c > b' ' {
            return Some(c);
        }
        self.ws();
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// `null` (consumed: `true`), or something else (left in place: `false`).
    fn null(&mut self) -> Option<bool> {
        if self.peek()? != b'n' {
            return Some(false);
        }
        self.literal(b"null")?;
        Some(true)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        (self.b.get(self.i..self.i + word.len())? == word).then(|| self.i += word.len())
    }

    /// Calls `field` for each key of an object (its bytes), the reader placed at its value;
    /// `field` must read the value whole.
    fn object(&mut self, mut field: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            let key = self.key()?;
            field(self, key)?;
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A key without escapes (serde would match an escaped one against the field names; rare
    /// enough to leave to it) and the `:` after it. Its bytes, not a `&str`: keys are only
    /// compared, and a slice of the bytes needs no char-boundary checks (the frame is UTF-8).
    #[inline(always)]
    fn key(&mut self) -> Option<&'a [u8]> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.i + 1;
        let (end, quote) = self.plain_run(start);
        // An escape (left to serde) or a control character (invalid) ends the key early.
        if !quote && self.b.get(end) != Some(&b'"') {
            return None;
        }
        let key = self.b.get(start..end)?;
        self.i = end + 1;
        if self.b.get(self.i) == Some(&b':') {
            self.i += 1;
        } else {
            self.eat(b':')?;
        }
        Some(key)
    }

    /// The end of the plain run of string bytes starting at `i`: the first `"`, `\\` or control
    /// byte, eight bytes at a time, and whether that byte is known to be a `"` (so the caller need
    /// not load it again). Most strings here are keys and short values; `memchr2` plus a
    /// vectorised control-byte check measured more instructions per frame, not fewer (see
    /// docs/performance.md P1b).
    fn plain_run(&self, mut i: usize) -> (usize, bool) {
        while let Some(chunk) = self.b.get(i..i + 8) {
            let mut w = [0u8; 8];
            w.copy_from_slice(chunk);
            let (hits, quote) = specials(u64::from_le_bytes(w));
            if hits != 0 {
                return (i + (hits.trailing_zeros() / 8) as usize, quote);
            }
            i += 8;
        }
        (self.plain_tail(i), false)
    }

    /// [`Self::plain_run`] over the last few bytes, one at a time.
    fn plain_tail(&self, mut i: usize) -> usize {
        while let Some(&c) = self.b.get(i) {
            if c == b'"' || c == b'\\' || c < 0x20 {
                break;
            }
            i += 1;
        }
        i
    }

    /// Validates a string and moves past it, nothing built (skipped strings). `None` for a
    /// non-string, a control character, a bad escape or any surrogate escape (the serde path
    /// repairs lone ones, S4).
    fn skip_string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        loop {
            let (end, quote) = self.plain_run(self.i);
            if quote {
                self.i = end + 1;
                return Some(());
            }
            match self.b.get(end)? {
                b'"' => {
                    self.i = end + 1;
                    return Some(());
                }
                b'\\' => {
                    self.i = end
                        + match self.b.get(end + 1)? {
                            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => 2,
                            b'u' => {
                                hex_char(self.b.get(end + 2..end + 6)?)?;
                                6
                            }
                            _ => return None,
                        };
                }
                // A control character: invalid JSON.
                _ => return None,
            }
        }
    }

    /// A string: borrowed when it has no escapes, unescaped otherwise, validated as
    /// [`Self::skip_string`] validates, in the same single pass (an escaped string's bytes are not
    /// read again to unescape them).
    #[inline(always)]
    fn string(&mut self) -> Option<Cow<'a, str>> {
        if self.peek()? != b'"' {
            return None;
        }
        self.i += 1;
        let (end, quote) = self.plain_run(self.i);
        if quote {
            // Most strings: no escape, borrowed.
            let plain = self.text.get(self.i..end)?;
            self.i = end + 1;
            return Some(Cow::Borrowed(plain));
        }
        self.string_rest(end)
    }

    /// [`Self::string`] past its first plain run, which ended at `end` on something that may
    /// not be the closing quote (an escape, a control character, the end of the frame).
    fn string_rest(&mut self, mut end: usize) -> Option<Cow<'a, str>> {
        let start = self.i;
        let mut out: Option<String> = None;
        loop {
            match *self.b.get(end)? {
                b'"' => {
                    let plain = self.text.get(self.i..end)?;
                    self.i = end + 1;
                    return Some(match out {
                        None => Cow::Borrowed(plain),
                        Some(mut o) => {
                            o.push_str(plain);
                            Cow::Owned(o)
                        }
                    });
                }
                b'\\' => {
                    let plain = self.text.get(self.i..end)?;
                    let (c, len) = match self.b.get(end + 1)? {
                        b'b' => ('\u{8}', 2),
                        b'f' => ('\u{c}', 2),
                        b'n' => ('\n', 2),
                        b'r' => ('\r', 2),
                        b't' => ('\t', 2),
                        b'u' => (hex_char(self.b.get(end + 2..end + 6)?)?, 6),
                        c @ (b'"' | b'\\' | b'/') => (char::from(*c), 2),
                        _ => return None,
                    };
                    // Room for what was read so far, as much again and 256 bytes, never more
                    // than the rest of the frame: one allocation for most texts (growing it
                    // measured a sixth of a result's text), doubling past that.
                    let o = out.get_or_insert_with(|| {
                        String::with_capacity((2 * (end - start) + 256).min(self.b.len() - start))
                    });
                    o.push_str(plain);
                    o.push(c);
                    self.i = end + len;
                }
                // A control character: invalid JSON.
                _ => return None,
            }
            let (next, quote) = self.plain_run(self.i);
            end = next;
            if quote {
                let plain = self.text.get(self.i..end)?;
                self.i = end + 1;
                let mut o = out.unwrap_or_default();
                o.push_str(plain);
                return Some(Cow::Owned(o));
            }
        }
    }

    /// A string or `null` (`None`); any other value gives up.
    fn opt_string(&mut self) -> Option<Option<Cow<'a, str>>> {
        match self.peek()? {
            b'"' => self.string().map(Some),
            b'n' => self.literal(b"null").map(|()| None),
            _ => None,
        }
    }

    /// The text of a number, validated by JSON's grammar (what serde accepts), not interpreted.
    fn number(&mut self) -> Option<&'a str> {
        self.ws();
        let start = self.i;
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        match self.b.get(self.i)? {
            b'0' => self.i += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            self.some_digits()?;
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.b.get(self.i) {
                self.i += 1;
            }
            self.some_digits()?;
        }
        self.text.get(start..self.i)
    }

    fn digits(&mut self) {
        while self.b.get(self.i).is_some_and(u8::is_ascii_digit) {
            self.i += 1;
        }
    }

    fn some_digits(&mut self) -> Option<()> {
        let at = self.i;
        self.digits();
        (self.i > at).then_some(())
    }

    /// `null`, or a plain non-negative integer that fits (what serde reads into `Option<u64>`);
    /// anything else gives up.
    fn opt_u64(&mut self) -> Option<Option<u64>> {
        if self.null()? {
            return Some(None);
        }
        let n = self.number()?;
        if !n.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        n.parse().ok().map(Some)
    }

    /// `null`, or a plain integer that fits `i64` (`-0` reads as a float in serde: gives up).
    fn opt_i64(&mut self) -> Option<Option<i64>> {
        if self.null()? {
            return Some(None);
        }
        let n = self.number()?;
        let digits = n.strip_prefix('-').unwrap_or(n);
        if !digits.bytes().all(|c| c.is_ascii_digit()) || n == "-0" {
            return None;
        }
        n.parse().ok().map(Some)
    }

    /// Any value, validated and dropped.
    fn skip(&mut self, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => self.skip_string(),
            b'{' => self.object(|r, _| r.skip(depth + 1)),
            b'[' => self.array(|r| r.skip(depth + 1)),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.number().map(drop),
        }
    }

    /// Calls `item` for each element of an array, the reader placed at it.
    fn array(&mut self, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.i += 1;
            return Some(());
        }
        loop {
            item(self)?;
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn params(&mut self, out: &mut UpdateParams<'a, Option<Meta<'a>>>) -> Option<()> {
        let mut seen = 0u16;
        self.object(|r, key| match key {
            b"sessionId" => once_opt(&mut seen, 0, &mut out.session_id, r.opt_string()?),
            b"update" => {
                first(&mut seen, 1)?;
                if !r.null()? {
                    r.update(out.update.insert(Update::read_in_place()))?;
                }
                Some(())
            }
            _ => r.skip(2),
        })
    }

    fn update(&mut self, u: &mut Update<'a, Option<Meta<'a>>>) -> Option<()> {
        let mut seen = 0u16;
        self.object(|r, key| {
            let slot = match key {
                b"sessionUpdate" => 0,
                b"toolCallId" => 1,
                b"status" => 2,
                b"kind" => 3,
                b"title" => 4,
                b"content" => 5,
                b"rawOutput" => 6,
                b"rawInput" => 7,
                b"_meta" => 8,
                // Plan entries are read by the serde path.
                b"entries" => return None,
                _ => return r.skip(3),
            };
            first(&mut seen, slot)?;
            match slot {
                0 => u.session_update = r.opt_string()?,
                1 => u.tool_call_id = r.opt_string()?,
                2 => u.status = r.opt_string()?,
                3 => u.kind = r.opt_string()?,
                4 => u.title = r.opt_string()?,
                5 => u.content_read = r.content()?,
                6 => {
                    if !r.null()? {
                        let raw = u.raw_output_read.insert(RawOutput::default());
                        u.error_type_read = Some(r.raw_output(raw)?);
                    }
                }
                7 => u.timeout_read = Some(r.raw_input()?),
                _ => {
                    if !r.null()? {
                        r.meta(u.meta.insert(Meta::default()))?;
                    }
                }
            }
            Some(())
        })
    }

    /// `content`: a block (object), a tool call's entries (array), `null`; anything else gives up.
    fn content(&mut self) -> Option<Option<Content<'a>>> {
        match self.peek()? {
            b'n' => self.literal(b"null").map(|()| None),
            b'{' => self.block().map(|b| Some(Content::Block(b))),
            b'[' => {
                // One entry (a result's usual content) is kept without a `Vec`.
                let mut one = None;
                let mut items = Vec::new();
                self.array(|r| {
                    let mut content = None;
                    let mut seen = 0u16;
                    r.object(|r, key| {
                        if key != b"content" {
                            return r.skip(5);
                        }
                        let block = if r.null()? { None } else { Some(r.block()?) };
                        once_opt(&mut seen, 0, &mut content, block)
                    })?;
                    let entry = ToolCallContent { content };
                    match one.take() {
                        None if items.is_empty() => one = Some(entry),
                        first => {
                            items.extend(first);
                            items.push(entry);
                        }
                    }
                    Some(())
                })?;
                Some(Some(match one {
                    Some(entry) => Content::One(entry),
                    None => Content::Items(items),
                }))
            }
            _ => None,
        }
    }

    /// `{type, text}`.
    fn block(&mut self) -> Option<ContentBlock<'a>> {
        let (mut kind, mut text) = (None, None);
        let mut seen = 0u16;
        self.object(|r, key| match key {
            b"type" => once_opt(&mut seen, 0, &mut kind, r.opt_string()?),
            b"text" => once_opt(&mut seen, 1, &mut text, r.opt_string()?),
            _ => r.skip(6),
        })?;
        Some(ContentBlock { kind, text })
    }

    /// `rawOutput` (an object), with the `type` of an `error` object read in place.
    fn raw_output(&mut self, raw: &mut RawOutput<'a>) -> Option<Option<String>> {
        let mut error_type = None;
        let mut seen = 0u16;
        if self.peek()? != b'{' {
            return None;
        }
        self.object(|r, key| match key {
            b"output" => once_opt(&mut seen, 0, &mut raw.output, r.opt_string()?),
            b"outcome" => once_opt(&mut seen, 1, &mut raw.outcome, r.opt_string()?),
            b"exitCode" => once_opt(&mut seen, 2, &mut raw.exit_code, r.opt_i64()?),
            b"signal" => once_opt(&mut seen, 3, &mut raw.signal, r.opt_i64()?),
            b"error" => {
                first(&mut seen, 4)?;
                error_type = r.error_type()?;
                Some(())
            }
            _ => r.skip(5),
        })?;
        Some(error_type)
    }

    /// The `type` of `rawOutput.error` when it is an object with a string `type` (as the serde
    /// path's `RawError` reads it); `None` for any other value.
    fn error_type(&mut self) -> Option<Option<String>> {
        if self.peek()? == b'[' {
            // serde reads a struct from a sequence too.
            return None;
        }
        if self.peek()? != b'{' {
            self.skip(5)?;
            return Some(None);
        }
        let mut kind = None;
        let mut seen = 0u16;
        self.object(|r, key| {
            if key != b"type" {
                return r.skip(6);
            }
            once_opt(&mut seen, 0, &mut kind, r.opt_string()?)
        })?;
        Some(kind.map(Cow::into_owned))
    }

    /// `rawInput`'s `timeout` as the serde path's `RawInput` + `as_u64` reads it: an object's
    /// plain non-negative integer, else none.
    fn raw_input(&mut self) -> Option<Option<u64>> {
        match self.peek()? {
            b'n' => return self.literal(b"null").map(|()| None),
            b'{' => {}
            _ => return None,
        }
        let mut timeout = None;
        let mut seen = 0u16;
        self.object(|r, key| {
            if key != b"timeout" {
                return r.skip(4);
            }
            first(&mut seen, 0)?;
            match r.peek()? {
                b'-' | b'0'..=b'9' => {
                    let n = r.number()?;
                    timeout = n
                        .bytes()
                        .all(|c| c.is_ascii_digit())
                        .then(|| n.parse().ok())
                        .flatten();
                    Some(())
                }
                b'n' => r.literal(b"null"),
                // A string, a bool, an object: serde's `RawInput` fails, which reads as no timeout.
                _ => {
                    r.skip(4)?;
                    timeout = None;
                    Some(())
                }
            }
        })?;
        Some(timeout)
    }

    fn meta(&mut self, m: &mut Meta<'a>) -> Option<()> {
        let mut seen = 0u16;
        self.object(|r, key| match key {
            b"toolName" => once_opt(&mut seen, 0, &mut m.tool_name, r.opt_string()?),
            b"shellProgress" => {
                let p = if r.null()? {
                    None
                } else {
                    Some(r.shell_progress()?)
                };
                once_opt(&mut seen, 1, &mut m.shell_progress, p)
            }
            b"usage" => {
                let u = if r.null()? { None } else { Some(r.usage()?) };
                once_opt(&mut seen, 2, &mut m.usage, u)
            }
            _ => r.skip(4),
        })
    }

    fn shell_progress(&mut self) -> Option<ShellProgress> {
        let mut p = ShellProgress::default();
        let mut seen = 0u16;
        if self.peek()? != b'{' {
            return None;
        }
        self.object(|r, key| match key {
            b"elapsedMs" => once_opt(&mut seen, 0, &mut p.elapsed_ms, r.opt_u64()?),
            b"lastOutputAgeMs" => once_opt(&mut seen, 1, &mut p.last_output_age_ms, r.opt_u64()?),
            b"totalLines" => once_opt(&mut seen, 2, &mut p.total_lines, r.opt_u64()?),
            b"totalBytes" => once_opt(&mut seen, 3, &mut p.total_bytes, r.opt_u64()?),
            b"timeoutMs" => once_opt(&mut seen, 4, &mut p.timeout_ms, r.opt_u64()?),
            _ => r.skip(5),
        })?;
        Some(p)
    }

    fn usage(&mut self) -> Option<Usage> {
        let mut u = Usage::default();
        let mut seen = 0u16;
        if self.peek()? != b'{' {
            return None;
        }
        self.object(|r, key| match key {
            b"inputTokens" => once_opt(&mut seen, 0, &mut u.input_tokens, r.opt_u64()?),
            b"outputTokens" => once_opt(&mut seen, 1, &mut u.output_tokens, r.opt_u64()?),
            b"totalTokens" => once_opt(&mut seen, 2, &mut u.total_tokens, r.opt_u64()?),
            _ => r.skip(5),
        })?;
        Some(u)
    }
}
