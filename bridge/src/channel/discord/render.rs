//! Platform-neutral messages → Discord message payloads, within Discord's limits: 2,000 characters
//! of content; at most 10 embeds, each title 256, description 4,096 and footer 2,048 characters, and
//! 6,000 characters over all embeds of a message; 5 buttons per action row, labels 80 and
//! `custom_id`s 100 characters.
//!
//! Answers and notices are plain content (split fence-aware into embeds when they are longer than
//! content allows). Tool results are embeds coloured by outcome — green completed, red failed or
//! timed out, grey cancelled — with the output in fenced code blocks, one embed per chunk, the tail
//! kept. Every payload sets content, embeds and components, so an edit from one shape to another
//! leaves nothing stale behind, and mentions never ping (`allowed_mentions.parse = []`): command
//! output that says `@everyone` stays text.
//!
//! Titles carry people's text (a command, a prompt): they are escaped ([`escape_title`]) so that
//! markdown in them shows as typed and `@everyone`/`@here` stay words; `<@id>` mentions of people
//! stay mentions. Embed footers render no markdown at all, so they are plain text ([`footer_text`]:
//! no backticks). A title cut to fit never leaves a `**` or an escape open.

use serde_json::{Value, json};

use crate::channel::text::{fenced_tail, truncate_chars};
use crate::channel::{Message, Tone};

/// Discord's limit for a message's content.
pub const CONTENT_LIMIT: usize = 2000;
/// Discord's limit for embeds in one message.
pub const EMBED_COUNT_LIMIT: usize = 10;
/// Discord's limit for an embed's title.
pub const EMBED_TITLE_LIMIT: usize = 256;
/// Discord's limit for an embed's description.
pub const EMBED_DESCRIPTION_LIMIT: usize = 4096;
/// Discord's limit for an embed's footer.
pub const EMBED_FOOTER_LIMIT: usize = 2048;
/// Discord's limit for all embed text of one message together.
pub const EMBED_TOTAL_LIMIT: usize = 6000;
/// Discord's limit for a button label.
pub const BUTTON_LABEL_LIMIT: usize = 80;
/// Discord's limit for a component's `custom_id`.
pub const CUSTOM_ID_LIMIT: usize = 100;
/// Buttons per action row.
const ROW_LIMIT: usize = 5;

/// Green: completed.
pub const GREEN: u32 = 0x002E_CC71;
/// Red: failed or timed out.
pub const RED: u32 = 0x00E7_4C3C;
/// Grey: cancelled and neutral.
pub const GREY: u32 = 0x0095_A5A6;
/// Blurple: running.
pub const BLURPLE: u32 = 0x0058_65F2;
/// Yellow: needs attention.
pub const YELLOW: u32 = 0x00F1_C40F;

/// The colour of a tone.
#[must_use]
pub fn color(tone: Tone) -> u32 {
    match tone {
        Tone::Success => GREEN,
        Tone::Error => RED,
        Tone::Neutral => GREY,
        Tone::Running => BLURPLE,
        Tone::Warning => YELLOW,
    }
}

/// The zero-width space that keeps `@everyone` and `@here` from being mentions.
const ZWSP: char = '\u{200B}';

/// `@everyone` and `@here` made plain words (a zero-width space after the `@`). With
/// `allowed_mentions.parse = []` they would not ping anyway; this keeps them from even looking
/// like one, in thread names too, which have no `allowed_mentions`.
#[must_use]
pub fn neutralize_mentions(text: &str) -> String {
    text.replace("@everyone", &format!("@{ZWSP}everyone"))
        .replace("@here", &format!("@{ZWSP}here"))
}

/// Characters Discord's markdown gives a meaning anywhere in a line.
const INLINE_MARKUP: &[char] = &['\\', '*', '_', '~', '`', '|', '[', ']'];
/// Characters that mean something at the start of a line (quote, heading, list, subtext).
const LINE_START_MARKUP: &[char] = &['>', '#', '-', '+'];

