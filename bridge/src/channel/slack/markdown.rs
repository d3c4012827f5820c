//! The agent's CommonMark → Slack `mrkdwn`, so answers render instead of showing `**` and `|---|`.
//!
//! Bold is `*b*`, italics `_i_`, strikethrough `~s~`, links `<url|label>` (web and mail links only;
//! `|`, `<` and `>` in the address percent-encoded, the label escaped), headings bold lines, lists
//! `•` / `1.` with nested items indented, quotes `>`, code spans and fenced code as Slack code,
//! tables as aligned code blocks (Slack has no tables), quotes `> `. Nothing inside code is converted, and every
//! piece of text is escaped (`& < >`, R8), so nothing the agent wrote can ping (`<!channel>`) or
//! break formatting.

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

use super::format::escape;

/// Three backticks inside code would end Slack's code block early.
fn code_safe(s: &str) -> String {
    escape(s).replace("```", "`\u{200b}``")
}

/// Slack's mrkdwn has no backslash escape: a `*`, `_`, `~` or `` ` `` that is text (a Markdown
/// `\*`, or a mark CommonMark did not pair) is written as its fullwidth form (`＊ ＿ ～ ｀`), which
/// Slack shows as the character and never as formatting. Outside italics an underscore is replaced
/// only where it could open italics (at the start, or after a space or an opening bracket or quote,
/// before a non-space) or close them (after a non-space, before the end, a space or punctuation):
/// `snake_case`, `/tmp/_cache` and `a_b_c` stay as they are. Inside italics every one is replaced, so
/// none can end the italics early.
/// `around` is the character before and after `s` in the source (`None`: the start or end).
fn literal_marks(s: &str, in_italics: bool, around: (Option<char>, Option<char>)) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    for (i, &c) in chars.iter().enumerate() {
        let prev = i.checked_sub(1).map(|p| chars[p]).or(if i == 0 { around.0 } else { None });
        let next = chars.get(i + 1).copied().or(around.1);
        let plain = || {
            let opens = prev.is_none_or(|p| p.is_whitespace() || "([{\"'".contains(p))
                && next.is_some_and(|n| !n.is_whitespace());
            let closes = prev.is_some_and(|p| !p.is_whitespace())
                && next.is_none_or(|n| n.is_whitespace() || ".,;:!?)]}\"'".contains(n));
            !in_italics && !opens && !closes
        };
        out.push(match c {
            '*' => '\u{ff0a}',
            '_' if !plain() => '\u{ff3f}',
            '~' => '\u{ff5e}',
            '`' => '\u{ff40}',
            other => other,
        });
    }
    out
}

/// A link target Slack may show as a link: web and mail addresses, with the characters that would
/// end or split `<url|label>` percent-encoded.
fn link_target(url: &str) -> Option<String> {
    let lower = url.trim().to_ascii_lowercase();
    if !(lower.starts_with("https://")
        || lower.starts_with("http://")
        || lower.starts_with("mailto:"))
    {
        return None;
    }
    Some(
        url.trim()
            .replace('&', "&amp;")
            .replace('|', "%7C")
            .replace('<', "%3C")
            .replace('>', "%3E")
            .replace(' ', "%20"),
    )
}

#[derive(Debug, Default)]
struct Table {
    rows: Vec<Vec<String>>,
    header_rows: usize,
    in_head: bool,
}

impl Table {
    fn render(&self) -> String {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut widths = vec![0usize; cols];
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let line = |row: &Vec<String>| {
            let cells: Vec<String> = (0..cols)
                .map(|i| {
                    let cell = row.get(i).map_or("", String::as_str);
                    let pad = widths[i].saturating_sub(cell.chars().count());
                    format!("{cell}{}", " ".repeat(pad))
                })
                .collect();
            cells.join(" | ").trim_end().to_owned()
        };
        let mut out = String::new();
        for (n, row) in self.rows.iter().enumerate() {
            out.push_str(&line(row));
            out.push('\n');
            if n + 1 == self.header_rows {
                let rule: Vec<String> = widths.iter().map(|w| "-".repeat((*w).max(1))).collect();
                out.push_str(&rule.join("-+-"));
                out.push('\n');
            }
        }
        out
    }
}

