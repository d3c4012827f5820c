//! R-rules: what the thread shows, as platform-neutral [`Message`]s. Every text passes the redactor
//! (R7) here, the one place text leaves for chat.

use std::time::Duration;

use daemon_client::liveness::human_duration;
use daemon_client::{Outcome, PermissionOption, ToolResult};

use super::redact::Redactor;
use crate::channel::{Button, Message, Tone};

/// Chat-side output cap when the channel does not say: the tail is kept, the full output is in the
/// store (R2, R3).
pub const CHAT_OUTPUT_CAP: usize = 3500;

/// Keeps the last `cap` bytes of `output` (on a line boundary when possible), saying what was cut.
#[must_use]
pub fn cap_output(output: &str, cap: usize) -> String {
    if output.len() <= cap {
        return output.to_owned();
    }
    let mut start = output.len() - cap;
    while !output.is_char_boundary(start) {
        start += 1;
    }
    if let Some(nl) = output[start..].find('\n')
        && nl + 1 < output.len() - start
    {
        start += nl + 1;
    }
    let hidden_lines = output[..start].lines().count();
    format!(
        "… {hidden_lines} earlier lines not shown\n{}",
        &output[start..]
    )
}

/// How much of a tool's title (often the whole command) a heading shows.
pub const TITLE_CAP: usize = 200;

/// A tool's title for a heading: redacted, then cut to [`TITLE_CAP`] characters on one line.
fn shown_title(r: &Redactor, title: &str) -> String {
    let one_line = r.redact(title).replace(['\n', '\r'], " ");
    crate::channel::text::truncate_chars(&one_line, TITLE_CAP)
}

/// The message of a running tool; `progress` adds elapsed time and output age (L5).
#[must_use]
pub fn tool_running(
    r: &Redactor,
    title: &str,
    progress: Option<(Duration, Option<Duration>)>,
) -> Message {
    let mut m = Message::text(Tone::Running, format!("⏳ {}", shown_title(r, title)));
    if let Some((elapsed, age)) = progress {
        let mut line = format!("running for {}", human_duration(elapsed));
        match age {
            Some(age) => line.push_str(&format!(" · last output {} ago", human_duration(age))),
            None => line.push_str(" · no output yet"),
        }
        m.body = Some(line);
    }
    m
}

/// The HTTP API half of the full-output pointer.
const API_POINTER: &str = " · GET /api/v1/tool-calls/";

/// `m` without the HTTP API half of its full-output pointer: for a bridge whose API is off, where
/// that half would send on-call to an address that does not answer.
#[must_use]
pub fn without_api_pointer(mut m: Message) -> Message {
    if let Some(f) = m.footer.as_mut()
        && let Some(at) = f.find(API_POINTER)
    {
        f.truncate(at);
    }
    m
}

/// `m` with the HTTP API half of its full-output pointer replaced by the tool call's page in the
/// history UI (`base` is `http.ui_url`, or empty for the path alone).
#[must_use]
pub fn with_ui_pointer(mut m: Message, base: &str) -> Message {
    if let Some(f) = m.footer.as_mut()
        && let Some(at) = f.find(API_POINTER)
    {
        let id = f[at + API_POINTER.len()..].to_owned();
        f.truncate(at);
        f.push_str(" · ");
        f.push_str(&crate::ui::Ui::tool_call_url(Some(base), &id));
    }
    m
}

/// The message of a finished tool (R2, R3).
#[must_use]
pub fn tool_finished(
    r: &Redactor,
    title: &str,
    result: &ToolResult,
    took: Option<Duration>,
    tool_call_id: &str,
    output_cap: usize,
) -> Message {
    let title = r.redact(title);
    let took = took
        .map(|d| format!(" — {}", human_duration(d)))
        .unwrap_or_default();
    let output = r.redact(result.output.trim_end());
    let code = (!output.trim().is_empty()).then(|| cap_output(&output, output_cap));
    let pointer = format!(
        "full output: `chat-bridge history show {tool_call_id}`{API_POINTER}{tool_call_id}"
    );
    let summary = result.summary.as_deref().map(|s| r.redact(s));
    let exit = match (result.exit_code, result.signal) {
        (_, Some(sig)) => format!(" (signal {sig})"),
        (Some(code), None) if code != 0 => format!(" (exit code {code})"),
        _ => String::new(),
    };
    match result.outcome {
        Outcome::Completed => Message {
            tone: Tone::Success,
            title: format!("✅ {title}{took}"),
            body: None,
            code,
            footer: None,
            buttons: Vec::new(),
            markdown: false,
            file: None,
        },
        Outcome::TimedOut => Message {
            tone: Tone::Error,
            title: format!("⏱ {title} — timed out{exit}"),
            body: Some(match code {
                Some(_) => summary.unwrap_or_else(|| "The command timed out.".into()),
                None => format!(
                    "{}\nThere was no output before it timed out.",
                    summary.unwrap_or_else(|| "The command timed out.".into())
                ),
            }),
            code,
            footer: Some(pointer),
            buttons: Vec::new(),
            markdown: false,
            file: None,
        },
        Outcome::Failed => Message {
            tone: Tone::Error,
            title: format!("❌ {title} — failed{exit}{took}"),
            body: summary,
            code,
            footer: Some(pointer),
            buttons: Vec::new(),
            markdown: false,
            file: None,
        },
        Outcome::Cancelled => Message {
            tone: Tone::Neutral,
            title: format!("⏹ {title} — cancelled"),
            body: summary,
            code,
            footer: None,
            buttons: Vec::new(),
            markdown: false,
            file: None,
        },
    }
}

