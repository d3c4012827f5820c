//! Slack's message format, both ways, in one place (Slack's "Formatting text for app surfaces").
//!
//! **In.** Slack sends what a person typed encoded: `&lt; &gt; &amp;` for `< > &`, links as
//! `<https://x>` or `<https://x|label>`, `<mailto:a@b|a@b>`, people as `<@U…>`, channels as
//! `<#C…|name>`, and `<!here>`, `<!channel>`, `<!everyone>`, `<!subteam^S…|@team>`,
//! `<!date^…|fallback>`. [`decode`] turns that back into the text the person typed, so
//! `echo hi > f && cat f`, `2>&1` and URLs reach the agent as typed (R8).
//!
//! **Out.** [`escape`] encodes `& < >` in user and agent text, so nothing a person or the agent wrote
//! can ping (`<!channel>` shows as text) or break formatting; [`mrkdwn`] does that to neutral text
//! while turning the bridge's own deliberate mentions ([`crate::channel::text::mention`]) into
//! Slack's `<@U…>`.

use std::borrow::Cow;

use crate::channel::text::{MENTION_END, MENTION_START, Segment, segments};

/// The text a person typed, from Slack's encoded `text`.
///
/// People become `@U…` (their id: ids are how allowlists and `/invite` name people; a legacy label
/// is not trusted over the id), channels `#name` (or `#C…`), special mentions `@here`, `@channel`,
/// `@everyone`, a user group its label (`@team`), a date its fallback text, a link its URL — or its
/// label when the label is what was typed (`<http://example.com|example.com>` → `example.com`), and
/// `label (URL)` when a label hides a different URL. A `<` with no closing `>` is kept as it is.
/// The bridge's own mention markers are never let in from a person's text.
#[must_use]
pub fn decode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('<') {
        push_unescaped(&mut out, &rest[..open]);
        let after = &rest[open + 1..];
        match after.find(['>', '<']) {
            Some(close) if after[close..].starts_with('>') => {
                decode_control(&mut out, &after[..close]);
                rest = &after[close + 1..];
            }
            _ => {
                out.push('<');
                rest = after;
            }
        }
    }
    push_unescaped(&mut out, rest);
    out.replace([MENTION_START, MENTION_END], "\u{fffd}")
}

/// `&lt; &gt; &amp;` back to `< > &`, in one pass (`&amp;lt;` is `&lt;`, typed).
fn push_unescaped(out: &mut String, s: &str) {
    let mut rest = s;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let (ch, len) = if tail.starts_with("&amp;") {
            ('&', 5)
        } else if tail.starts_with("&lt;") {
            ('<', 4)
        } else if tail.starts_with("&gt;") {
            ('>', 4)
        } else {
            ('&', 1)
        };
        out.push(ch);
        rest = &tail[len..];
    }
    out.push_str(rest);
}

fn unescaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    push_unescaped(&mut out, s);
    out
}

/// One `<…>` control sequence (without its brackets).
fn decode_control(out: &mut String, inner: &str) {
    let (target, label) = match inner.split_once('|') {
        Some((t, l)) => (t, Some(l).filter(|l| !l.is_empty())),
        None => (inner, None),
    };
    if let Some(user) = target.strip_prefix('@') {
        out.push('@');
        out.push_str(user);
    } else if let Some(channel) = target.strip_prefix('#') {
        out.push('#');
        push_unescaped(out, label.unwrap_or(channel));
    } else if let Some(special) = target.strip_prefix('!') {
        match (
            special.split_once('^').map_or(special, |(kind, _)| kind),
            label,
        ) {
            ("here" | "channel" | "everyone", _) => {
                out.push('@');
                out.push_str(special);
            }
            (_, Some(label)) => push_unescaped(out, label),
            ("subteam", None) => {
                out.push('@');
                out.push_str(special.trim_start_matches("subteam^"));
            }
            (_, None) => {
                out.push('@');
                out.push_str(special);
            }
        }
    } else {
        let url = unescaped(target);
        match label.map(unescaped) {
            None => out.push_str(&url),
            Some(label) if label_is_typed(&url, &label) => out.push_str(&label),
            Some(label) => {
                out.push_str(&label);
                out.push_str(" (");
                out.push_str(&url);
                out.push(')');
            }
        }
    }
}