/// Escapes one character of people's text into `out`; `line_start`: nothing but spaces before it
/// on its line.
fn escape_char(c: char, line_start: bool, out: &mut String) {
    if INLINE_MARKUP.contains(&c) || (line_start && LINE_START_MARKUP.contains(&c)) {
        out.push('\\');
    }
    out.push(c);
}

/// People's text as Discord shows it literally: markdown escaped with backslashes, `@everyone` and
/// `@here` neutralised, `<@id>` mentions kept. At most `max` characters: cut (with `…`) between
/// escaped characters, never after a lone backslash.
#[must_use]
pub fn escape_title(text: &str, max: usize) -> String {
    let text = neutralize_mentions(text.trim());
    let total = text.chars().count();
    let mut out = String::new();
    let mut len = 0;
    let mut line_start = true;
    for (i, c) in text.chars().enumerate() {
        let mut piece = String::new();
        escape_char(c, line_start, &mut piece);
        let n = piece.chars().count();
        // Room for the ellipsis unless this is the last character.
        let reserve = usize::from(i + 1 < total);
        if len + n + reserve > max {
            out.push('…');
            return out;
        }
        out.push_str(&piece);
        len += n;
        line_start = c == '\n' || (line_start && c == ' ');
    }
    out
}

/// An embed footer: plain text (embed footers render no markdown, so backticks would show).
#[must_use]
pub fn footer_text(text: &str) -> String {
    truncate_chars(&text.replace('`', ""), EMBED_FOOTER_LIMIT)
}

/// What `POST/PATCH /channels/{id}/messages` take.
#[derive(Debug, Clone, PartialEq)]
pub struct Payload {
    /// Message content.
    pub content: String,
    /// Embeds.
    pub embeds: Vec<Value>,
    /// Action rows with buttons.
    pub components: Vec<Value>,
}

impl Payload {
    /// The JSON body.
    #[must_use]
    pub fn to_json(&self) -> Value {
        json!({
            "content": self.content,
            "embeds": self.embeds,
            "components": self.components,
            "allowed_mentions": {"parse": []},
        })
    }

    /// Characters over all embeds, as Discord counts them against the 6,000 limit.
    #[must_use]
    pub fn embed_chars(&self) -> usize {
        self.embeds
            .iter()
            .map(|e| {
                ["title", "description"]
                    .iter()
                    .filter_map(|k| e[*k].as_str())
                    .chain(e["footer"]["text"].as_str())
                    .map(|s| s.chars().count())
                    .sum::<usize>()
            })
            .sum()
    }
}

/// Splits markdown `text` into chunks of at most `max` characters, fences balanced (see
/// [`crate::channel::text::split_markdown`]).
#[must_use]
pub fn split_markdown(text: &str, max: usize) -> Vec<String> {
    crate::channel::text::split_markdown(text, max)
}

