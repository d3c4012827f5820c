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

/// One part of a long Markdown text: a slice of the original (`body`; the bodies of all parts,
/// concatenated, are the text), with the code fence that was open at its start opened again
/// (`reopen`, with its language) and, when one is open at its end, closed (`close`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part<'a> {
    /// The fence line opened again before the body (`` ```rust\n ``), when the part starts in code.
    pub reopen: Option<String>,
    /// The slice of the original text.
    pub body: &'a str,
    /// Whether a fence is closed after the body (the part ends in code).
    pub close: bool,
}

impl Part<'_> {
    /// The part as it is sent: reopen, body, close.
    #[must_use]
    pub fn render(&self) -> String {
        let mut s = self.reopen.clone().unwrap_or_default();
        s.push_str(self.body);
        if self.close {
            if !s.ends_with('\n') {
                s.push('\n');
            }
            s.push_str("```");
        }
        s
    }
}

/// The room a part keeps for closing a fence.
const CLOSE_ROOM: usize = 4;

/// A fence line (`` ``` `` or `` ```lang ``, indented at most three spaces): its info string.
fn fence_info(line: &str) -> Option<&str> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    (indent <= 3)
        .then(|| line.trim_start_matches(' ').strip_prefix("```"))
        .flatten()
        .map(str::trim)
}

/// Splits Markdown `text` into parts of at most `max` characters each once rendered (at least 64),
/// at paragraph boundaries (a blank line or the end of a code block) where one falls in the latter
/// two thirds of a part, else at a line end, and inside an overlong line only when it must. A
/// code fence open at a cut is closed and opened again with its language in the next part.
#[must_use]
pub fn split_markdown_parts(text: &str, max: usize) -> Vec<Part<'_>> {
    struct Line {
        start: usize,
        chars: usize,
        open_before: Option<String>,
        break_after: bool,
    }
    let max = max.max(64);
    let mut lines = Vec::new();
    let mut open: Option<String> = None;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let open_before = open.clone();
        let fence = fence_info(line.trim_end_matches(['\n', '\r']));
        if let Some(info) = fence {
            open = match open {
                Some(_) => None,
                None => Some(info.to_owned()),
            };
        }
        let closes = fence.is_some() && open.is_none();
        lines.push(Line {
            start: at,
            chars: line.chars().count(),
            open_before,
            break_after: closes || (open.is_none() && line.trim().is_empty()),
        });
        at += line.len();
    }
    let open_at = |i: usize| -> Option<String> {
        match lines.get(i) {
            Some(l) => l.open_before.clone(),
            None => None,
        }
    };
    let mut parts = Vec::new();
    let (mut i, mut offset) = (0usize, 0usize);
    while i < lines.len() {
        let start = lines[i].start + offset;
        // The language comes along when it leaves room for text (a long info string does not).
        let reopen = open_at(i).map(|lang| {
            if lang.chars().count() <= max / 4 {
                format!("```{lang}\n")
            } else {
                "```\n".to_owned()
            }
        });
        let budget = max - reopen.as_ref().map_or(0, |r| r.chars().count()) - CLOSE_ROOM;
        let first_chars = if offset == 0 {
            lines[i].chars
        } else {
            text[start..lines.get(i + 1).map_or(text.len(), |l| l.start)]
                .chars()
                .count()
        };
        let (mut used, mut j, mut best) = (0usize, i, None);
        while j < lines.len() {
            let n = if j == i { first_chars } else { lines[j].chars };
            if used + n > budget {
                break;
            }
            used += n;
            j += 1;
            if lines[j - 1].break_after && used * 3 >= budget {
                best = Some(j);
            }
        }
        if j == lines.len() {
            // A fence the text leaves open is closed too: every part renders balanced.
            parts.push(Part {
                reopen,
                body: &text[start..],
                close: open.is_some(),
            });
            break;
        }
        if j == i {
            // One line longer than a part: cut it at a character boundary.
            let line_end = lines.get(i + 1).map_or(text.len(), |l| l.start);
            let cut = text[start..line_end]
                .char_indices()
                .nth(budget.max(1))
                .map_or(line_end, |(b, _)| start + b);
            parts.push(Part {
                reopen,
                body: &text[start..cut],
                close: lines[i].open_before.is_some(),
            });
            offset = cut - lines[i].start;
            if cut == line_end {
                i += 1;
                offset = 0;
            }
            continue;
        }
        let end = best.unwrap_or(j);
        parts.push(Part {
            reopen,
            body: &text[start..lines[end].start],
            close: lines[end].open_before.is_some(),
        });
        (i, offset) = (end, 0);
    }
    parts
}