#[derive(Debug, Default)]
struct Writer {
    out: String,
    /// Open lists: the next number of each ordered one.
    lists: Vec<Option<u64>>,
    /// Where each open link's label starts in `out`, and its target.
    links: Vec<(usize, String)>,
    /// Where each open quote starts in `out`.
    quotes: Vec<usize>,
    table: Option<Table>,
    cell: Option<String>,
    code_block: bool,
    /// Inside a heading: its bold markers are the only ones.
    heading: bool,
    /// Open emphases (`_…_`).
    italics: usize,
    /// Each open emphasis, strong or strikethrough: its Markdown delimiter when it touches a letter
    /// or digit outside (`2*3*4`), where Slack would show the mark rather than format — then it is
    /// kept as text.
    marks: Vec<Option<String>>,
    /// The source characters around the text being written (see [`literal_marks`]).
    around: (Option<char>, Option<char>),
}

impl Writer {
    fn text(&mut self, s: &str) {
        if let Some(cell) = &mut self.cell {
            cell.push_str(s);
        } else if self.code_block {
            self.out.push_str(&code_safe(s));
        } else {
            self.out
                .push_str(&literal_marks(&escape(s), self.italics > 0, self.around));
        }
    }

    fn raw(&mut self, s: &str) {
        if let Some(cell) = &mut self.cell {
            cell.push_str(s);
        } else {
            self.out.push_str(s);
        }
    }

    /// Starts a block: a blank line after earlier blocks; inside a list, a new line.
    fn block(&mut self) {
        if self.out.is_empty() || self.cell.is_some() {
            return;
        }
        let tail = self.out.trim_end_matches(' ').len();
        self.out.truncate(tail);
        if self.lists.is_empty() {
            while !self.out.ends_with("\n\n") {
                self.out.push('\n');
            }
        } else if !self.out.ends_with('\n') && !self.out.ends_with(' ') {
            self.out.push('\n');
        }
    }