/// Renders a message within Discord's limits.
#[must_use]
pub fn render(m: &Message) -> Payload {
    let components = buttons(m);
    let plain = m.code.is_none() && !matches!(m.tone, Tone::Success | Tone::Error);
    if plain {
        let title = format!("**{}**", escape_title(&m.title, CONTENT_LIMIT - 4));
        let mut content = title.clone();
        if let Some(body) = &m.body {
            content.push('\n');
            content.push_str(body);
        }
        if let Some(footer) = &m.footer {
            content.push_str("\n-# ");
            content.push_str(footer);
        }
        if content.chars().count() <= CONTENT_LIMIT {
            return Payload {
                content,
                embeds: Vec::new(),
                components,
            };
        }
        // Longer than content allows: the title as content, the body in embeds, split fence-aware.
        let mut embeds = Vec::new();
        let mut total = 0;
        let footer = m.footer.as_deref().map(footer_text);
        let footer_len = footer.as_ref().map_or(0, |f| f.chars().count());
        let chunks = split_markdown(
            m.body.as_deref().unwrap_or_default(),
            EMBED_DESCRIPTION_LIMIT,
        );
        let count = chunks.len();
        for (i, chunk) in chunks.into_iter().enumerate() {
            let n = chunk.chars().count();
            if embeds.len() + 1 == EMBED_COUNT_LIMIT
                || total + n + footer_len + 120 > EMBED_TOTAL_LIMIT
            {
                embeds.push(json!({
                    "description": format!("_… {} more parts not shown here; the whole text is in the history (`chat-bridge history show`)_", count - i),
                    "color": color(m.tone),
                }));
                break;
            }
            total += n;
            embeds.push(json!({"description": chunk, "color": color(m.tone)}));
        }
        if let (Some(footer), Some(last)) = (footer, embeds.last_mut()) {
            last["footer"] = json!({"text": footer});
        }
        return Payload {
            content: title,
            embeds,
            components,
        };
    }
    let title = escape_title(&m.title, EMBED_TITLE_LIMIT);
    let mut first = json!({"title": title, "color": color(m.tone)});
    let mut used = title.chars().count();
    if let Some(body) = &m.body {
        let body = truncate_chars(body, EMBED_DESCRIPTION_LIMIT);
        used += body.chars().count();
        first["description"] = json!(body);
    }
    let footer = m.footer.as_deref().map(footer_text);
    used += footer.as_ref().map_or(0, |f| f.chars().count());
    let mut embeds = vec![first];
    if let Some(code) = &m.code {
        let room_chars = EMBED_TOTAL_LIMIT.saturating_sub(used);
        let room_embeds = EMBED_COUNT_LIMIT - 1;
        embeds.extend(
            fenced_tail(code, EMBED_DESCRIPTION_LIMIT, room_embeds, room_chars)
                .into_iter()
                .map(|chunk| json!({"description": chunk, "color": color(m.tone)})),
        );
    }
    if let (Some(footer), Some(last)) = (footer, embeds.last_mut()) {
        last["footer"] = json!({"text": footer});
    }
    Payload {
        content: String::new(),
        embeds,
        components,
    }
}

fn buttons(m: &Message) -> Vec<Value> {
    m.buttons
        .chunks(ROW_LIMIT)
        .take(5)
        .map(|row| {
            let components: Vec<Value> = row
                .iter()
                .map(|b| {
                    let style = match b.style.as_deref() {
                        Some("primary") => 3,
                        Some("danger") => 4,
                        _ => 2,
                    };
                    json!({
                        "type": 2,
                        "style": style,
                        "label": truncate_chars(&b.label, BUTTON_LABEL_LIMIT),
                        "custom_id": custom_id(&b.value),
                    })
                })
                .collect();
            json!({"type": 1, "components": components})
        })
        .collect()
}