/// [`split_markdown_parts`], rendered: chunks of at most `max` characters (at least 64), fences
/// balanced in each.
#[must_use]
pub fn split_markdown(text: &str, max: usize) -> Vec<String> {
    split_markdown_parts(text, max)
        .iter()
        .map(Part::render)
        .collect()
}

/// The start of `text` for a preview: at most `max` characters, cut at a paragraph or line end
/// when one falls in its second half, a fence left open closed.
#[must_use]
pub fn preview(text: &str, max: usize) -> String {
    split_markdown_parts(text, max)
        .first()
        .map(Part::render)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_markdown_prefers_paragraphs_keeps_fences_balanced_and_loses_nothing() {
        let para = |i: usize| format!("Paragraph {i} says something useful here.\n\n");
        let mut text: String = (1..=6).map(para).collect();
        text.push_str("```rust\n");
        text.push_str(
            &(0..20)
                .map(|i| format!("fn f{i}() {{}}\n"))
                .collect::<String>(),
        );
        text.push_str("```\n\nthe end");
        let parts = split_markdown_parts(&text, 120);
        assert_eq!(parts.iter().map(|p| p.body).collect::<String>(), text);
        for p in &parts {
            let r = p.render();
            assert!(r.chars().count() <= 120, "{r:?}");
            let fences = r.lines().filter(|l| l.starts_with("```")).count();
            assert_eq!(fences % 2, 0, "balanced: {r:?}");
        }
        // Cuts at blank lines where they can: every part but the last ends a paragraph.
        assert!(parts[0].body.ends_with("\n\n"), "{:?}", parts[0].body);
        assert!(
            parts
                .iter()
                .any(|p| p.reopen.as_deref() == Some("```rust\n")),
            "a cut inside the code block reopens it with its language: {parts:#?}"
        );
        // An overlong line is cut by characters; multi-byte characters stay whole.
        let long = "é".repeat(300);
        let parts = split_markdown_parts(&long, 100);
        assert!(parts.len() >= 3);
        assert_eq!(parts.iter().map(|p| p.body).collect::<String>(), long);
        assert!(split_markdown("", 100).is_empty());
        assert_eq!(preview("short", 100), "short");
    }

    #[test]
    fn no_part_exceeds_the_limit_whatever_the_text() {
        // A fence whose info string is nearly a part long used to be reopened whole, and the part
        // grew past the limit.
        let pieces = [
            "a", "\n", "```", "```rust", " ", "\n\n", "é", "bb bb", "```\n", "x\r\n",
        ];
        let mut seed = 12_345u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) as usize
        };
        for _ in 0..5_000 {
            let len = next() % 300;
            let text: String = (0..len).map(|_| pieces[next() % pieces.len()]).collect();
            let parts = split_markdown_parts(&text, 64);
            assert_eq!(parts.iter().map(|p| p.body).collect::<String>(), text);
            for p in &parts {
                let r = p.render();
                assert!(r.chars().count() <= 64, "{text:?} → {r:?}");
            }
        }
        let long_info = format!("```{}\n{}\n```", "i".repeat(60), "code line\n".repeat(30));
        for p in split_markdown(&long_info, 64) {
            assert!(p.chars().count() <= 64, "{p:?}");
        }
    }

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
