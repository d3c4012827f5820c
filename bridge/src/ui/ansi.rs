//! Terminal output as inert HTML: SGR colours become `<span class>`s, every other escape sequence
//! (cursor moves, screen clears, OSC titles and hyperlinks) is dropped, and control characters that
//! would hide or reorder text (C0 controls, bidirectional overrides — Trojan Source) are shown as
//! visible placeholders. The result is HTML-escaped; nothing in the input can become markup.

use std::fmt::Write as _;

/// A character a page should show instead of the control character `c`, if `c` must not reach
/// the page as itself.
fn placeholder(c: char) -> Option<String> {
    match c {
        '\n' | '\t' => None,
        '\u{0}'..='\u{1f}' => char::from_u32(0x2400 + c as u32).map(String::from),
        '\u{7f}' => Some("\u{2421}".into()),
        '\u{80}'..='\u{9f}'
        | '\u{200e}'
        | '\u{200f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}' => Some(format!("[U+{:04X}]", c as u32)),
        _ => None,
    }
}

/// `s` with control characters replaced by visible placeholders (titles, prompts, ids on a page).
#[must_use]
pub fn visible(s: &str) -> String {
    if !s.chars().any(|c| placeholder(c).is_some()) {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match placeholder(c) {
            Some(p) => out.push_str(&p),
            None => out.push(c),
        }
    }
    out
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '<' => out.push_str("&lt;"),
        '>' => out.push_str("&gt;"),
        '&' => out.push_str("&amp;"),
        '"' => out.push_str("&quot;"),
        '\'' => out.push_str("&#39;"),
        c => match placeholder(c) {
            Some(p) => out.push_str(&p),
            None => out.push(c),
        },
    }
}

/// The SGR state that decides a span's classes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Style {
    fg: Option<u8>,
    bg: Option<u8>,
    bold: bool,
    dim: bool,
    italic: bool,
    underline: bool,
}

impl Style {
    fn apply(&mut self, params: &str) {
        let mut it = params.split(';').map(|p| p.parse::<u16>().unwrap_or(0));
        if params.is_empty() {
            *self = Self::default();
            return;
        }
        while let Some(p) = it.next() {
            match p {
                0 => *self = Self::default(),
                1 => self.bold = true,
                2 => self.dim = true,
                3 => self.italic = true,
                4 => self.underline = true,
                22 => (self.bold, self.dim) = (false, false),
                23 => self.italic = false,
                24 => self.underline = false,
                30..=37 => self.fg = u8::try_from(p - 30).ok(),
                90..=97 => self.fg = u8::try_from(p - 90 + 8).ok(),
                39 => self.fg = None,
                40..=47 => self.bg = u8::try_from(p - 40).ok(),
                100..=107 => self.bg = u8::try_from(p - 100 + 8).ok(),
                49 => self.bg = None,
                // 256-colour and true-colour forms: the 16 basic colours map; the rest are skipped.
                38 | 48 => {
                    let colour = match it.next() {
                        Some(5) => it
                            .next()
                            .and_then(|n| u8::try_from(n).ok())
                            .filter(|n| *n < 16),
                        Some(2) => {
                            let _ = (it.next(), it.next(), it.next());
                            None
                        }
                        _ => None,
                    };
                    if p == 38 {
                        self.fg = colour;
                    } else {
                        self.bg = colour;
                    }
                }
                _ => {}
            }
        }
    }

    fn classes(self) -> Option<String> {
        if self == Self::default() {
            return None;
        }
        let mut c = String::new();
        if let Some(f) = self.fg {
            let _ = write!(c, "f{f} ");
        }
        if let Some(b) = self.bg {
            let _ = write!(c, "b{b} ");
        }
        for (on, name) in [
            (self.bold, "bo"),
            (self.dim, "di"),
            (self.italic, "it"),
            (self.underline, "un"),
        ] {
            if on {
                c.push_str(name);
                c.push(' ');
            }
        }
        Some(c.trim_end().to_owned())
    }
}