/// A tool whose result will never come: the daemon lost the session it ran in.
#[must_use]
pub fn tool_interrupted(r: &Redactor, title: &str) -> Message {
    let mut m = Message::text(
        Tone::Neutral,
        format!("⏹ {} — interrupted", r.redact(title)),
    );
    m.body =
        Some("The agent lost the session this command ran in; its result will not come.".into());
    m
}

/// A tool whose cancel the agent never confirmed: the bridge stopped following it.
#[must_use]
pub fn tool_let_go(r: &Redactor, title: &str) -> Message {
    let mut m = Message::text(Tone::Neutral, format!("⏹ {} — cancelled", r.redact(title)));
    m.body = Some(
        "The agent did not confirm the cancel; the bridge stopped following this command (the agent may still be running it)."
            .into(),
    );
    m
}

/// A draft the answer streams into (R5): the text so far (its start, when it is longer than a
/// message carries), or — `done` — the text the agent wrote before it ran tools.
#[must_use]
pub fn draft(r: &Redactor, text: &str, part_len: usize, done: bool) -> Message {
    let title = if done {
        "💬 note"
    } else {
        "✍️ answer (writing…)"
    };
    let mut m = Message::text(Tone::Neutral, title);
    let text = r.redact(text.trim());
    let parts = crate::channel::text::split_markdown_parts(&text, part_len);
    let mut body = parts.first().map(|p| p.render()).unwrap_or_default();
    if parts.len() > 1 {
        body.push_str("\n…");
    }
    m.body = Some(body);
    m.markdown = true;
    m
}

/// How much of an uploaded answer its message previews.
pub const PREVIEW_LEN: usize = 1_200;

/// The turn's answer as it goes to chat, whole (R5): one message when it fits in `part_len`
/// characters, several split at paragraph and code-fence boundaries (fences balanced) when not, and
/// past `upload_over` bytes one message with a short preview that carries the whole answer as a
/// file (`answer.md`).
#[must_use]
pub fn answer_parts(r: &Redactor, text: &str, part_len: usize, upload_over: usize) -> Vec<Message> {
    let text = r.redact(text.trim());
    if text.len() > upload_over {
        let mut m = Message::text(Tone::Neutral, "💬 answer");
        let preview = crate::channel::text::preview(&text, PREVIEW_LEN);
        m.body = Some(format!(
            "{}\n\n_… the whole answer ({}) is in the file answer.md_",
            preview.trim_end(),
            crate::conversation::files::human_bytes(text.len() as u64)
        ));
        m.markdown = true;
        m.file = Some(crate::channel::OutFile {
            name: "answer.md".into(),
            content: text,
        });
        return vec![m];
    }
    let parts = crate::channel::text::split_markdown(&text, part_len);
    let n = parts.len();
    parts
        .into_iter()
        .enumerate()
        .map(|(i, body)| {
            let title = if n == 1 {
                "💬 answer".to_owned()
            } else {
                format!("💬 answer ({}/{n})", i + 1)
            };
            let mut m = Message::text(Tone::Neutral, title);
            m.body = Some(body);
            m.markdown = true;
            m
        })
        .collect()
}

/// A notice from the bridge itself.
#[must_use]
pub fn notice(r: &Redactor, tone: Tone, text: &str) -> Message {
    Message::text(tone, r.redact(text))
}

/// How much of a tool call's parameters an approval shows.
pub const TOOL_INPUT_CAP: usize = 1_500;
/// How much of one parameter an approval shows.
const TOOL_INPUT_VALUE_CAP: usize = 600;

