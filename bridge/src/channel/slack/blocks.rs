//! Platform-neutral messages → Slack Block Kit, within Slack's limits: a section's text is at most
//! 3,000 characters, a message at most 50 blocks and about 40,000 characters. Output is split into
//! several code-block sections at line boundaries (each chunk fenced on its own, so no fence is ever
//! left open); what still does not fit keeps its tail with a notice. Errors and timeouts go in an
//! attachment with the danger colour so they stand out in the thread. Every text field — the
//! notification `text`, sections, context — is escaped ([`super::format`]), so nothing a person or the
//! agent wrote can ping or break formatting; the bridge's deliberate mentions stay mentions.

use serde_json::{Value, json};

use super::format::{escape, mrkdwn};
use crate::channel::text::{fenced_tail, plain, split_markdown, truncate_chars};
use crate::channel::{Message, Tone};

/// Slack's limit for a section's text.
pub const SECTION_LIMIT: usize = 3000;
/// Slack's limit for blocks in one message.
pub const BLOCK_LIMIT: usize = 50;
/// What we allow all texts of one message to add up to (Slack's limit is about 40,000).
pub const MESSAGE_LIMIT: usize = 38_000;
/// How much of an answer its notification text shows.
const NOTIFICATION_START: usize = 200;
/// Slack's limit for a button label.
const BUTTON_LABEL_LIMIT: usize = 75;

/// What `chat.postMessage` / `chat.update` take, besides channel and timestamps.
#[derive(Debug, Clone, PartialEq)]
pub struct Payload {
    /// Notification and fallback text.
    pub text: String,
    /// Top-level blocks (neutral and running messages).
    pub blocks: Vec<Value>,
    /// Coloured attachments (results, errors, warnings), each with its own blocks.
    pub attachments: Vec<Value>,
}

impl Payload {
    /// The JSON fields to merge into an API call.
    #[must_use]
    pub fn to_json(&self) -> Value {
        json!({"text": self.text, "blocks": self.blocks, "attachments": self.attachments})
    }

    /// Every block, top-level and in attachments.
    #[must_use]
    pub fn all_blocks(&self) -> Vec<&Value> {
        self.blocks
            .iter()
            .chain(
                self.attachments
                    .iter()
                    .flat_map(|a| a["blocks"].as_array().into_iter().flatten()),
            )
            .collect()
    }
}

fn section(text: String) -> Value {
    json!({"type": "section", "text": {"type": "mrkdwn", "text": text}})
}

