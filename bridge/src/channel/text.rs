//! Text helpers every chat adapter shares: cutting to a character limit and splitting command
//! output into fenced code chunks that each stay under a platform's limit (no fence is ever left
//! open; when not everything fits, the tail is kept — the end of the output is what people need),
//! and the typed mention segment: how the core marks a person it names on purpose, so each adapter
//! can turn it into its platform's mention while escaping everything else (R8).

/// Opens a deliberate mention inside neutral text (U+FFF9, an annotation anchor no keyboard types;
/// adapters drop it from inbound text so it cannot be forged by a person).
pub const MENTION_START: char = '\u{fff9}';
/// Closes a deliberate mention (U+FFFB).
pub const MENTION_END: char = '\u{fffb}';

/// Whether `id` can be a platform user id (letters, digits, `_ - .`; at most 64).
fn is_user_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// A deliberate mention of `user` for neutral text: Slack renders it `<@U…>`, Discord `<@id>`, the
/// console `@user`. Everything else in a message is escaped and never pings. Something that is not a
/// user id is returned as plain text.
#[must_use]
pub fn mention(user: &str) -> String {
    if is_user_id(user) {
        format!("{MENTION_START}{user}{MENTION_END}")
    } else {
        user.to_owned()
    }
}

/// A piece of neutral text: plain text (escape it) or a deliberate mention (the user id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment<'a> {
    /// Text to show as written.
    Text(&'a str),
    /// A person the bridge names on purpose.
    Mention(&'a str),
}

/// Splits neutral text into plain text and deliberate mentions. A marker that does not enclose a
/// user id is plain text.
#[must_use]
pub fn segments(s: &str) -> Vec<Segment<'_>> {
    let mut out = Vec::new();
    let mut rest = s;
    let mut text_from = 0;
    let mut pos = 0;
    while let Some(start) = rest.find(MENTION_START) {
        let after = &rest[start + MENTION_START.len_utf8()..];
        let Some(end) = after.find(MENTION_END) else {
            break;
        };
        let id = &after[..end];
        let consumed = start + MENTION_START.len_utf8() + end + MENTION_END.len_utf8();
        if is_user_id(id) {
            let here = pos + start;
            if here > text_from {
                out.push(Segment::Text(&s[text_from..here]));
            }
            out.push(Segment::Mention(id));
            text_from = pos + consumed;
        }
        pos += consumed;
        rest = &rest[consumed..];
    }
    if text_from < s.len() {
        out.push(Segment::Text(&s[text_from..]));
    }
    out
}

/// Neutral text with each deliberate mention written `@user` (the console, logs, plain text).
#[must_use]
pub fn plain(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains(MENTION_START) {
        return std::borrow::Cow::Borrowed(s);
    }
    std::borrow::Cow::Owned(
        segments(s)
            .into_iter()
            .map(|seg| match seg {
                Segment::Text(t) => std::borrow::Cow::Borrowed(t),
                Segment::Mention(u) => std::borrow::Cow::Owned(format!("@{u}")),
            })
            .collect(),
    )
}

/// `s` safe to write to a terminal: control characters other than newline and tab are shown as
/// their visible symbols (ESC as `␛`, BEL as `␇`, DEL as `␡`; C1 controls as `�`), so command output
/// or a hostile daemon cannot retitle, clear or write the clipboard of an operator's terminal
/// (OSC and CSI sequences) when the console or `chat-bridge history` prints it. Borrows when there
/// is nothing to change.
#[must_use]
pub fn terminal_safe(s: &str) -> std::borrow::Cow<'_, str> {
    // Bidirectional overrides and isolates reorder what follows them on screen (Trojan Source):
    // shown as U+FFFD like other controls.
    let bidi = |c: char| matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    let unsafe_char = |c: char| (c.is_control() && c != '\n' && c != '\t') || bidi(c);
    if !s.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(s);
    }
    std::borrow::Cow::Owned(
        s.chars()
            .map(|c| match c {
                '\n' | '\t' => c,
                '\u{0}'..='\u{1f}' => char::from_u32(0x2400 + c as u32).unwrap_or('\u{fffd}'),
                '\u{7f}' => '\u{2421}',
                c if c.is_control() || bidi(c) => '\u{fffd}',
                c => c,
            })
            .collect(),
    )
}