/// A button's value as a `custom_id`: values are `perm:<request>:<option>` and fit; one that does
/// not is cut at a character boundary (Discord would refuse the whole message otherwise).
fn custom_id(value: &str) -> String {
    value.chars().take(CUSTOM_ID_LIMIT).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::Button;

    fn result(tone: Tone, code: &str) -> Message {
        Message {
            tone,
            title: "✅ seq — 1s".into(),
            body: None,
            code: Some(code.into()),
            footer: Some("full output: `chat-bridge history show tc-1`".into()),
            buttons: Vec::new(),
            markdown: false,
            file: None,
        }
    }

    fn assert_within_limits(p: &Payload) {
        assert!(p.content.chars().count() <= CONTENT_LIMIT);
        assert!(p.embeds.len() <= EMBED_COUNT_LIMIT);
        assert!(p.embed_chars() <= EMBED_TOTAL_LIMIT, "{}", p.embed_chars());
        for e in &p.embeds {
            assert!(e["title"].as_str().map_or(0, |t| t.chars().count()) <= EMBED_TITLE_LIMIT);
            let d = e["description"].as_str().unwrap_or_default();
            assert!(d.chars().count() <= EMBED_DESCRIPTION_LIMIT);
            assert_eq!(d.matches("```").count() % 2, 0, "no fence left open: {d}");
        }
    }

    /// S-rules, issue 15 item 2: people's text in a title shows as typed and pings nobody.
    #[test]
    fn discord_escaping_table() {
        let z = '\u{200B}';
        for (typed, shown) in [
            ("echo hi", "echo hi".to_owned()),
            ("ls *.rs", "ls \\*.rs".to_owned()),
            (
                "**bold** _it_ ~~s~~",
                "\\*\\*bold\\*\\* \\_it\\_ \\~\\~s\\~\\~".to_owned(),
            ),
            ("echo `id`", "echo \\`id\\`".to_owned()),
            ("a || b | c", "a \\|\\| b \\| c".to_owned()),
            ("[x](https://e.com)", "\\[x\\](https://e.com)".to_owned()),
            ("C:\\tmp", "C:\\\\tmp".to_owned()),
            ("> quote", "\\> quote".to_owned()),
            ("# heading", "\\# heading".to_owned()),
            ("- item", "\\- item".to_owned()),
            ("echo a > f && cat f", "echo a > f && cat f".to_owned()),
            ("git log -1 # last", "git log -1 # last".to_owned()),
            ("@everyone look", format!("@{z}everyone look")),
            ("ping @here now", format!("ping @{z}here now")),
            ("thanks <@501>", "thanks <@501>".to_owned()),
        ] {
            assert_eq!(escape_title(typed, 256), shown, "{typed}");
        }
        assert_eq!(
            neutralize_mentions("@everyone @here"),
            format!("@{z}everyone @{z}here")
        );
        assert_eq!(
            footer_text("full output: `chat-bridge history show x`"),
            "full output: chat-bridge history show x"
        );
    }

    /// A title cut to fit never leaves an escape or a `**` open.
    #[test]
    fn discord_a_title_cut_at_2000_keeps_its_bold_closed() {
        for title in [
            "*".repeat(3000),
            "a".repeat(3000),
            format!("{}\\", "b".repeat(1996)),
        ] {
            let p = render(&Message {
                body: Some("x".repeat(3000)),
                ..Message::text(Tone::Neutral, title.clone())
            });
            assert!(
                p.content.chars().count() <= CONTENT_LIMIT,
                "{}",
                p.content.len()
            );
            assert!(
                p.content.starts_with("**") && p.content.ends_with("…**"),
                "{:.20}",
                p.content
            );
            let inner = &p.content[2..p.content.len() - 2];
            let trailing = inner
                .trim_end_matches('…')
                .chars()
                .rev()
                .take_while(|c| *c == '\\')
                .count();
            assert_eq!(trailing % 2, 0, "no lone backslash before the closing **");
            assert_within_limits(&p);
            let embed = render(&Message {
                code: Some("x".into()),
                ..Message::text(Tone::Success, title)
            });
            assert!(
                embed.embeds[0]["title"]
                    .as_str()
                    .is_some_and(|t| t.chars().count() <= EMBED_TITLE_LIMIT)
            );
        }
    }

    #[test]
    fn discord_results_are_embeds_coloured_by_outcome() {
        let p = render(&result(Tone::Success, "42\n"));
        assert_eq!(p.content, "");
        assert_eq!(p.embeds[0]["color"], GREEN);
        assert_eq!(p.embeds[0]["title"], "✅ seq — 1s");
        assert_eq!(p.embeds[1]["description"], "```\n42```");
        assert_eq!(
            p.embeds.last().expect("embeds")["footer"]["text"],
            "full output: chat-bridge history show tc-1",
            "embed footers are plain text: no backticks"
        );
        assert_eq!(
            render(&result(Tone::Error, "partial")).embeds[0]["color"],
            RED
        );
        let mut cancelled = Message::text(Tone::Neutral, "⏹ sleep 9 — cancelled");
        cancelled.code = Some("x".into());
        assert_eq!(render(&cancelled).embeds[0]["color"], GREY);
        let json = render(&cancelled).to_json();
        assert_eq!(
            json["allowed_mentions"]["parse"],
            json!([]),
            "output never pings"
        );
        assert_eq!(json["components"], json!([]), "an edit clears old buttons");
    }

    #[test]
    fn discord_a_100_kb_output_keeps_its_tail_in_fenced_embeds_within_every_limit() {
        let code: String = (1..=20_000).map(|i| format!("{i}\n")).collect();
        assert!(code.len() > 100_000);
        let p = render(&result(Tone::Success, &code));
        assert_within_limits(&p);
        let fenced = p.embeds[1..]
            .iter()
            .filter(|e| {
                e["description"]
                    .as_str()
                    .is_some_and(|d| d.starts_with("```"))
            })
            .count();
        assert!(fenced >= 1);
        assert!(
            p.embeds[1]["description"]
                .as_str()
                .is_some_and(|d| d.contains("earlier lines not shown")),
            "the cut is told"
        );
        let last = p.embeds.last().expect("embeds")["description"]
            .as_str()
            .expect("description")
            .to_owned();
        assert!(last.contains("20000"), "the tail is kept");
    }

    #[test]
    fn discord_answers_are_content_and_long_ones_split_fence_aware() {
        let p = render(&Message {
            body: Some("hello".into()),
            ..Message::text(Tone::Neutral, "💬 answer")
        });
        assert_eq!(p.content, "**💬 answer**\nhello");
        assert!(p.embeds.is_empty());
        let mut body = String::from("intro\n```rust\n");
        for i in 0..180 {
            body.push_str(&format!("let x{i} = {i}; // filler\n"));
        }
        body.push_str("```\nthe end\n");
        let p = render(&Message {
            body: Some(body),
            ..Message::text(Tone::Neutral, "💬 answer")
        });
        assert_within_limits(&p);
        assert!(p.embeds.len() >= 2, "{}", p.embeds.len());
        let second = p.embeds[1]["description"].as_str().expect("description");
        assert!(
            second.starts_with("```rust\n"),
            "the fence is reopened with its language: {second:.40}"
        );
    }

    #[test]
    fn discord_split_markdown_closes_and_reopens_fences() {
        let text = "a\n```sh\nline 1\nline 2\nline 3\nline 4\nline 5\nline 6\nline 7\n```\nb\n";
        let chunks = split_markdown(text, 60);
        assert!(chunks.len() >= 2, "{chunks:?}");
        for c in &chunks {
            assert!(c.chars().count() <= 60, "{c}");
            assert_eq!(c.matches("```").count() % 2, 0, "{c}");
        }
        assert_eq!(
            chunks.concat().matches("line 7").count(),
            1,
            "nothing repeated or lost"
        );
        assert!(chunks[1].starts_with("```sh\n"), "{chunks:?}");
    }

    #[test]
    fn discord_buttons_carry_the_request_id_within_the_limits() {
        let mut m = Message::text(Tone::Warning, "🔐 approval needed: rm -rf build");
        m.buttons = vec![
            Button {
                value: "perm:req-123:allow".into(),
                label: "Allow once".into(),
                style: Some("primary".into()),
            },
            Button {
                value: "perm:req-123:reject".into(),
                label: "x".repeat(200),
                style: Some("danger".into()),
            },
        ];
        let p = render(&m);
        let row = &p.components[0];
        assert_eq!(row["type"], 1);
        assert_eq!(row["components"][0]["custom_id"], "perm:req-123:allow");
        assert_eq!(row["components"][0]["style"], 3);
        assert_eq!(row["components"][1]["style"], 4);
        assert_eq!(
            row["components"][1]["label"]
                .as_str()
                .map(|l| l.chars().count()),
            Some(BUTTON_LABEL_LIMIT)
        );
        assert_eq!(custom_id(&"y".repeat(300)).len(), CUSTOM_ID_LIMIT);
    }
}