/// Renders a message as a Slack payload within the limits.
#[must_use]
pub fn render(m: &Message) -> Payload {
    let title = mrkdwn(&m.title);
    let mut blocks = vec![section(truncate_chars(
        &format!("*{title}*"),
        SECTION_LIMIT,
    ))];
    let mut used = title.len();
    if let Some(body) = &m.body {
        if m.markdown {
            // The agent's Markdown, converted; a long one over several sections, fences balanced.
            let converted = super::markdown::to_mrkdwn(body);
            let sections = split_markdown(&converted, SECTION_LIMIT);
            let room = BLOCK_LIMIT.saturating_sub(blocks.len() + 3);
            let count = sections.len();
            for (i, s) in sections.into_iter().enumerate() {
                if i + 1 == room && count > room || used + s.len() > MESSAGE_LIMIT {
                    blocks.push(section(format!(
                        "_… {} more parts not shown here; the whole text is in the history (`chat-bridge history show`)_",
                        count - i
                    )));
                    break;
                }
                used += s.len();
                blocks.push(section(s));
            }
        } else {
            let body = truncate_chars(&mrkdwn(body), SECTION_LIMIT);
            used += body.len();
            blocks.push(section(body));
        }
    }
    let footer = m
        .footer
        .as_ref()
        .map(|f| truncate_chars(&mrkdwn(f), SECTION_LIMIT));
    let reserve = 2 + usize::from(footer.is_some()) + usize::from(!m.buttons.is_empty());
    if let Some(code) = &m.code {
        let room_blocks = BLOCK_LIMIT.saturating_sub(blocks.len() + reserve);
        let room_chars =
            MESSAGE_LIMIT.saturating_sub(used + footer.as_ref().map_or(0, String::len));
        blocks.extend(
            fenced_tail(&escape(code), SECTION_LIMIT, room_blocks, room_chars)
                .into_iter()
                .map(section),
        );
    }
    if let Some(footer) = footer {
        blocks.push(json!({"type": "context", "elements": [{"type": "mrkdwn", "text": footer}]}));
    }
    if !m.buttons.is_empty() {
        let elements: Vec<Value> = m
            .buttons
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let mut e = json!({
                    "type": "button",
                    "action_id": format!("choice_{i}"),
                    "text": {"type": "plain_text", "text": truncate_chars(&plain(&b.label), BUTTON_LABEL_LIMIT)},
                    "value": b.value,
                });
                if let Some(style) = &b.style {
                    e["style"] = json!(style);
                }
                e
            })
            .collect();
        blocks.push(json!({"type": "actions", "elements": elements}));
    }
    // The notification text is mrkdwn too: escaped like the blocks, so an echoed `<!channel>`
    // never pings; a mention cut in half by the limit is written plainly instead.
    let short = truncate_chars(&m.title, 300);
    let mut text = if short.chars().count() < m.title.chars().count() {
        escape(&plain(&short)).into_owned()
    } else {
        mrkdwn(&short)
    };
    // An answer's notification carries its start, not only its heading.
    if m.markdown
        && let Some(body) = &m.body
    {
        let start = body.split_whitespace().collect::<Vec<_>>().join(" ");
        if !start.is_empty() {
            text.push_str(": ");
            text.push_str(&escape(&plain(&truncate_chars(&start, NOTIFICATION_START))));
        }
    }
    let color = match m.tone {
        Tone::Error => Some("danger"),
        Tone::Warning => Some("warning"),
        Tone::Success => Some("good"),
        Tone::Neutral | Tone::Running => None,
    };
    match color {
        Some(color) => Payload {
            text,
            blocks: Vec::new(),
            attachments: vec![json!({"color": color, "blocks": blocks})],
        },
        None => Payload {
            text,
            blocks,
            attachments: Vec::new(),
        },
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_answers_notification_text_carries_its_start() {
        let mut m = Message::text(Tone::Neutral, "💬 answer");
        m.body = Some(format!("The build   fails\nbecause <!channel> & {}", "x".repeat(400)));
        m.markdown = true;
        let p = render(&m);
        assert!(
            p.text.starts_with("💬 answer: The build fails because &lt;!channel&gt; &amp; xxx"),
            "{}",
            p.text
        );
        assert!(p.text.chars().count() < 260 && p.text.ends_with('…'), "{}", p.text);
        let plain_notice = render(&Message::text(Tone::Neutral, "hello"));
        assert_eq!(plain_notice.text, "hello");
    }

    use super::*;
    use crate::channel::Button;

    fn texts(p: &Payload) -> Vec<String> {
        p.all_blocks()
            .iter()
            .filter_map(|b| b["text"]["text"].as_str().map(str::to_owned))
            .collect()
    }

    fn assert_within_limits(p: &Payload) {
        let blocks = p.all_blocks();
        assert!(blocks.len() <= BLOCK_LIMIT, "{} blocks", blocks.len());
        let t = texts(p);
        assert!(
            t.iter().all(|s| s.chars().count() <= SECTION_LIMIT),
            "a section over 3,000"
        );
        assert!(
            t.iter().map(String::len).sum::<usize>() <= 40_000,
            "message over 40,000"
        );
        for s in t.iter().filter(|s| s.starts_with("```")) {
            assert!(
                s.ends_with("```") && s.matches("```").count() == 2,
                "every code chunk closes its own fence"
            );
        }
    }

    #[test]
    fn slack_a_timeout_renders_in_a_danger_attachment_with_its_partial_output() {
        let m = Message {
            tone: Tone::Error,
            title: "⏱ make deploy — timed out".into(),
            body: Some("Command timed out after 2s".into()),
            code: Some("partial <b>&\n".into()),
            footer: Some("full output: `chat-bridge history show x`".into()),
            buttons: Vec::new(),
            markdown: false,
            file: None,
        };
        let p = render(&m);
        assert!(p.blocks.is_empty());
        assert_eq!(p.attachments[0]["color"], "danger");
        let t = texts(&p);
        assert!(
            t.contains(&"```\npartial &lt;b&gt;&amp;```".to_owned()),
            "{t:?}"
        );
        assert_eq!(p.text, "⏱ make deploy — timed out");
        assert_within_limits(&p);
    }

    #[test]
    fn slack_100kb_of_output_becomes_valid_blocks_keeping_the_tail() {
        let out: String = (1..=12_000)
            .map(|i| format!("line {i:05} of build output\n"))
            .collect();
        assert!(out.len() > 100_000);
        let m = Message {
            tone: Tone::Success,
            title: "✅ cargo build".into(),
            body: None,
            code: Some(out),
            footer: None,
            buttons: Vec::new(),
            markdown: false,
            file: None,
        };
        let p = render(&m);
        assert_within_limits(&p);
        let t = texts(&p);
        assert!(
            t.iter().any(|s| s.contains("earlier lines not shown here")),
            "the cut is told"
        );
        assert!(
            t.last()
                .is_some_and(|s| s.contains("line 12000 of build output")),
            "the tail is kept"
        );
        assert!(
            t.iter().filter(|s| s.starts_with("```")).count() > 5,
            "split into several sections"
        );
    }

    #[test]
    fn r8_slack_every_text_field_is_escaped_and_deliberate_mentions_still_ping() {
        let m = Message {
            tone: Tone::Error,
            title: "❌ echo <!channel> && exit 1 — failed".into(),
            body: Some("<!here> said <@U9>".into()),
            code: Some("<!everyone>\n".into()),
            footer: Some(format!(
                "asked by {} · <https://evil|click>",
                crate::channel::text::mention("U1")
            )),
            buttons: Vec::new(),
            markdown: false,
            file: None,
        };
        for p in [
            render(&m),
            render(&Message {
                tone: Tone::Neutral,
                ..m.clone()
            }),
        ] {
            let wire = p.to_json().to_string();
            for raw in [
                "<!channel>",
                "<!here>",
                "<!everyone>",
                "<@U9>",
                "<https://evil",
            ] {
                assert!(!wire.contains(raw), "{raw} went out unescaped: {wire}");
            }
            assert_eq!(
                p.text,
                "❌ echo &lt;!channel&gt; &amp;&amp; exit 1 — failed"
            );
            assert!(
                wire.contains("asked by <@U1> · &lt;https://evil|click&gt;"),
                "{wire}"
            );
        }
        // A title cut by the notification limit never leaves half a mention or an open bracket.
        let long = Message::text(
            Tone::Neutral,
            format!("{}{}", "x".repeat(297), crate::channel::text::mention("U1")),
        );
        assert!(!render(&long).text.contains('<'), "{}", render(&long).text);
    }

    #[test]
    fn slack_buttons_carry_values_and_styles() {
        let m = Message {
            tone: Tone::Warning,
            title: "🔐 approval needed: rm -rf build".into(),
            body: None,
            code: None,
            footer: None,
            buttons: vec![
                Button {
                    value: "perm:1:allow_once".into(),
                    label: "Allow once".into(),
                    style: Some("primary".into()),
                },
                Button {
                    value: "perm:1:reject_once".into(),
                    label: "Reject".into(),
                    style: Some("danger".into()),
                },
            ],
            markdown: false,
            file: None,
        };
        let p = render(&m);
        let actions = p
            .all_blocks()
            .into_iter()
            .find(|b| b["type"] == "actions")
            .expect("actions");
        assert_eq!(actions["elements"][0]["value"], "perm:1:allow_once");
        assert_eq!(actions["elements"][1]["style"], "danger");
    }
}
