//! The last heartbeat's shape: a daemon sends the same heartbeat frame again and again with only its
//! ids and its numbers changed, so the classifier keeps the frame the reader last read as one and
//! checks the next against it instead of reading it again (issue 20, item 4: the read was most of
//! what the connection's task did for a heartbeat).
//!
//! A [`Shape`] is that frame cut into the bytes that must come again exactly and three kinds of
//! holes: the session id (`params.sessionId`), the call id (`params.update.toolCallId`) and the
//! numbers of `params.update._meta.shellProgress`. A frame matches when every fixed byte is there
//! and each hole holds what the reader would read there the same way: a string with no escape and
//! no control character (read as it stands, as the reader reads one), a plain integer that fits
//! `u64` (the only numbers the reader types there). Everything else — keys, `status`,
//! `sessionUpdate`, `toolName`, whitespace, unknown fields — is fixed, so a matching frame has the
//! reader's every decision of the learned frame: the same structure, no duplicate key, a heartbeat.
//! Anything else, however small (an escape, another tool, a float), misses, and the frame takes the
//! reader as before. Learned only from a frame the reader read as a heartbeat whose holes are
//! exactly where the reader found its ids and numbers; property tests check that a frame classifies
//! the same with a shape learned and without.

use crate::event::ShellProgress;

/// The `shellProgress` keys the reader types, in [`ShellProgress`]'s field order.
const PROGRESS_KEYS: [&str; 5] = [
    "elapsedMs",
    "lastOutputAgeMs",
    "totalLines",
    "totalBytes",
    "timeoutMs",
];

/// One part of a learned frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seg {
    /// Bytes `start..end` of the learned frame, again exactly.
    Fixed(u32, u32),
    /// The session id.
    Session,
    /// The tool call id.
    Call,
    /// The `shellProgress` number of [`PROGRESS_KEYS`]`[i]`.
    Progress(u8),
}

/// What a matching frame holds: its ids (borrowed from it) and its progress.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Beat<'t> {
    pub session: &'t str,
    pub call: &'t str,
    pub progress: ShellProgress,
}

/// A heartbeat frame's shape (see the module's documentation).
#[derive(Debug)]
pub(crate) struct Shape {
    frame: Box<[u8]>,
    segs: Vec<Seg>,
}