/// The most characters an escape sequence may span before it is taken to be unfinished and the
/// text after it is shown again.
const MAX_SEQUENCE: usize = 4096;

/// `text` (terminal output) as escaped HTML with its SGR colours as spans, for inside a `<pre>`.
#[must_use]
pub fn to_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    let mut style = Style::default();
    let mut open = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.peek().copied() {
                Some('[') => {
                    chars.next();
                    // CSI: parameters and intermediates (0x20–0x3f) up to a final byte 0x40–0x7e.
                    // Anything else (a newline, another ESC, a control) ends the sequence
                    // unfinished; the sequence is dropped and that character is kept.
                    let mut params = String::new();
                    let mut fin = None;
                    let mut len = 0;
                    while let Some(&p) = chars.peek() {
                        if ('\u{40}'..='\u{7e}').contains(&p) {
                            chars.next();
                            fin = Some(p);
                            break;
                        }
                        if !('\u{20}'..='\u{3f}').contains(&p) || len >= MAX_SEQUENCE {
                            break;
                        }
                        chars.next();
                        len += 1;
                        if params.len() < 64 {
                            params.push(p);
                        }
                    }
                    if fin == Some('m') && params.bytes().all(|b| b.is_ascii_digit() || b == b';') {
                        let before = style;
                        style.apply(&params);
                        if style != before {
                            if open {
                                out.push_str("</span>");
                                open = false;
                            }
                            if let Some(classes) = style.classes() {
                                let _ = write!(out, "<span class=\"{classes}\">");
                                open = true;
                            }
                        }
                    }
                }
                Some(']' | 'P' | '_' | '^' | 'X') => {
                    chars.next();
                    // OSC / DCS / APC / PM / SOS: up to BEL or ST (ESC \), or — never terminated —
                    // up to the end of the line, another escape, or `MAX_SEQUENCE` characters,
                    // whichever comes first. Only the sequence is dropped: what ends an unfinished
                    // one (the newline, the next escape, the text after the bound) is kept.
                    let mut len = 0;
                    while let Some(&p) = chars.peek() {
                        if p == '\n' || len >= MAX_SEQUENCE {
                            break;
                        }
                        if p == '\u{1b}' {
                            let mut ahead = chars.clone();
                            ahead.next();
                            if ahead.peek() == Some(&'\\') {
                                chars.next();
                                chars.next();
                            }
                            // Otherwise a new escape sequence starts here.
                            break;
                        }
                        chars.next();
                        len += 1;
                        if p == '\u{7}' {
                            break;
                        }
                    }
                }
                // nF escapes (ESC, intermediates 0x20–0x2f, a final 0x30–0x7e, e.g. `ESC ( B`) and
                // two-character escapes (`ESC 7`, `ESC =`) are dropped whole.
                Some(p) if ('\u{20}'..='\u{7e}').contains(&p) => {
                    chars.next();
                    if ('\u{20}'..='\u{2f}').contains(&p) {
                        while let Some(&q) = chars.peek() {
                            if ('\u{20}'..='\u{2f}').contains(&q) {
                                chars.next();
                            } else {
                                if ('\u{30}'..='\u{7e}').contains(&q) {
                                    chars.next();
                                }
                                break;
                            }
                        }
                    }
                }
                // ESC before a newline, a control or the end: only the ESC is dropped.
                _ => {}
            },
            '\r' => {
                if chars.peek() != Some(&'\n') {
                    out.push('\n');
                }
            }
            c => push_escaped(&mut out, c),
        }
    }
    if open {
        out.push_str("</span>");
    }
    out
}