/// What a permission request will run, for the people who approve it (R6): the tool's name, then
/// each parameter as `key: value` — the command (or the first of `command`, `cmd`, `script`) first
/// and whole lines — each value and the whole capped, redacted (R7). `None` when there is nothing to
/// show.
#[must_use]
pub fn tool_input(r: &Redactor, tool: Option<&str>, input: &serde_json::Value) -> Option<String> {
    use crate::channel::text::truncate_chars;
    // Redacted before it is cut, so no value shows half a secret (S2).
    let shown = |v: &serde_json::Value| {
        let text = match v {
            serde_json::Value::String(s) => r.redact(s),
            other => r.redact(&other.to_string()),
        };
        truncate_chars(&text, TOOL_INPUT_VALUE_CAP)
    };
    let mut lines = Vec::new();
    if let Some(tool) = tool {
        lines.push(format!("tool: {tool}"));
    }
    match input {
        serde_json::Value::Object(map) => {
            let first = ["command", "cmd", "script"]
                .into_iter()
                .find(|k| map.contains_key(*k));
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by_key(|k| Some(k.as_str()) != first);
            for k in keys {
                let v = &map[k.as_str()];
                if v.is_null() {
                    continue;
                }
                lines.push(format!("{}: {}", r.redact(k), shown(v)));
            }
        }
        serde_json::Value::Null => {}
        other => lines.push(shown(other)),
    }
    if lines.is_empty() {
        return None;
    }
    Some(truncate_chars(&lines.join("\n"), TOOL_INPUT_CAP))
}