    fn inline_mark(&mut self, mark: &str) {
        if !self.heading && self.cell.is_none() {
            self.raw(mark);
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Paragraph if !self.out.ends_with(' ') || self.lists.is_empty() => self.block(),
            Tag::Heading { .. } => {
                self.block();
                self.out.push('*');
                self.heading = true;
            }
            Tag::BlockQuote(_) => {
                self.block();
                self.quotes.push(self.out.len());
            }
            Tag::CodeBlock(_) => {
                self.block();
                self.out.push_str("```\n");
                self.code_block = true;
            }
            Tag::List(first) => {
                if self.lists.is_empty() {
                    self.block();
                } else if !self.out.ends_with('\n') {
                    self.out.push('\n');
                }
                self.lists.push(first);
            }
            Tag::Item => {
                if !self.out.is_empty() && !self.out.ends_with('\n') {
                    self.out.push('\n');
                }
                let depth = self.lists.len().saturating_sub(1);
                let bullet = match self.lists.last_mut() {
                    Some(Some(n)) => {
                        let b = format!("{n}.");
                        *n += 1;
                        b
                    }
                    _ => ["•", "◦", "▪"][depth % 3].to_owned(),
                };
                self.out.push_str(&"    ".repeat(depth));
                self.out.push_str(&bullet);
                self.out.push(' ');
            }
            Tag::Table(_) => {
                self.block();
                self.table = Some(Table::default());
            }
            Tag::TableHead => {
                if let Some(t) = &mut self.table {
                    t.in_head = true;
                    t.rows.push(Vec::new());
                }
            }
            Tag::TableRow => {
                if let Some(t) = &mut self.table {
                    t.rows.push(Vec::new());
                }
            }
            Tag::TableCell => self.cell = Some(String::new()),
            Tag::Emphasis => {
                self.marks.push(None);
                self.italics += 1;
                self.inline_mark("_");
            }
            Tag::Strong => {
                self.marks.push(None);
                self.inline_mark("*");
            }
            Tag::Strikethrough => {
                self.marks.push(None);
                self.inline_mark("~");
            }
            Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. } => {
                let at = self.cell.as_ref().map_or(self.out.len(), String::len);
                self.links.push((at, dest_url.to_string()));
            }
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Paragraph if self.lists.is_empty() => self.out.push('\n'),
            TagEnd::Heading(_) => {
                let tail = self.out.trim_end().len();
                self.out.truncate(tail);
                if self.out.ends_with('*') && self.out.len() > 1 {
                    // An empty heading: drop the lone marker.
                    if self.out.ends_with("\n*") || self.out == "*" {
                        self.out.pop();
                    }
                }
                if !self.out.ends_with('\n') && !self.out.is_empty() {
                    self.out.push_str("*\n");
                }
                self.heading = false;
            }
            TagEnd::BlockQuote(_) => {
                if let Some(at) = self.quotes.pop() {
                    let quoted: String = self.out[at..]
                        .trim_end()
                        .lines()
                        .map(|l| format!("> {l}\n"))
                        .collect();
                    self.out.truncate(at);
                    self.out.push_str(&quoted);
                }
            }
            TagEnd::CodeBlock => {
                if !self.out.ends_with('\n') {
                    self.out.push('\n');
                }
                self.out.push_str("```\n");
                self.code_block = false;
            }
            TagEnd::List(_) => {
                self.lists.pop();
                if !self.out.ends_with('\n') {
                    self.out.push('\n');
                }
            }
            TagEnd::TableHead => {
                if let Some(t) = &mut self.table {
                    t.in_head = false;
                    t.header_rows = t.rows.len();
                }
            }
            TagEnd::TableCell => {
                if let (Some(cell), Some(t)) = (self.cell.take(), &mut self.table)
                    && let Some(row) = t.rows.last_mut()
                {
                    row.push(cell.trim().to_owned());
                }
            }
            TagEnd::Table => {
                if let Some(t) = self.table.take() {
                    self.out.push_str("```\n");
                    self.out.push_str(&code_safe(&t.render()));
                    self.out.push_str("```\n");
                }
            }
            TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough
                if matches!(self.marks.last(), Some(Some(_))) =>
            {
                if let Some(Some(delimiter)) = self.marks.pop() {
                    self.text(&delimiter);
                }
            }
            TagEnd::Emphasis => {
                self.marks.pop();
                self.italics = self.italics.saturating_sub(1);
                self.inline_mark("_");
            }
            TagEnd::Strong => {
                self.marks.pop();
                self.inline_mark("*");
            }
            TagEnd::Strikethrough => {
                self.marks.pop();
                self.inline_mark("~");
            }
            TagEnd::Link | TagEnd::Image => {
                let Some((at, url)) = self.links.pop() else {
                    return;
                };
                let buf = self.cell.as_mut().unwrap_or(&mut self.out);
                let label = buf.split_off(at.min(buf.len()));
                let in_cell = self.cell.is_some();
                let link = match link_target(&url) {
                    Some(target) if !in_cell => {
                        let label = if label.trim().is_empty() {
                            escape(&url).into_owned()
                        } else {
                            label
                        };
                        format!("<{target}|{label}>")
                    }
                    // Not a web or mail address (or in a table, which is code): shown as text.
                    _ if label.trim().is_empty() || label == url => {
                        if in_cell {
                            url.clone()
                        } else {
                            escape(&url).into_owned()
                        }
                    }
                    _ if in_cell => format!("{label} ({url})"),
                    _ => format!("{label} ({})", escape(&url)),
                };
                let buf = self.cell.as_mut().unwrap_or(&mut self.out);
                buf.push_str(&link);
            }
            _ => {}
        }
    }
}