/// `s` cut to at most `max` characters, with `…` when it was cut.
#[must_use]
pub fn truncate_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Splits escaped `code` into chunks of at most `max` characters each, at line ends where possible.
#[must_use]
pub fn split_code(code: &str, max: usize) -> Vec<String> {
    let mut chunks = Vec::new();
    let mut current = String::new();
    let mut len = 0usize;
    for line in code.split_inclusive('\n') {
        let mut rest = line;
        loop {
            let n = rest.chars().count();
            if len + n <= max {
                current.push_str(rest);
                len += n;
                break;
            }
            if len > 0 {
                chunks.push(std::mem::take(&mut current));
                len = 0;
                continue;
            }
            // A single line longer than a chunk: cut it.
            let cut: String = rest.chars().take(max).collect();
            rest = &rest[cut.len()..];
            chunks.push(cut);
        }
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    chunks
}

/// Fences `code` in chunks of at most `chunk_limit` characters each (fences included), at most
/// `room_chunks` chunks and `room_chars` characters in all. When the output does not fit, the tail
/// is kept and the first item says how many earlier lines are not shown.
#[must_use]
pub fn fenced_tail(
    code: &str,
    chunk_limit: usize,
    room_chunks: usize,
    room_chars: usize,
) -> Vec<String> {
    // Triple backticks inside output would close the fence early.
    let code = code.replace("```", "`\u{200b}``");
    let fence_overhead = 8;
    let mut chunks = split_code(&code, chunk_limit.saturating_sub(fence_overhead).max(1));
    let notice_room = 100;
    let mut kept = Vec::new();
    let mut total = 0;
    while let Some(chunk) = chunks.pop() {
        let last_room = if chunks.is_empty() { 0 } else { notice_room };
        if kept.len() + usize::from(!chunks.is_empty()) >= room_chunks.max(1)
            || total + chunk.len() + fence_overhead + last_room > room_chars
        {
            let dropped: usize =
                chunks.iter().map(|c| c.lines().count()).sum::<usize>() + chunk.lines().count();
            kept.push(format!(
                "_… {dropped} earlier lines not shown here; the full output is kept (see below)_"
            ));
            break;
        }
        total += chunk.len() + fence_overhead;
        kept.push(format!("```\n{}```", chunk.trim_end_matches('\n')));
    }
    kept.reverse();
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_code_breaks_at_lines_and_cuts_only_overlong_lines() {
        assert_eq!(split_code("aa\nbb\ncc\n", 6), ["aa\nbb\n", "cc\n"]);
        let long = "x".repeat(25);
        let chunks = split_code(&long, 10);
        assert_eq!(
            chunks.iter().map(String::len).collect::<Vec<_>>(),
            [10, 10, 5]
        );
    }

    #[test]
    fn fenced_tail_keeps_the_end_within_every_limit_and_says_what_it_left_out() {
        let code: String = (1..=2000).map(|i| format!("line {i}\n")).collect();
        let out = fenced_tail(&code, 500, 5, 1800);
        assert!(out.len() <= 5, "{}", out.len());
        assert!(out.iter().map(String::len).sum::<usize>() <= 1800);
        assert!(
            out[0].starts_with("_… ") && out[0].contains("earlier lines"),
            "{}",
            out[0]
        );
        for chunk in &out[1..] {
            assert!(
                chunk.starts_with("```\n") && chunk.ends_with("```") && chunk.len() <= 500,
                "{chunk}"
            );
        }
        assert!(
            out.last().is_some_and(|c| c.contains("line 2000")),
            "the tail is kept"
        );
        // Everything fits: no notice, and a fence inside output cannot close ours.
        let out = fenced_tail("a\n```\nb\n", 500, 5, 1800);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].matches("```").count(), 2, "{}", out[0]);
    }

    #[test]
    fn r8_mention_segments_split_text_and_deliberate_mentions() {
        let s = format!("{} chose: Allow <@U9> {}", mention("U1"), mention("bad id"));
        assert_eq!(
            segments(&s),
            [
                Segment::Mention("U1"),
                Segment::Text(" chose: Allow <@U9> bad id")
            ]
        );
        assert_eq!(plain(&s), "@U1 chose: Allow <@U9> bad id");
        // An unclosed or empty marker is text, and nothing is lost.
        let odd = format!("a{MENTION_START}{MENTION_END}b{MENTION_START}U2");
        assert_eq!(segments(&odd), [Segment::Text(&odd)]);
        assert!(segments("").is_empty());
    }

    #[test]
    fn s4_terminal_escapes_are_shown_not_obeyed() {
        let hostile = "ok\u{1b}]0;TITLE\u{7}\u{1b}[2J\r\tend\u{7f}\u{9b}\nnext";
        let safe = super::terminal_safe(hostile);
        assert_eq!(safe, "ok␛]0;TITLE␇␛[2J␍\tend␡\u{fffd}\nnext");
        assert!(
            !safe
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t')
        );
        assert!(matches!(
            super::terminal_safe("plain\ttext\n"),
            std::borrow::Cow::Borrowed(_)
        ));
        // Trojan Source: an override or isolate cannot reorder what the terminal shows.
        assert_eq!(
            super::terminal_safe("rm \u{202e}fdp.exe\u{2066}x\u{2069}"),
            "rm \u{fffd}fdp.exe\u{fffd}x\u{fffd}"
        );
    }
}
