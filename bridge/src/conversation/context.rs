//! Mention etiquette (`access.require_mention_in_threads`): in a busy thread the bot answers only
//! messages that mention it; what the people there said to each other since its last turn goes
//! along with the next prompt as context — bounded in count and bytes, newest kept, each message on
//! one line with its speaker's `[name]` — in a block the agent reads first (after a steer note).
//!
//! The block never holds an empty line, so a prompt as sent splits into the block and what was
//! typed at the first blank line: [`strip`] gives the typed form back (D6 recognises a resumed
//! turn's own prompt that way).

/// The transcript kind of a message not addressed to the bot, kept as context.
pub const KIND: &str = "context";

/// Messages that go along at most (the newest).
pub const MAX_MESSAGES: usize = 20;

/// Bytes of context that go along at most (the newest messages that fit).
pub const MAX_BYTES: usize = 4_000;

/// Characters of one message that go along at most.
pub const MAX_LINE: usize = 500;

/// How the block opens.
pub const HEAD: &str = "(Said in this thread since your last turn, not addressed to you:";

/// The context block for `said` (oldest first, each `[name] text` already labelled by the
/// caller); `None` when there is nothing to say.
#[must_use]
pub fn block(said: &[String]) -> Option<String> {
    let mut kept: Vec<String> = Vec::new();
    let mut bytes = 0;
    for line in said.iter().rev() {
        let flat = one_line(line);
        if flat.is_empty() {
            continue;
        }
        if kept.len() == MAX_MESSAGES || bytes + flat.len() + 1 > MAX_BYTES {
            break;
        }
        bytes += flat.len() + 1;
        kept.push(flat);
    }
    if kept.is_empty() {
        return None;
    }
    let left_out = said.iter().filter(|l| !one_line(l).is_empty()).count() - kept.len();
    kept.reverse();
    let mut out = HEAD.to_owned();
    if left_out > 0 {
        out.push_str(&format!("\n… {left_out} earlier left out"));
    }
    for line in kept {
        out.push('\n');
        out.push_str(&line);
    }
    out.push(')');
    Some(out)
}

/// `text` on one line: whitespace runs (line breaks included) become one space, control
/// characters go, and it is cut at [`MAX_LINE`] characters.
fn one_line(text: &str) -> String {
    let flat = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .filter(|c| !c.is_control())
        .collect::<String>();
    if flat.chars().count() > MAX_LINE {
        let mut cut: String = flat.chars().take(MAX_LINE).collect();
        cut.push('…');
        cut
    } else {
        flat
    }
}

/// `sent` without a leading context block.
#[must_use]
pub fn strip(sent: &str) -> &str {
    if sent.starts_with(HEAD) {
        sent.split_once("\n\n").map_or("", |(_, rest)| rest)
    } else {
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_keeps_the_newest_messages_one_line_each_within_its_bounds() {
        let said: Vec<String> = (0..30).map(|i| format!("[bob] line {i}\n\nmore")).collect();
        let b = block(&said).expect("a block");
        assert!(b.starts_with(HEAD), "{b}");
        assert!(!b.contains("\n\n"), "no blank line: {b}");
        assert!(b.contains("… 10 earlier left out"), "{b}");
        assert!(
            b.contains("[bob] line 29 more)")
                && b.contains("[bob] line 10 more")
                && !b.contains("line 9 "),
            "{b}"
        );
        let big = vec!["x".repeat(3000); 10];
        let b = block(&big).expect("a block");
        assert!(b.len() <= MAX_BYTES + HEAD.len() + 40, "{}", b.len());
        assert!(
            b.contains("… 3 earlier left out"),
            "each cut to 500 characters, 7 fit"
        );
        assert_eq!(block(&["  \n ".to_owned()]), None);
        assert_eq!(block(&[]), None);
    }

    #[test]
    fn strip_gives_the_prompt_as_typed_back() {
        let b = block(&["[bob] hi".to_owned()]).expect("block");
        assert_eq!(strip(&format!("{b}\n\n[alice] run it")), "[alice] run it");
        assert_eq!(strip("[alice] run it"), "[alice] run it");
    }
}