/// Whether a link's label is what the person typed (Slack adds the scheme to `example.com`).
fn label_is_typed(url: &str, label: &str) -> bool {
    let bare = ["https://", "http://", "mailto:"]
        .iter()
        .find_map(|scheme| url.strip_prefix(scheme))
        .unwrap_or(url);
    label == url || label == bare || label.trim_end_matches('/') == bare.trim_end_matches('/')
}

/// `&`, `<` and `>` escaped as Slack requires, so text shows as written and never pings.
#[must_use]
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.contains(['&', '<', '>']) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Neutral text as Slack text: everything escaped, except the bridge's deliberate mentions, which
/// become `<@U…>` (names show and the person is notified).
#[must_use]
pub fn mrkdwn(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 16);
    for segment in segments(s) {
        match segment {
            Segment::Text(t) => out.push_str(&escape(t)),
            Segment::Mention(user) => {
                out.push_str("<@");
                out.push_str(&escape(user));
                out.push('>');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::text::mention;

    #[test]
    fn r8_slack_decode_turns_every_documented_form_into_what_was_typed() {
        let table = [
            // Entities, in one pass.
            ("echo hi &gt; f &amp;&amp; cat f", "echo hi > f && cat f"),
            ("make 2&gt;&amp;1 | tee log", "make 2>&1 | tee log"),
            ("a &lt;b&gt; c", "a <b> c"),
            ("&amp;lt; is typed", "&lt; is typed"),
            ("AT&T & co", "AT&T & co"),
            // Links.
            (
                "curl <https://x.io/a?b=1&amp;c=2>",
                "curl https://x.io/a?b=1&c=2",
            ),
            ("open <https://x.io|x.io>", "open x.io"),
            ("see <http://example.com/|example.com>", "see example.com"),
            (
                "<https://x.io/docs|the docs>",
                "the docs (https://x.io/docs)",
            ),
            ("<https://x.io/|https://x.io/>", "https://x.io/"),
            ("mail <mailto:a@b.io|a@b.io>", "mail a@b.io"),
            // People, channels, groups.
            ("ask <@U0123ABCD>", "ask @U0123ABCD"),
            ("ask <@U0123ABCD|alice>", "ask @U0123ABCD"),
            ("in <#C024BE7LR|general>", "in #general"),
            ("in <#C024BE7LR>", "in #C024BE7LR"),
            ("<!subteam^SAZ94GDB8|@oncall> look", "@oncall look"),
            ("<!subteam^SAZ94GDB8> look", "@SAZ94GDB8 look"),
            // Special mentions and dates.
            ("<!here> <!channel> <!everyone>", "@here @channel @everyone"),
            ("<!here|here>", "@here"),
            (
                "<!date^1392734382^Posted {date_num}|Posted 2014-02-18> ok",
                "Posted 2014-02-18 ok",
            ),
            // Not a control sequence: kept.
            ("a < b", "a < b"),
            ("x <y <https://z.io>", "x <y https://z.io"),
            ("", ""),
        ];
        for (wire, typed) in table {
            assert_eq!(decode(wire), typed, "decoding {wire:?}");
        }
    }

    #[test]
    fn r8_slack_decode_never_lets_a_forged_mention_marker_in() {
        let forged = format!("hi {}", mention("U1"));
        assert!(!decode(&forged).contains([MENTION_START, MENTION_END]));
    }

    #[test]
    fn r8_slack_escape_and_mrkdwn_never_ping_from_text_but_keep_deliberate_mentions() {
        let table = [
            ("<!channel> hi", "&lt;!channel&gt; hi"),
            ("<@U1> & <#C1>", "&lt;@U1&gt; &amp; &lt;#C1&gt;"),
            ("echo hi > f && cat f", "echo hi &gt; f &amp;&amp; cat f"),
            ("&amp;", "&amp;amp;"),
            ("plain", "plain"),
        ];
        for (text, wire) in table {
            assert_eq!(escape(text), wire, "escaping {text:?}");
            assert_eq!(mrkdwn(text), wire, "rendering {text:?}");
            assert_eq!(decode(wire), text, "a round trip of {text:?}");
        }
        assert_eq!(
            mrkdwn(&format!("🚫 {} is not allowed <!here>", mention("U77"))),
            "🚫 <@U77> is not allowed &lt;!here&gt;"
        );
        // Something that is not an id is not a way in either: it is text.
        assert_eq!(mrkdwn(&mention("U1><!channel")), "U1&gt;&lt;!channel");
    }
}