/// `text` without any escape sequence (for the plain-text parts of a page, e.g. a summary).
#[must_use]
pub fn strip(text: &str) -> String {
    let html = to_html(text);
    // Cheap and exact: `to_html` only ever adds spans and entities.
    let mut out = String::with_capacity(html.len());
    let mut rest = html.as_str();
    while let Some(i) = rest.find('<') {
        out.push_str(&rest[..i]);
        rest = rest[i..].find('>').map_or("", |j| &rest[i + j + 1..]);
    }
    out.push_str(rest);
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_become_spans_and_markup_stays_text() {
        let html = to_html("\u{1b}[31mred <b>\u{1b}[0m & \u{1b}[1;92mok\u{1b}[m");
        assert_eq!(
            html,
            "<span class=\"f1\">red &lt;b&gt;</span> &amp; <span class=\"f10 bo\">ok</span>"
        );
    }

    #[test]
    fn cursor_moves_clears_and_osc_are_dropped() {
        let html = to_html(
            "a\u{1b}[2J\u{1b}[H\u{1b}[1A\u{1b}]0;title\u{7}b\u{1b}]8;;http://x\u{1b}\\c\u{1b}7d",
        );
        assert_eq!(html, "abcd");
    }

    #[test]
    fn controls_and_bidi_overrides_are_visible() {
        assert_eq!(
            to_html("a\u{0}b\u{202e}c\r\nd\re"),
            "a\u{2400}b[U+202E]c\nd\ne"
        );
        assert_eq!(visible("x\u{8}\u{2066}y"), "x\u{2408}[U+2066]y");
        assert_eq!(strip("\u{1b}[31m<a>&\u{1b}[0m"), "<a>&");
    }

    #[test]
    fn unterminated_sequences_end_the_text_quietly() {
        assert_eq!(to_html("ok\u{1b}[31"), "ok");
        assert_eq!(to_html("ok\u{1b}]0;never ends"), "ok");
        assert_eq!(to_html("ok\u{1b}"), "ok");
    }

    #[test]
    fn an_unterminated_string_sequence_drops_only_itself() {
        // printf 'A-before\033]0;never-terminated\nB-after-osc\n'
        assert_eq!(
            to_html("A-before\u{1b}]0;never-terminated\nB-after-osc\n"),
            "A-before\nB-after-osc\n"
        );
        for intro in ['P', '_', '^', 'X'] {
            assert_eq!(
                to_html(&format!("A\u{1b}{intro}q never ends\nB\n")),
                "A\nB\n",
                "ESC {intro}"
            );
        }
        // Another escape ends it too, and is itself obeyed.
        assert_eq!(
            to_html("a\u{1b}]0;t\u{1b}[31mred\u{1b}[0m"),
            "a<span class=\"f1\">red</span>"
        );
        // Without a newline, at most MAX_SEQUENCE characters go.
        let long = format!("a\u{1b}]{}tail", "x".repeat(MAX_SEQUENCE + 3));
        assert_eq!(to_html(&long), "axxxtail");
        // An unfinished CSI ends at a newline; an ESC before a newline keeps the newline.
        assert_eq!(to_html("a\u{1b}[1;2\nb"), "a\nb");
        assert_eq!(to_html("a\u{1b}\nb\u{1b}(Bc"), "a\nbc");
    }

    /// A small deterministic generator (xorshift), so the property test needs no extra crate.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    #[test]
    fn every_plain_line_survives_arbitrary_bytes() {
        // Bytes weighted towards what starts, continues and ends escape sequences.
        const ALPHABET: &[u8] = b"\x1b\x1b\x1b[[]]P_^X\\\x07\n\n\n\r;0123456789mHJabc xyz\x00\x7f(";
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..20_000 {
            let len = usize::try_from(rng.next() % 80).unwrap_or(0);
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    let r = rng.next();
                    if r.is_multiple_of(7) {
                        u8::try_from(r >> 8 & 0xff).unwrap_or(0)
                    } else {
                        ALPHABET[usize::try_from(r >> 8).unwrap_or(0) % ALPHABET.len()]
                    }
                })
                .collect();
            let input = String::from_utf8_lossy(&bytes).into_owned();
            let shown = strip(&input);
            let shown_lines: Vec<&str> = shown.split('\n').collect();
            // No sequence spans a newline, so every line made only of plain text is on the page.
            for line in input.split('\n') {
                if !line.is_empty()
                    && line
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b' ' || b == b';')
                {
                    assert!(
                        shown_lines.contains(&line),
                        "{line:?} lost from {input:?}: {shown:?}"
                    );
                }
            }
        }
    }
}