impl Shape {
    /// The shape of `text`, which the reader read as a heartbeat of `session` and `call` (slices of
    /// `text`) with `progress`; `None` when it holds an escape anywhere or its holes are not
    /// exactly where the reader found those values.
    pub(crate) fn learn(
        text: &str,
        session: &str,
        call: &str,
        progress: ShellProgress,
    ) -> Option<Self> {
        let b = text.as_bytes();
        if b.contains(&b'\\') || u32::try_from(b.len()).is_err() {
            return None;
        }
        let offset = |s: &str| (s.as_ptr() as usize).checked_sub(text.as_ptr() as usize);
        let (session_at, call_at) = (offset(session)?, offset(call)?);
        let mut segs = Vec::with_capacity(12);
        let mut fixed = 0usize;
        let mut cut = |segs: &mut Vec<Seg>, from: usize, hole: Seg, to: usize| {
            #[allow(clippy::cast_possible_truncation)] // the frame's length fits u32 (above)
            segs.push(Seg::Fixed(fixed as u32, from as u32));
            segs.push(hole);
            fixed = to;
        };
        // The key each open object is reading a value of, outermost first (`None` in arrays).
        let mut path: Vec<Option<&str>> = Vec::new();
        let mut in_object: Vec<bool> = Vec::new();
        let mut expect_key = false;
        let mut seen = (false, false, [false; 5]);
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'{' | b'[' => {
                    in_object.push(b[i] == b'{');
                    path.push(None);
                    expect_key = b[i] == b'{';
                    i += 1;
                }
                b'}' | b']' => {
                    in_object.pop();
                    path.pop();
                    expect_key = false;
                    i += 1;
                }
                b',' => {
                    expect_key = in_object.last() == Some(&true);
                    i += 1;
                }
                b'"' => {
                    let end = i + 1 + b[i + 1..].iter().position(|&c| c == b'"')?;
                    let s = text.get(i + 1..end)?;
                    if expect_key {
                        *path.last_mut()? = Some(s);
                        expect_key = false;
                    } else if at(&path, &["params", "sessionId"]) {
                        if seen.0 || i + 1 != session_at || s.len() != session.len() {
                            return None;
                        }
                        seen.0 = true;
                        cut(&mut segs, i + 1, Seg::Session, end);
                    } else if at(&path, &["params", "update", "toolCallId"]) {
                        if seen.1 || i + 1 != call_at || s.len() != call.len() {
                            return None;
                        }
                        seen.1 = true;
                        cut(&mut segs, i + 1, Seg::Call, end);
                    }
                    i = end + 1;
                }
                b'-' | b'0'..=b'9' => {
                    let start = i;
                    while i < b.len()
                        && matches!(b[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                    {
                        i += 1;
                    }
                    let n = &text[start..i];
                    let key = (path.len() == 5
                        && path[..4]
                            == [
                                Some("params"),
                                Some("update"),
                                Some("_meta"),
                                Some("shellProgress"),
                            ])
                    .then(|| path[4])
                    .flatten()
                    .and_then(|k| PROGRESS_KEYS.iter().position(|p| *p == k));
                    if let Some(k) = key {
                        // The reader typed this number: it must be what it read, once.
                        let value = integer(n.as_bytes())?;
                        if seen.2[k] || progress_field(&progress, k) != Some(value) {
                            return None;
                        }
                        seen.2[k] = true;
                        #[allow(clippy::cast_possible_truncation)] // k < 5
                        cut(&mut segs, start, Seg::Progress(k as u8), i);
                    }
                }
                _ => i += 1,
            }
        }
        // Both ids and every number the reader read came from a hole.
        let read = (0..5)
            .filter(|k| progress_field(&progress, *k).is_some())
            .count();
        if !seen.0 || !seen.1 || seen.2.iter().filter(|s| **s).count() != read {
            return None;
        }
        #[allow(clippy::cast_possible_truncation)] // the frame's length fits u32 (above)
        segs.push(Seg::Fixed(fixed as u32, b.len() as u32));
        segs.retain(|s| !matches!(s, Seg::Fixed(a, z) if a == z));
        Some(Self {
            frame: b.into(),
            segs,
        })
    }

    /// The heartbeat `text` is, when it has this shape.
    pub(crate) fn read<'t>(&self, text: &'t str) -> Option<Beat<'t>> {
        let b = text.as_bytes();
        let mut i = 0;
        let (mut session, mut call) = ("", "");
        let mut progress = ShellProgress::default();
        for seg in &self.segs {
            match *seg {
                Seg::Fixed(start, end) => {
                    let want = &self.frame[start as usize..end as usize];
                    if b.get(i..i + want.len())? != want {
                        return None;
                    }
                    i += want.len();
                }
                Seg::Session | Seg::Call => {
                    let start = i;
                    loop {
                        match *b.get(i)? {
                            b'"' => break,
                            b'\\' | 0..=0x1f => return None,
                            _ => i += 1,
                        }
                    }
                    // Cut at an ASCII quote: a character boundary of the valid UTF-8 `text`.
                    let s = text.get(start..i)?;
                    if *seg == Seg::Session {
                        session = s;
                    } else {
                        call = s;
                    }
                }
                Seg::Progress(k) => {
                    let start = i;
                    while b.get(i).is_some_and(u8::is_ascii_digit) {
                        i += 1;
                    }
                    let n = integer(&b[start..i])?;
                    *progress_slot(&mut progress, k.into()) = Some(n);
                }
            }
        }
        (i == b.len()).then_some(Beat {
            session,
            call,
            progress,
        })
    }
}

/// Whether the value being read sits at `keys` from the frame's root object.
fn at(path: &[Option<&str>], keys: &[&str]) -> bool {
    path.len() == keys.len() && path.iter().zip(keys).all(|(p, k)| *p == Some(*k))
}

/// A JSON integer as the reader types it into a `u64`: `0`, or digits without a leading zero, that
/// fit. `None` for anything else (a sign, a fraction, an exponent, too large).
fn integer(n: &[u8]) -> Option<u64> {
    match n {
        [] => None,
        [b'0'] => Some(0),
        [b'0', ..] => None,
        _ => n.iter().try_fold(0u64, |acc, d| {
            d.is_ascii_digit()
                .then(|| acc.checked_mul(10)?.checked_add(u64::from(d - b'0')))
                .flatten()
        }),
    }
}

