//! Property tests of how long answers are cut for chat (`channel::text::split_markdown_parts`) and
//! converted for Slack (`slack::markdown::to_mrkdwn`), over arbitrary Unicode and Markdown-shaped
//! text: the parts' bodies concatenate to the input exactly (the only thing added is a fence closed
//! at a cut and opened again after it), every rendered part is within the limit with its fences
//! balanced, and the converter never panics and never lets `<!channel>` through.

use chat_bridge::channel::slack::markdown::to_mrkdwn;
use chat_bridge::channel::text::split_markdown_parts;
use proptest::prelude::*;

/// Lines that make Markdown: paragraphs, blank lines, fences (with and without a language), lists,
/// tables, long lines, and arbitrary Unicode.
fn markdown_line() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-z ]{0,80}",
        2 => Just(String::new()),
        2 => Just("```".to_owned()),
        1 => Just("```rust".to_owned()),
        1 => "- [a-z*_`]{1,30}",
        1 => "  1. [a-z]{1,30}",
        1 => "\\| [a-z]{1,8} \\| [0-9]{1,4} \\|",
        1 => "[a-z]{200,400}",
        2 => any::<String>(),
        1 => Just("<!channel> & <@U123|x> [l|i>k](https://x.example/a|b>c)".to_owned()),
    ]
}

fn markdown() -> impl Strategy<Value = String> {
    prop::collection::vec(markdown_line(), 0..60).prop_map(|lines| lines.join("\n"))
}

fn fence_lines(s: &str) -> usize {
    s.lines()
        .filter(|l| {
            let t = l.trim_start_matches(' ');
            l.len() - t.len() <= 3 && t.starts_with("```")
        })
        .count()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn split_parts_concatenate_to_the_input_and_each_fits_with_balanced_fences(
        text in markdown(),
        max in 64usize..3000,
    ) {
        let parts = split_markdown_parts(&text, max);
        let joined: String = parts.iter().map(|p| p.body).collect();
        prop_assert_eq!(&joined, &text);
        let mut open = false;
        for (i, p) in parts.iter().enumerate() {
            let rendered = p.render();
            prop_assert!(rendered.chars().count() <= max, "part {} is {} > {}", i, rendered.chars().count(), max);
            // A part reopens exactly when the one before it closed.
            prop_assert_eq!(p.reopen.is_some(), open);
            open = p.close;
            if p.reopen.is_some() || p.close {
                let fences = fence_lines(&rendered);
                prop_assert_eq!(fences % 2, 0, "unbalanced part {}: {:?}", i, rendered);
            }
            prop_assert!(!p.body.is_empty() || parts.len() == 1, "no empty parts");
        }
    }

    #[test]
    fn r8_markdown_to_mrkdwn_never_panics_and_never_pings(text in markdown()) {
        let out = to_mrkdwn(&text);
        prop_assert!(!out.contains("<!channel>") && !out.contains("<!here>") && !out.contains("<@U123"), "{}", out);
        // Every `<` that reaches Slack opens a link the converter made itself.
        for (at, _) in out.match_indices('<') {
            prop_assert!(out[at..].starts_with("<http") || out[at..].starts_with("<mailto:"), "{}", &out[at..]);
        }
    }
}