/// Whether an emphasis spanning `range` touches a letter or digit outside it (`2*3*4`, `a**b**c`):
/// Slack formats only marks at word edges, so it would show these.
fn intraword(markdown: &str, range: &std::ops::Range<usize>) -> bool {
    let before = markdown.get(..range.start).and_then(|s| s.chars().next_back());
    let after = markdown.get(range.end..).and_then(|s| s.chars().next());
    before.is_some_and(char::is_alphanumeric) || after.is_some_and(char::is_alphanumeric)
}

/// The delimiter run that opens the emphasis at `range` (`*`, `**`, `_`, `~~`): at most two of the
/// same mark (three would be two emphases, each asking on its own).
fn delimiter(markdown: &str, range: &std::ops::Range<usize>) -> String {
    let text = markdown.get(range.clone()).unwrap_or_default();
    let Some(mark) = text.chars().next() else {
        return String::new();
    };
    text.chars().take_while(|c| *c == mark).take(2).collect()
}

/// CommonMark → Slack mrkdwn (see the module docs).
#[must_use]
pub fn to_mrkdwn(markdown: &str) -> String {
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH;
    let mut w = Writer::default();
    for (event, range) in Parser::new_ext(markdown, options).into_offset_iter() {
        match event {
            Event::Start(Tag::Emphasis | Tag::Strong | Tag::Strikethrough)
                if intraword(markdown, &range) =>
            {
                let delimiter = delimiter(markdown, &range);
                w.text(&delimiter);
                w.marks.push(Some(delimiter));
            }
            Event::Start(tag) => w.start(tag),
            Event::End(tag) => w.end(tag),
            Event::Text(t) => {
                // Before: what Slack sees before it (the output so far); after: the source's
                // next character, past a backslash escape.
                w.around = (
                    w.cell.as_ref().unwrap_or(&w.out).chars().next_back(),
                    markdown
                        .get(range.end..)
                        .map(|s| s.strip_prefix('\\').unwrap_or(s))
                        .and_then(|s| s.chars().next()),
                );
                w.text(&t);
                w.around = (None, None);
            }
            Event::Code(c) => {
                if w.cell.is_some() {
                    w.raw(&c);
                } else {
                    w.raw("`");
                    w.raw(&escape(&c).replace('`', "ˋ"));
                    w.raw("`");
                }
            }
            Event::Html(h) | Event::InlineHtml(h) => w.text(&h),
            Event::InlineMath(m) | Event::DisplayMath(m) => w.text(&m),
            Event::FootnoteReference(f) => w.text(&format!("[{f}]")),
            Event::SoftBreak | Event::HardBreak => {
                if w.cell.is_some() {
                    w.raw(" ");
                } else {
                    w.out.push('\n');
                    if !w.lists.is_empty() {
                        w.out.push_str(&"    ".repeat(w.lists.len()));
                    }
                }
            }
            Event::Rule => {
                w.block();
                w.out.push_str("――――――――\n");
            }
            Event::TaskListMarker(done) => w.raw(if done { "☑ " } else { "☐ " }),
        }
    }
    w.out.trim_end().to_owned()
}

#[cfg(test)]
mod tests {
    use super::to_mrkdwn;