fn progress_field(p: &ShellProgress, k: usize) -> Option<u64> {
    [
        p.elapsed_ms,
        p.last_output_age_ms,
        p.total_lines,
        p.total_bytes,
        p.timeout_ms,
    ][k]
}

fn progress_slot(p: &mut ShellProgress, k: usize) -> &mut Option<u64> {
    match k {
        0 => &mut p.elapsed_ms,
        1 => &mut p.last_output_age_ms,
        2 => &mut p.total_lines,
        3 => &mut p.total_bytes,
        _ => &mut p.timeout_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEAT: &str = r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s-1","update":{"_meta":{"toolName":"run_shell_command","shellProgress":{"type":"shell_progress","elapsedMs":10000,"timeoutMs":60000}},"status":"in_progress","toolCallId":"call_1","sessionUpdate":"tool_call_update"}}}"#;

    /// Where the reader finds `BEAT`'s session id and call id, and the progress it reads.
    fn read_by_the_reader() -> (usize, usize, ShellProgress) {
        let progress = ShellProgress {
            elapsed_ms: Some(10000),
            timeout_ms: Some(60000),
            ..ShellProgress::default()
        };
        (
            BEAT.find("s-1").unwrap(),
            BEAT.find("call_1").unwrap(),
            progress,
        )
    }

    fn learned() -> Shape {
        let (s, c, progress) = read_by_the_reader();
        Shape::learn(BEAT, &BEAT[s..s + 3], &BEAT[c..c + 6], progress).expect("learned")
    }

    #[test]
    fn f1_a_heartbeat_of_the_learned_shape_is_read_with_its_own_ids_and_numbers() {
        let shape = learned();
        let next = BEAT
            .replace("s-1", "another-session")
            .replace("call_1", "c")
            .replace("10000", "0")
            .replace("60000", "18446744073709551615");
        assert_eq!(
            shape.read(&next),
            Some(Beat {
                session: "another-session",
                call: "c",
                progress: ShellProgress {
                    elapsed_ms: Some(0),
                    timeout_ms: Some(u64::MAX),
                    ..ShellProgress::default()
                },
            })
        );
        assert_eq!(shape.read(BEAT).map(|b| b.call), Some("call_1"));
    }

    #[test]
    fn f1_anything_but_ids_and_plain_integers_in_the_holes_misses() {
        let shape = learned();
        for (from, to) in [
            ("10000", "010000"),
            ("10000", "-1"),
            ("10000", "1.5"),
            ("10000", "1e4"),
            ("10000", ""),
            ("60000", "18446744073709551616"),
            ("s-1", "s\\u002d1"),
            ("s-1", "s\u{1}1"),
            ("call_1", "call\\\"1"),
            ("in_progress", "completed"),
            ("run_shell_command", "read_file"),
            ("\"sessionUpdate\"", "\"sessionupdate\""),
            ("}}}", "}} }"),
            ("}}}", "}}},"),
        ] {
            let frame = BEAT.replacen(from, to, 1);
            assert_eq!(shape.read(&frame), None, "{frame}");
        }
        assert_eq!(shape.read(&BEAT[..BEAT.len() - 1]), None);
    }

    #[test]
    fn f1_a_shape_is_learned_only_where_the_reader_found_the_values() {
        let (s, c, progress) = read_by_the_reader();
        // The session id read elsewhere (the call's bytes), or numbers the reader did not read.
        assert!(Shape::learn(BEAT, &BEAT[c..c + 3], &BEAT[c..c + 6], progress).is_none());
        let other = ShellProgress {
            elapsed_ms: Some(1),
            ..progress
        };
        assert!(Shape::learn(BEAT, &BEAT[s..s + 3], &BEAT[c..c + 6], other).is_none());
        let fewer = ShellProgress {
            timeout_ms: None,
            ..progress
        };
        assert!(Shape::learn(BEAT, &BEAT[s..s + 3], &BEAT[c..c + 6], fewer).is_none());
        // An escape anywhere: not learned.
        let escaped = BEAT.replace("run_shell_command", "run\\u005fshell");
        let s = escaped.find("s-1").unwrap();
        let c = escaped.find("call_1").unwrap();
        assert!(Shape::learn(&escaped, &escaped[s..s + 3], &escaped[c..c + 6], progress).is_none());
    }
}