/// A permission request with its options as buttons (R6); `decided` (heading, line) replaces the
/// "approval needed" heading with what was decided and the buttons with who decided what.
#[must_use]
pub fn permission(
    r: &Redactor,
    request: &str,
    title: &str,
    options: &[PermissionOption],
    detail: Option<&str>,
    decided: Option<(&str, &str)>,
) -> Message {
    let title = shown_title(r, title);
    let mut m = Message::text(Tone::Warning, format!("🔐 approval needed: {title}"));
    // The heading and the parameters together stay within TOOL_INPUT_CAP (R6).
    let room = TOOL_INPUT_CAP.saturating_sub(m.title.chars().count() + 1);
    m.code = detail.map(|d| crate::channel::text::truncate_chars(&r.redact(d), room));
    match decided {
        Some((heading, line)) => {
            m.tone = Tone::Neutral;
            m.title = format!("{heading}: {title}");
            m.footer = Some(line.to_owned());
        }
        None => {
            m.buttons = options
                .iter()
                .map(|o| Button {
                    value: super::keys::ButtonValue::Permission {
                        request: request.to_owned(),
                        option: o.option_id.clone(),
                    }
                    .to_string(),
                    label: if o.name.is_empty() {
                        o.option_id.clone()
                    } else {
                        o.name.clone()
                    },
                    style: match o.kind.as_str() {
                        "allow_once" | "allow_always" => Some("primary".into()),
                        "reject_once" | "reject_always" => Some("danger".into()),
                        _ => None,
                    },
                })
                .collect();
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(outcome: Outcome, output: &str) -> ToolResult {
        ToolResult {
            outcome,
            summary: Some("Command timed out after 2s".into()),
            output: output.into(),
            exit_code: None,
            signal: Some(15),
        }
    }

    #[test]
    fn r3_a_timeout_is_an_error_with_partial_output_and_a_pointer() {
        let m = tool_finished(
            &Redactor::default(),
            "sleep 30",
            &result(Outcome::TimedOut, "partial\n"),
            None,
            "tc-1",
            CHAT_OUTPUT_CAP,
        );
        assert_eq!(m.tone, Tone::Error);
        assert!(m.title.starts_with("⏱ sleep 30 — timed out"));
        assert_eq!(m.code.as_deref(), Some("partial"));
        assert!(
            m.footer
                .as_deref()
                .is_some_and(|f| f.contains("chat-bridge history show tc-1")
                    && f.contains("/api/v1/tool-calls/tc-1"))
        );
    }

    #[test]
    fn r3_a_silent_timeout_says_so_explicitly() {
        let m = tool_finished(
            &Redactor::default(),
            "sleep 30",
            &result(Outcome::TimedOut, ""),
            None,
            "tc-1",
            CHAT_OUTPUT_CAP,
        );
        assert_eq!(m.code, None);
        assert!(
            m.body
                .as_deref()
                .is_some_and(|b| b.contains("There was no output before it timed out."))
        );
    }

    #[test]
    fn r2_completed_and_cancelled_tones() {
        let ok = tool_finished(
            &Redactor::default(),
            "ls",
            &result(Outcome::Completed, "a\nb\n"),
            Some(Duration::from_secs(2)),
            "x",
            CHAT_OUTPUT_CAP,
        );
        assert_eq!(
            (ok.tone, ok.title.as_str(), ok.code.as_deref()),
            (Tone::Success, "✅ ls — 2s", Some("a\nb"))
        );
        let stop = tool_finished(
            &Redactor::default(),
            "ls",
            &result(Outcome::Cancelled, ""),
            None,
            "x",
            CHAT_OUTPUT_CAP,
        );
        assert_eq!(stop.tone, Tone::Neutral);
        assert!(stop.title.starts_with("⏹"));
    }

    #[test]
    fn long_output_keeps_the_tail_and_says_how_much_was_cut() {
        let out: String = (1..=2000).map(|i| format!("line {i}\n")).collect();
        let capped = cap_output(&out, 200);
        assert!(
            capped.starts_with("… ") && capped.ends_with("line 2000\n"),
            "{capped}"
        );
        assert!(capped.len() < 260);
    }

    #[test]
    fn r6_an_approval_shows_what_will_run_command_first_capped_and_redacted() {
        let r = Redactor::default();
        let input = serde_json::json!({"description": "deploy", "timeout": 60000,
            "command": "curl -H 'Authorization: token xoxb-123456789012-abcdefghijkl' https://x", "is_background": null});
        let detail = tool_input(&r, Some("run_shell_command"), &input).expect("detail");
        assert_eq!(
            detail,
            "tool: run_shell_command\ncommand: curl -H 'Authorization: token [redacted]' https://x\ndescription: deploy\ntimeout: 60000"
        );
        let m = permission(&r, "p1", "curl …", &[], Some(&detail), None);
        assert_eq!(m.code.as_deref(), Some(detail.as_str()), "shown as code");
        // A secret cut by the cap is redacted first, never shown in half.
        let long = format!("{} xoxb-123456789012-abcdefghijkl", "a".repeat(590));
        let detail = tool_input(&r, None, &serde_json::json!({"command": long})).expect("detail");
        assert!(!detail.contains("xoxb"), "{detail}");
        let huge =
            serde_json::json!({"a": "x".repeat(900), "b": "y".repeat(900), "c": "z".repeat(900)});
        let detail = tool_input(&r, None, &huge).expect("detail");
        assert!(detail.chars().count() <= TOOL_INPUT_CAP && detail.ends_with('…'));
        assert_eq!(tool_input(&r, None, &serde_json::json!({})), None);
    }

    #[test]
    fn r6_a_4000_character_command_keeps_the_whole_approval_within_1500_characters() {
        let r = Redactor::default();
        let command = format!("echo {}", "x".repeat(3995));
        let input = serde_json::json!({"command": command});
        let detail = tool_input(&r, Some("run_shell_command"), &input).expect("detail");
        for decided in [None, Some(("✅ approved", "by someone"))] {
            let m = permission(&r, "p1", &command, &[], Some(&detail), decided);
            let total =
                m.title.chars().count() + m.code.as_deref().map_or(0, |c| c.chars().count());
            assert!(total <= TOOL_INPUT_CAP, "{total} characters");
            assert!(m.title.chars().count() <= TITLE_CAP + 25, "{}", m.title);
        }
        let m = tool_running(&r, &command, Some((Duration::from_secs(5), None)));
        assert!(
            m.title.chars().count() <= TITLE_CAP + 2,
            "{}",
            m.title.len()
        );
        assert!(m.title.starts_with("⏳ echo xxx") && m.title.ends_with('…'));
    }

    #[test]
    fn r7_rendered_text_is_redacted() {
        let m = tool_finished(
            &Redactor::default(),
            "echo",
            &result(Outcome::Completed, "xoxb-123456789012-abcdefghijkl"),
            None,
            "x",
            CHAT_OUTPUT_CAP,
        );
        assert_eq!(m.code.as_deref(), Some("[redacted]"));
    }

    #[test]
    fn r3_without_the_api_the_pointer_names_only_the_command() {
        let m = without_api_pointer(tool_finished(
            &Redactor::default(),
            "sleep 30",
            &result(Outcome::TimedOut, "partial\n"),
            None,
            "tc-1",
            CHAT_OUTPUT_CAP,
        ));
        assert_eq!(
            m.footer.as_deref(),
            Some("full output: `chat-bridge history show tc-1`")
        );
    }

    #[test]
    fn r3_with_the_ui_the_pointer_leads_to_the_tool_calls_page() {
        let m = with_ui_pointer(
            tool_finished(
                &Redactor::default(),
                "sleep 30",
                &result(Outcome::TimedOut, "partial\n"),
                None,
                "tc-1",
                CHAT_OUTPUT_CAP,
            ),
            "https://bridge.example.com",
        );
        assert_eq!(
            m.footer.as_deref(),
            Some(
                "full output: `chat-bridge history show tc-1` · https://bridge.example.com/ui/tool-calls/tc-1"
            )
        );
    }
}