    #[test]
    fn markdown_to_mrkdwn_table() {
        let cases: &[(&str, &str, &str)] = &[
            ("bold", "this is **bold** text", "this is *bold* text"),
            ("italics", "this is *it* and _it_", "this is _it_ and _it_"),
            ("strike", "~~gone~~", "~gone~"),
            ("bold italics", "***both***", "_*both*_"),
            (
                "link",
                "see [the docs](https://example.com/a?b=1&c=2)",
                "see <https://example.com/a?b=1&amp;c=2|the docs>",
            ),
            (
                "link with | and >",
                "[a > b | c](https://x.example/p|q>r)",
                "<https://x.example/p%7Cq%3Er|a &gt; b | c>",
            ),
            (
                "autolink",
                "<https://example.com>",
                "<https://example.com|https://example.com>",
            ),
            (
                "no javascript links",
                "[click](javascript:alert(1))",
                "click (javascript:alert(1))",
            ),
            ("heading", "# Title\n\ntext", "*Title*\n\ntext"),
            ("heading keeps no inner marks", "## A **b** c", "*A b c*"),
            ("bullets", "- a\n- b", "• a\n• b"),
            ("ordered", "1. a\n2. b", "1. a\n2. b"),
            (
                "nested list",
                "- a\n  - b\n    - c\n- d",
                "• a\n    ◦ b\n        ▪ c\n• d",
            ),
            (
                "ordered inside bullets",
                "- a\n  1. x\n  2. y",
                "• a\n    1. x\n    2. y",
            ),
            (
                "inline code is not converted",
                "run `a **b** <c>`",
                "run `a **b** &lt;c&gt;`",
            ),
            (
                "fenced code is not converted",
                "```rust\nlet x = **y** & <z>;\n```",
                "```\nlet x = **y** &amp; &lt;z&gt;;\n```",
            ),
            (
                "fences inside code cannot close ours",
                "````\n```\ninner\n```\n````",
                "```\n`\u{200b}``\ninner\n`\u{200b}``\n```",
            ),
            (
                "table as code",
                "| name | value |\n|---|---|\n| a | 1 |\n| long name | 22 |",
                "```\nname      | value\n----------+------\na         | 1\nlong name | 22\n```",
            ),
            (
                "table cells keep their text, not their marks",
                "| **k** | [l](https://e.x) |\n|---|---|\n| `v` | w |",
                "```\nk | l (https://e.x)\n--+----------------\nv | w\n```",
            ),
            (
                "nothing pings",
                "<!channel> & @here",
                "&lt;!channel&gt; &amp; @here",
            ),
            ("quote", "> quoted\n> more", "> quoted\n> more"),
            ("paragraphs", "one\n\ntwo", "one\n\ntwo"),
            ("soft break", "one\ntwo", "one\ntwo"),
            (
                "backslash escapes stay literal",
                "\\*star\\* \\_under\\_ \\~tilde\\~ \\`tick\\`",
                "\u{ff0a}star\u{ff0a} \u{ff3f}under\u{ff3f} \u{ff5e}tilde\u{ff5e} \u{ff40}tick\u{ff40}",
            ),
            (
                "underscores inside emphasis",
                "*emph with_underscore_inside*",
                "_emph with\u{ff3f}underscore\u{ff3f}inside_",
            ),
            (
                "an underscore at a word's edge inside emphasis",
                "*a _b c*",
                "_a \u{ff3f}b c_",
            ),
            ("snake_case stays", "call snake_case_name now", "call snake_case_name now"),
            ("a lone star", "2 * 3", "2 \u{ff0a} 3"),
            ("stars between digits are not emphasis", "2*3*4", "2\u{ff0a}3\u{ff0a}4"),
            ("nor inside a word", "foo**bar**baz", "foo\u{ff0a}\u{ff0a}bar\u{ff0a}\u{ff0a}baz"),
            ("emphasis at word edges still is", "a *b* c", "a _b_ c"),
            ("paths keep their underscores", "see /tmp/_cache/x_y and a_b_c", "see /tmp/_cache/x_y and a_b_c"),
            ("an underscore that could close is escaped", "trailing_ and _leading", "trailing\u{ff3f} and \u{ff3f}leading"),
            (
                "a fence's language is not shown (mrkdwn has none), first part or reopened",
                "```python\nx = 1\n```",
                "```\nx = 1\n```",
            ),
        ];
        for (name, md, want) in cases {
            assert_eq!(to_mrkdwn(md), *want, "{name}: {md:?}");
        }
    }
}
