//! The pages as pure functions of what the store returned: no I/O here, so the benchmark measures
//! exactly the server's rendering time. Every piece of user text passes the redactor (R7) and
//! [`super::ansi`] before maud escapes it.

use std::fmt::Write as _;

use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::ansi;
use crate::core::live::Snapshot;
use crate::core::redact::Redactor;
use crate::store::conversations::Conversation;
use crate::store::history::{Detail, Hit, Page};
use crate::store::permissions::PermissionRow;
use crate::store::tool_calls::ToolCall;
use crate::store::turns::Turn;

/// Output longer than this many lines is folded on the timeline ("show all").
pub const FOLD_LINES: usize = 30;
/// Output longer than this many bytes is not inlined on the timeline at all: its tail is, with a
/// link to the tool call's page.
pub const INLINE_MAX: usize = 64 * 1024;

/// What the navigation bar says about the viewer.
#[derive(Debug, Clone, Copy)]
pub struct Chrome<'a> {
    /// Who is signed in (`token`, or the proxy's user).
    pub who: &'a str,
    /// The current time, unix ms.
    pub now: i64,
}

/// `ms` (unix) as `2026-12-01 16:08:00 UTC`.
#[must_use]
pub fn time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Day number (since 1970-01-01) → (year, month, day); H. Hinnant's algorithm.
#[must_use]
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// (year, month, day) → day number since 1970-01-01.
#[must_use]
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A `datetime-local` value (`2026-12-01T16:08`, read as UTC), a date, or unix ms → unix ms.
#[must_use]
pub fn parse_time(s: &str) -> Option<i64> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse().ok();
    }
    let (date, clock) = s.split_once(['T', ' ']).unwrap_or((s, "00:00"));
    let mut d = date.splitn(3, '-').map(str::parse::<i64>);
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut c = clock.splitn(3, ':').map(|p| p.parse::<i64>());
    let (h, min) = (c.next()?.ok()?, c.next().unwrap_or(Ok(0)).ok()?);
    let sec = c.next().unwrap_or(Ok(0)).ok()?;
    if !(1..=12).contains(&m)
        || !(1..=31).contains(&day)
        || !(0..24).contains(&h)
        || !(0..60).contains(&min)
        || !(0..=60).contains(&sec)
    {
        return None;
    }
    let days = days_from_civil(y, u32::try_from(m).ok()?, u32::try_from(day).ok()?);
    Some(((days * 86_400) + h * 3600 + min * 60 + sec) * 1000)
}

/// A duration in ms as `850 ms`, `12.3 s`, `4m 05s`, `2h 03m`.
#[must_use]
pub fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else if ms < 3_600_000 {
        format!("{}m {:02}s", ms / 60_000, ms % 60_000 / 1000)
    } else {
        format!("{}h {:02}m", ms / 3_600_000, ms % 3_600_000 / 60_000)
    }
}

/// A path segment percent-encoded (ids are ours, but a page never trusts that).
#[must_use]
pub fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

fn id_like(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'@'))
}

/// The thread on its platform, when the platform gives a link and the ids look like its ids.
#[must_use]
pub fn permalink(c: &Conversation) -> Option<String> {
    if !(id_like(&c.workspace) && id_like(&c.channel) && id_like(&c.thread)) {
        return None;
    }
    match c.platform.as_str() {
        "slack" => Some(format!(
            "https://app.slack.com/client/{}/{}/thread/{}-{}",
            c.workspace, c.channel, c.channel, c.thread
        )),
        "discord" => Some(format!(
            "https://discord.com/channels/{}/{}",
            c.workspace, c.thread
        )),
        _ => None,
    }
}

/// The status icon and whether chat marks it as an error (R2, R3).
#[must_use]
pub fn tool_icon(status: &str) -> (&'static str, bool) {
    match status {
        "completed" => ("✅", false),
        "timed_out" => ("⏱", true),
        "failed" => ("❌", true),
        "cancelled" => ("⏹", false),
        "running" => ("⏳", false),
        _ => ("•", false),
    }
}

fn turn_is_error(status: &str) -> bool {
    matches!(status, "stalled" | "failed" | "interrupted")
}

/// Shown text: redacted (R7), controls made visible.
fn shown(r: &Redactor, s: &str) -> String {
    ansi::visible(&ansi::strip(&r.redact(s)))
}

/// A prompt as the page shows it: like `shown`, but a carriage return is not terminal output's
/// "back to the line start" — it is shown as `␍`, as the console shows it (a CRLF stays a newline).
fn shown_prompt(r: &Redactor, s: &str) -> String {
    shown(r, &s.replace("\r\n", "\n").replace('\r', "\u{240d}"))
}

fn layout(title: &str, chrome: Chrome<'_>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="referrer" content="no-referrer";
                title { (title) " · chat-bridge" }
                link rel="stylesheet" href="/ui/assets/ui.css";
                script src="/ui/assets/ui.js" defer {}
            }
            body {
                header {
                    nav {
                        strong { "chat-bridge" }
                        a href="/ui/" { "Conversations" }
                        a href="/ui/running" { "Running now" }
                        a href="/ui/overview" { "Overview" }
                        span.who { "signed in: " (ansi::visible(chrome.who)) }
                        form method="post" action="/ui/logout" { button type="submit" { "Sign out" } }
                    }
                }
                main { (body) }
                footer { "rendered " (time(chrome.now)) }
            }
        }
    }
}

/// A page that only says what went wrong (not found, a bad link, the store down).
#[must_use]
pub fn list_error(chrome: Chrome<'_>, msg: &str) -> Markup {
    layout(
        "Error",
        chrome,
        html! { h1 { "Sorry" } p.error role="alert" { (msg) } p { a href="/ui/" { "← conversations" } } },
    )
}

/// The sign-in page; `error` is what went wrong with the last attempt.
#[must_use]
pub fn login(
    error: Option<&str>,
    token_enabled: bool,
    sso_enabled: bool,
    next: Option<&str>,
) -> Markup {
    let sso = match next {
        Some(n) => format!("/ui/oidc/start?next={}", seg(n)),
        None => "/ui/oidc/start".to_owned(),
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "Sign in · chat-bridge" }
                link rel="stylesheet" href="/ui/assets/ui.css";
            }
            body.login {
                main {
                    h1 { "chat-bridge history" }
                    @if let Some(e) = error { p.error role="alert" { (e) } }
                    @if sso_enabled {
                        p { a.sso href=(sso) { "Sign in with single sign-on" } }
                    }
                    @if token_enabled {
                        form method="post" action="/ui/login" {
                            label for="token" { "API token" }
                            input #token type="password" name="token" autocomplete="current-password" required autofocus;
                            @if let Some(n) = next { input type="hidden" name="next" value=(n); }
                            button type="submit" { "Sign in" }
                        }
                    } @else if !sso_enabled {
                        p { "Signing in with the API token is off (no http.api_token). Use the single sign-on in front of this bridge." }
                    }
                }
            }
        }
    }
}

/// After a single sign-on: on to the pages (a same-site navigation, so the session cookie rides).
#[must_use]
pub fn signed_in(next: &str) -> Markup {
    let refresh = format!("0;url={next}");
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="refresh" content=(refresh);
                title { "Signed in · chat-bridge" }
                link rel="stylesheet" href="/ui/assets/ui.css";
            }
            body.login {
                main {
                    h1 { "Signed in" }
                    p { a href=(next) { "On to the history" } }
                }
            }
        }
    }
}

/// The list page's filters as given (strings, to fill the form back in).
#[derive(Debug, Clone, Default, serde::Deserialize, serde::Serialize)]
#[serde(default)]
pub struct ListQuery {
    /// `slack`, `discord`, `console`.
    pub platform: String,
    /// The project (`default` in the one-project configuration).
    pub project: String,
    /// Channel id.
    pub channel: String,
    /// Who started it.
    pub user: String,
    /// `active`, `closed`.
    pub status: String,
    /// From (datetime-local, UTC, or unix ms).
    pub since: String,
    /// Until.
    pub until: String,
    /// Search text (the API's search).
    pub q: String,
    /// Page cursor.
    pub cursor: String,
    /// Page size.
    pub limit: String,
}

impl ListQuery {
    /// The same filters on the page after `cursor`.
    #[must_use]
    pub fn next_href(&self, cursor: &str) -> String {
        let mut q = self.clone();
        q.cursor = cursor.to_owned();
        let pairs: Vec<(&str, &str)> = [
            ("platform", q.platform.as_str()),
            ("project", &q.project),
            ("channel", &q.channel),
            ("user", &q.user),
            ("status", &q.status),
            ("since", &q.since),
            ("until", &q.until),
            ("limit", &q.limit),
            ("cursor", &q.cursor),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .collect();
        format!(
            "/ui/?{}",
            serde_urlencoded::to_string(pairs).unwrap_or_default()
        )
    }
}

/// What the list page shows: a page of conversations, or search hits.
#[derive(Debug)]
pub enum Listing<'a> {
    /// Filtered conversations.
    Page(&'a Page),
    /// Search hits.
    Hits(&'a [Hit]),
}

/// `/ui/`: the conversations table with its filter form.
#[must_use]
pub fn list(
    r: &Redactor,
    chrome: Chrome<'_>,
    q: &ListQuery,
    listing: &Listing<'_>,
    error: Option<&str>,
) -> Markup {
    let body = html! {
        h1 { "Conversations" }
        form.filters method="get" action="/ui/" {
            label { "Platform " select name="platform" {
                @for p in ["", "slack", "discord", "console"] {
                    option value=(p) selected[q.platform == p] { @if p.is_empty() { "any" } @else { (p) } }
                }
            } }
            label { "Project " input name="project" value=(q.project) size="10"; }
            label { "Channel " input name="channel" value=(q.channel) size="12"; }
            label { "User " input name="user" value=(q.user) size="12"; }
            label { "Status " select name="status" {
                @for s in ["", "active", "closed"] {
                    option value=(s) selected[q.status == s] { @if s.is_empty() { "any" } @else { (s) } }
                }
            } }
            label { "From (UTC) " input type="datetime-local" name="since" value=(q.since); }
            label { "Until (UTC) " input type="datetime-local" name="until" value=(q.until); }
            label { "Search " input type="search" name="q" value=(q.q) placeholder="prompt, answer, tool, output"; }
            button type="submit" { "Apply" }
            a href="/ui/" { "clear" }
        }
        @if let Some(e) = error { p.error role="alert" { (e) } }
        @match listing {
            Listing::Page(page) => {
                table.list #conversations {
                    thead { tr { th { "Started" } th { "Platform" } th { "Channel" } th { "User" } th { "Title" } th { "Status" } th { "Thread" } } }
                    tbody {
                        @for c in &page.items {
                            tr {
                                td.t { (time(c.created_at)) }
                                td { (ansi::visible(&c.platform)) }
                                td { (ansi::visible(&c.channel)) }
                                td { (ansi::visible(&c.started_by)) }
                                td { a href={ "/ui/conversations/" (seg(&c.id)) } { (shown(r, if c.title.is_empty() { "(untitled)" } else { &c.title })) } }
                                td { (ansi::visible(&c.status)) }
                                td { @if let Some(link) = permalink(c) { a href=(link) rel="noopener noreferrer" target="_blank" { "open" } } }
                            }
                        }
                    }
                }
                @if page.items.is_empty() { p.empty { "No conversations match." } }
                @if let Some(next) = &page.next_cursor { p { a.next href=(q.next_href(next)) { "Next page →" } } }
            }
            Listing::Hits(hits) => {
                table.list #hits {
                    thead { tr { th { "When" } th { "Where" } th { "Match" } } }
                    tbody {
                        @for h in hits.iter() {
                            tr {
                                td.t { (time(h.at)) }
                                td { (h.field) }
                                td {
                                    @if h.field.starts_with("tool") {
                                        a href={ "/ui/tool-calls/" (seg(&h.id)) } { (shown(r, &h.snippet)) }
                                    } @else {
                                        a href={ "/ui/conversations/" (seg(&h.conversation_id)) } { (shown(r, &h.snippet)) }
                                    }
                                }
                            }
                        }
                    }
                }
                @if hits.is_empty() { p.empty { "Nothing found." } }
            }
        }
    };
    layout("Conversations", chrome, body)
}

fn output_block(r: &Redactor, call: &ToolCall, fold: bool) -> Markup {
    let Some(out) = call.output.as_deref().filter(|o| !o.is_empty()) else {
        return html! { p.none { @if call.status == "timed_out" { "There was no output before it timed out." } @else { "(no output)" } } };
    };
    let out = r.redact(out);
    if !fold {
        return html! { pre.out { (PreEscaped(ansi::to_html(&out))) } };
    }
    let lines = out.lines().count();
    if out.len() > INLINE_MAX {
        let mut start = out.len() - INLINE_MAX / 4;
        while !out.is_char_boundary(start) {
            start += 1;
        }
        return html! {
            pre.out { "…\n" (PreEscaped(ansi::to_html(&out[start..]))) }
            p { a href={ "/ui/tool-calls/" (seg(&call.id)) } { "show all " (lines) " lines (" (out.len() / 1024) " KiB)" } }
        };
    }
    if lines <= FOLD_LINES {
        return html! { pre.out { (PreEscaped(ansi::to_html(&out))) } };
    }
    let tail_from = out
        .match_indices('\n')
        .nth_back(FOLD_LINES)
        .map_or(0, |(i, _)| i + 1);
    html! {
        details.fold {
            summary { "show all " (lines) " lines" }
            pre.out { (PreEscaped(ansi::to_html(&out))) }
        }
        pre.out.tail { "…\n" (PreEscaped(ansi::to_html(&out[tail_from..]))) }
    }
}

fn tool_item(r: &Redactor, call: &ToolCall, now: i64) -> Markup {
    let (icon, error) = tool_icon(&call.status);
    let took = call.finished_at.unwrap_or(now) - call.started_at;
    html! {
        li.tool.error[error] data-status=(call.status) {
            div.head {
                span.icon { (icon) } " "
                a.title href={ "/ui/tool-calls/" (seg(&call.id)) } { (shown(r, &call.title)) }
                span.meta {
                    " · " (call.status.replace('_', " "))
                    " · " (duration(took)) @if call.finished_at.is_none() { " so far" }
                    " · " (call.heartbeats) " heartbeat" @if call.heartbeats != 1 { "s" }
                    @if let Some(code) = call.exit_code { @if code != 0 { " · exit code " (code) } }
                    @if let Some(sig) = call.signal { " · signal " (sig) }
                }
            }
            @if let Some(s) = call.summary.as_deref().filter(|s| !s.is_empty()) {
                @if error { p.summary.error { "ERROR " (shown(r, s)) } } @else { p.summary { (shown(r, s)) } }
            }
            (output_block(r, call, true))
        }
    }
}

fn option_name(options: &str, id: &str) -> String {
    serde_json::from_str::<serde_json::Value>(options)
        .ok()
        .and_then(|v| {
            v.as_array()?.iter().find_map(|o| {
                (o.get("optionId")?.as_str()? == id).then(|| {
                    o.get("name")
                        .and_then(|n| n.as_str())
                        .unwrap_or(id)
                        .to_owned()
                })
            })
        })
        .unwrap_or_else(|| id.to_owned())
}

fn approval_item(r: &Redactor, p: &PermissionRow) -> Markup {
    html! {
        li.approval data-status=(p.status) {
            span.icon { "🔐" } " approval: " (shown(r, &p.title)) " · asked by " (ansi::visible(&p.requester)) " at " (time(p.created_at))
            br;
            @match p.status.as_str() {
                "decided" => {
                    strong { (ansi::visible(&option_name(&p.options, p.option_id.as_deref().unwrap_or("")))) }
                    " by " (ansi::visible(p.decider.as_deref().unwrap_or("?")))
                    @if let Some(at) = p.decided_at { " at " (time(at)) }
                }
                "expired" => { strong { "expired" } " (answered as rejected)" @if let Some(at) = p.decided_at { " at " (time(at)) } }
                "pending" => { "waiting until " (time(p.expires_at)) }
                other => { (ansi::visible(other)) }
            }
        }
    }
}

/// Items of one turn in time order.
enum Item<'a> {
    Tool(&'a ToolCall),
    Approval(&'a PermissionRow),
}

/// A turn's tool calls and approvals, in time order.
fn turn_items<'a>(d: &'a Detail, approvals: &'a [PermissionRow], turn: &Turn) -> Vec<Item<'a>> {
    let mut items: Vec<Item<'a>> = d
        .tool_calls
        .iter()
        .filter(|t| t.turn_id.as_deref() == Some(&turn.id))
        .map(Item::Tool)
        .chain(
            approvals
                .iter()
                .filter(|p| p.turn_id.as_deref() == Some(&turn.id))
                .map(Item::Approval),
        )
        .collect();
    // An approval goes just before the call it gated (the agent may announce the call first).
    let gated_at = |p: &PermissionRow| {
        p.call_id
            .as_deref()
            .and_then(|id| {
                d.tool_calls
                    .iter()
                    .find(|t| t.call_id == id && t.turn_id == p.turn_id)
            })
            .map_or(p.created_at, |t| t.started_at.min(p.created_at))
    };
    items.sort_by_key(|it| match it {
        Item::Tool(t) => (t.started_at, 1),
        Item::Approval(p) => (gated_at(p), 0),
    });
    items
}

fn turn_block(r: &Redactor, turn: &Turn, items: &[Item<'_>], now: i64) -> Markup {
    let error = turn_is_error(&turn.status);
    html! {
        section.turn.error[error] id={ "turn-" (turn.seq) } data-status=(turn.status) {
            h2 {
                "Turn " (turn.seq) " · " (ansi::visible(&turn.requested_by)) " · " (time(turn.started_at))
                @if let Some(end) = turn.ended_at { " · " (duration(end - turn.started_at)) }
                " · " span.status { (turn.status) }
            }
            blockquote.prompt { pre { (shown_prompt(r, &turn.prompt)) } }
            ol.items {
                @for it in items {
                    @match it {
                        Item::Tool(t) => (tool_item(r, t, now)),
                        Item::Approval(p) => (approval_item(r, p)),
                    }
                }
            }
            @if error {
                p.error role="status" {
                    "ERROR " @match turn.status.as_str() {
                        "stalled" => "the turn stalled: no word from the agent within its limit",
                        "interrupted" => "the turn was interrupted (the bridge or the daemon went away) and was not re-run",
                        _ => "the turn failed",
                    }
                    @if let Some(c) = &turn.end_cause { " (" (ansi::visible(c)) ")" }
                }
            }
            @if let Some(a) = turn.answer.as_deref().filter(|a| !a.is_empty()) {
                div.answer { h3 { "Answer" } pre { (shown(r, a)) } }
            }
        }
    }
}

/// `/ui/conversations/{id}`: the conversation's turns as a timeline.
#[must_use]
pub fn conversation(
    r: &Redactor,
    chrome: Chrome<'_>,
    d: &Detail,
    approvals: &[PermissionRow],
) -> Markup {
    let c = &d.conversation;
    let title = shown(
        r,
        if c.title.is_empty() {
            "(untitled)"
        } else {
            &c.title
        },
    );
    let orphans: Vec<&ToolCall> = d
        .tool_calls
        .iter()
        .filter(|t| {
            t.turn_id
                .as_ref()
                .is_none_or(|id| !d.turns.iter().any(|u| &u.id == id))
        })
        .collect();
    let body = html! {
        h1 { (title) }
        p.meta {
            (ansi::visible(&c.platform)) " · channel " (ansi::visible(&c.channel)) " · started by " (ansi::visible(&c.started_by))
            " · " (time(c.created_at)) " · " (c.status)
            @if let Some(link) = permalink(c) { " · " a href=(link) rel="noopener noreferrer" target="_blank" { "open the thread" } }
        }
        @for turn in &d.turns {
            (turn_block(r, turn, &turn_items(d, approvals, turn), chrome.now))
        }
        @if !orphans.is_empty() {
            section.turn { h2 { "Tool calls outside a turn" } ol.items { @for t in &orphans { (tool_item(r, t, chrome.now)) } } }
        }
        @if d.turns.is_empty() && orphans.is_empty() { p.empty { "Nothing ran in this conversation yet." } }
    };
    layout(&title, chrome, body)
}

/// `/ui/tool-calls/{id}`: one call with its full output.
#[must_use]
pub fn tool_call(r: &Redactor, chrome: Chrome<'_>, call: &ToolCall) -> Markup {
    let title = shown(r, &call.title);
    let (icon, error) = tool_icon(&call.status);
    let body = html! {
        h1.error[error] { (icon) " " (title) }
        p.meta {
            a href={ "/ui/conversations/" (seg(&call.conversation_id)) } { "← conversation" }
            " · " (call.status.replace('_', " "))
            " · started " (time(call.started_at))
            " · " (duration(call.finished_at.unwrap_or(chrome.now) - call.started_at))
            " · " (call.heartbeats) " heartbeats"
            @if let Some(code) = call.exit_code { " · exit code " (code) }
            @if let Some(sig) = call.signal { " · signal " (sig) }
            " · " a.download href={ "/ui/tool-calls/" (seg(&call.id)) "/output.txt" } download { "download as text" }
        }
        @if let Some(s) = call.summary.as_deref().filter(|s| !s.is_empty()) {
            p.summary.error[error] { @if error { "ERROR " } (shown(r, s)) }
        }
        (output_block(r, call, false))
    };
    layout(&title, chrome, body)
}

/// The live part of `/ui/running` (also the data of each server-sent event): this replica's open
/// turns from its own memory, with their running calls and liveness. `standby`: this replica runs
/// nothing (another is active). Elapsed times carry `data-ms` (their value at `now`) so the page's
/// script can count them on between events.
#[must_use]
pub fn running_fragment(r: &Redactor, now: i64, live: &Snapshot, standby: bool) -> Markup {
    let calls: usize = live.turns.iter().map(|t| t.tools.len()).sum();
    html! {
        p.meta #live-at data-version=(live.version) { "As of " (time(now)) "." }
        @if standby { p.meta #standby { "This replica is standing by: the active one runs the turns." } }
        h2 { "Open turns (" (live.turns.len()) ")" }
        @if live.turns.is_empty() { p.empty #no-turns { "Nothing is running." } } @else {
            table.list #open-turns {
                thead { tr { th { "Started" } th { "Elapsed" } th { "Project" } th { "Where" } th { "By" } th { "Prompt" } th { "Liveness" } } }
                tbody { @for t in &live.turns { tr.error[t.stalled] data-turn=(t.turn_id) {
                    td.t { (time(t.started_at)) }
                    td { span.elapsed data-ms=(now - t.started_at) { (duration(now - t.started_at)) } }
                    td { (ansi::visible(&t.project)) }
                    td { (ansi::visible(&t.platform)) " · " (ansi::visible(&t.channel)) }
                    td { (ansi::visible(&t.user)) }
                    td { a href={ "/ui/conversations/" (seg(&t.conversation_id)) "#turn-" (t.seq) } { (shown_prompt(r, &first_line(&t.prompt, 120))) } }
                    td.liveness {
                        @if t.stalled { "⚠ stalled" } @else if t.cancelling { "cancelling" } @else {
                            "last frame " span.elapsed data-ms=(now - t.last_frame) data-suffix=" ago" { (duration(now - t.last_frame)) " ago" }
                            @if let Some(at) = t.stall_at { " · silent until " span.t { (time(at).get(11..19).unwrap_or("")) } " UTC is a stall" }
                        }
                        @if t.queued > 0 { " · " (t.queued) " queued" }
                    }
                } } }
            }
        }
        h2 { "Running tool calls (" (calls) ")" }
        @if calls > 0 {
            table.list #running-calls {
                thead { tr { th { "Tool" } th { "Elapsed" } th { "Heartbeats" } th { "Last heartbeat" } th { "Output" } } }
                tbody { @for t in &live.turns { @for c in &t.tools { tr data-id=(c.id) data-heartbeats=(c.heartbeats) {
                    td { @if c.awaiting_approval { "✋ " } @else { "⏳ " } @if let Some(id) = &c.stored_id { a href={ "/ui/tool-calls/" (seg(id)) } { (shown(r, &first_line(&c.title, 120))) } } @else { (shown(r, &first_line(&c.title, 120))) } }
                    td { @if c.awaiting_approval { "awaiting approval" } @else { span.elapsed data-ms=(now - c.started_at) { (duration(now - c.started_at)) } } }
                    td.hb { (c.heartbeats) }
                    td { @if let Some(p) = c.last_heartbeat { span.elapsed data-ms=(now - p) data-suffix=" ago" { (duration(now - p)) " ago" } } @else { "none yet" } }
                    td { @if let Some(p) = &c.progress {
                        @if let Some(l) = p.total_lines { (l) " lines" }
                        @if let Some(a) = p.last_output_age_ms { " · last output " (duration(i64::try_from(a).unwrap_or(i64::MAX))) " before" }
                        @if let Some(t) = p.timeout_ms { " · timeout " (duration(i64::try_from(t).unwrap_or(i64::MAX))) }
                    } }
                } } } }
            }
        }
    }
}

fn first_line(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or("");
    let mut out: String = line.chars().take(max).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

/// `/ui/running`.
#[must_use]
pub fn running(r: &Redactor, chrome: Chrome<'_>, live: &Snapshot, standby: bool) -> Markup {
    let body = html! {
        h1 { "Running now" }
        p.meta { "What this bridge runs now, from its own memory, updated live without a reload. With several replicas, this is the replica you reached." }
        div #live data-src="/ui/running/events" { (running_fragment(r, chrome.now, live, standby)) }
    };
    layout("Running now", chrome, body)
}

/// One day of the overview.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Day {
    /// Day number since 1970-01-01 (UTC).
    pub day: i64,
    /// Tool calls by outcome: completed, failed, timed_out, cancelled, running.
    pub outcomes: [u64; 5],
    /// p50 and p95 of finished calls' durations, ms.
    pub p50_ms: Option<i64>,
    /// p95.
    pub p95_ms: Option<i64>,
    /// Turns that stalled.
    pub stalls: u64,
}

/// The outcome names in [`Day::outcomes`] order.
pub const OUTCOMES: [&str; 5] = ["completed", "failed", "timed_out", "cancelled", "running"];

/// The overview's figures, computed from rows.
#[derive(Debug, Clone, Default)]
pub struct Overview {
    /// One entry per day, oldest first.
    pub days: Vec<Day>,
    /// Outbox dead letters kept.
    pub dead_outbox: i64,
    /// Inbound events set aside.
    pub dead_inbound: i64,
}

fn percentile(sorted: &[i64], p: f64) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p * (sorted.len() - 1) as f64).round() as usize;
    sorted.get(rank.min(sorted.len() - 1)).copied()
}

impl Overview {
    /// Days `first..=last` from tool-call timings and turn endings.
    #[must_use]
    pub fn build(
        first: i64,
        last: i64,
        calls: &[(String, i64, Option<i64>)],
        endings: &[(String, i64)],
    ) -> Vec<Day> {
        let n = usize::try_from(last - first + 1).unwrap_or(0).min(366);
        let mut days: Vec<Day> = (0..n)
            .map(|i| Day {
                day: first + i as i64,
                ..Day::default()
            })
            .collect();
        let mut durations: Vec<Vec<i64>> = vec![Vec::new(); n];
        let slot = |ms: i64| {
            usize::try_from(ms.div_euclid(86_400_000) - first)
                .ok()
                .filter(|i| *i < n)
        };
        for (status, started, finished) in calls {
            let Some(i) = slot(*started) else { continue };
            if let Some(k) = OUTCOMES.iter().position(|o| o == status) {
                days[i].outcomes[k] += 1;
            }
            if let Some(f) = finished {
                durations[i].push(f - started);
            }
        }
        for (i, mut d) in durations.into_iter().enumerate() {
            d.sort_unstable();
            days[i].p50_ms = percentile(&d, 0.5);
            days[i].p95_ms = percentile(&d, 0.95);
        }
        for (status, ended) in endings {
            if status == "stalled"
                && let Some(i) = slot(*ended)
            {
                days[i].stalls += 1;
            }
        }
        days
    }
}

fn day_label(day: i64) -> String {
    let (_, m, d) = civil_from_days(day);
    format!("{m:02}-{d:02}")
}

const W: f64 = 640.0;
const H: f64 = 160.0;

/// One named series of a bar chart: a value per day.
type Series<'a> = (&'a str, Vec<f64>);

/// Stacked bars, one per day, with a tooltip per segment.
fn bars_svg(
    label: &str,
    days: &[Day],
    series: &[Series<'_>],
    unit: &dyn Fn(f64) -> String,
) -> Markup {
    let max = (0..days.len())
        .map(|i| {
            series
                .iter()
                .map(|(_, v)| v.get(i).copied().unwrap_or(0.0))
                .sum::<f64>()
        })
        .fold(0.0_f64, f64::max);
    let n = days.len().max(1) as f64;
    let bw = (W - 40.0) / n;
    // Each segment as (series, x, y, height, value), stacked bottom-up.
    let mut rects = Vec::new();
    for (i, d) in days.iter().enumerate() {
        let x = 40.0 + i as f64 * bw;
        let mut y = H;
        for (j, (_, values)) in series.iter().enumerate() {
            let v = values.get(i).copied().unwrap_or(0.0);
            let h = if max > 0.0 { v / max * (H - 10.0) } else { 0.0 };
            y -= h;
            if v > 0.0 {
                rects.push((j, d.day, x, y, h, v));
            }
        }
    }
    html! {
        figure {
            svg.chart viewBox={ "0 0 " (W) " " (H + 20.0) } role="img" aria-label=(label) {
                title { (label) }
                line.axis x1="40" y1=(H) x2=(W) y2=(H) {}
                text.tick x="0" y="12" { (unit(max)) }
                @for (j, day, x, y, h, v) in rects {
                    rect class={ "s" (j) } x=(format!("{x:.1}")) y=(format!("{y:.1}")) width=(format!("{:.1}", (bw - 2.0).max(1.0))) height=(format!("{h:.1}")) {
                        title { (day_label(day)) " " (series[j].0) ": " (unit(v)) }
                    }
                }
                @for (i, d) in days.iter().enumerate() {
                    @if days.len() <= 16 || i % (days.len() / 8).max(1) == 0 {
                        text.tick x=(format!("{:.1}", 40.0 + i as f64 * bw)) y=(H + 14.0) { (day_label(d.day)) }
                    }
                }
            }
            figcaption {
                (label)
                @if series.len() > 1 { " — " @for (j, (name, _)) in series.iter().enumerate() { span class={ "key s" (j) } { "■" } " " (name) " " } }
            }
        }
    }
}

/// `/ui/overview`: outcomes over time, p50/p95 durations, stalls and dead letters, as inline SVG.
#[must_use]
pub fn overview(chrome: Chrome<'_>, o: &Overview) -> Markup {
    let count = |v: f64| format!("{v:.0}");
    let ms = |v: f64| duration(v as i64);
    let per_day = |f: &dyn Fn(&Day) -> f64| o.days.iter().map(f).collect::<Vec<f64>>();
    let outcome_series: Vec<Series<'_>> = OUTCOMES
        .iter()
        .enumerate()
        .map(|(k, name)| (*name, per_day(&|d: &Day| d.outcomes[k] as f64)))
        .collect();
    let duration_series: [Series<'_>; 2] = [
        ("p50", per_day(&|d: &Day| d.p50_ms.unwrap_or(0) as f64)),
        (
            "p95",
            per_day(&|d: &Day| (d.p95_ms.unwrap_or(0) - d.p50_ms.unwrap_or(0)).max(0) as f64),
        ),
    ];
    let stall_series: [Series<'_>; 1] = [("stalls", per_day(&|d: &Day| d.stalls as f64))];
    let totals: [u64; 5] = o.days.iter().fold([0; 5], |mut acc, d| {
        for (a, v) in acc.iter_mut().zip(d.outcomes) {
            *a += v;
        }
        acc
    });
    let body = html! {
        h1 { "Overview" }
        p.meta { "Last " (o.days.len()) " days (UTC). "
            @for (k, name) in OUTCOMES.iter().enumerate() { (name.replace('_', " ")) ": " strong { (totals[k]) } " · " }
            "stalled turns: " strong { (o.days.iter().map(|d| d.stalls).sum::<u64>()) } }
        (bars_svg("Tool calls by outcome per day", &o.days, &outcome_series, &count))
        (bars_svg("Tool durations per day: p50, and p95 above it", &o.days, &duration_series, &ms))
        (bars_svg("Stalled turns per day", &o.days, &stall_series, &count))
        h2 { "Dead letters" }
        @let dmax = o.dead_outbox.max(o.dead_inbound).max(1) as f64;
        svg.chart.dead viewBox="0 0 640 60" role="img" aria-label="dead letters" {
            title { "Dead letters: chat actions refused for good, inbound events set aside" }
            rect.s1 x="160" y="5" height="20" width=(format!("{:.1}", o.dead_outbox as f64 / dmax * 460.0)) {}
            text.tick x="0" y="20" { "outbox: " (o.dead_outbox) }
            rect.s2 x="160" y="35" height="20" width=(format!("{:.1}", o.dead_inbound as f64 / dmax * 460.0)) {}
            text.tick x="0" y="50" { "inbound: " (o.dead_inbound) }
        }
        p.meta { "Details: " code { "GET /api/v1/dead-letters" } "." }
    };
    layout("Overview", chrome, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip_and_parse() {
        assert_eq!(time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(time(1_796_083_200_000), "2026-12-01 00:00:00 UTC");
        assert_eq!(parse_time("2026-12-01T00:00"), Some(1_796_083_200_000));
        assert_eq!(parse_time("2026-12-01"), Some(1_796_083_200_000));
        assert_eq!(parse_time("1796083200000"), Some(1_796_083_200_000));
        for bad in ["2026-13-01", "nonsense", "2026-12-01T25:00", "-1"] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
        for day in [-1000, 0, 19_000, 20_788, 40_000] {
            let (y, m, d) = civil_from_days(day);
            assert_eq!(days_from_civil(y, m, d), day);
        }
    }

    #[test]
    fn percentiles_and_days() {
        let calls = vec![
            ("completed".to_owned(), 0, Some(100)),
            ("completed".to_owned(), 10, Some(210)),
            ("timed_out".to_owned(), 20, Some(1020)),
            ("running".to_owned(), 86_400_000, None),
        ];
        let days = Overview::build(0, 1, &calls, &[("stalled".into(), 86_400_001)]);
        assert_eq!(days[0].outcomes, [2, 0, 1, 0, 0]);
        assert_eq!((days[0].p50_ms, days[0].p95_ms), (Some(200), Some(1000)));
        assert_eq!((days[1].outcomes[4], days[1].stalls), (1, 1));
    }

    #[test]
    fn permalinks_only_for_id_shaped_ids() {
        let mut c = Conversation {
            id: "c".into(),
            platform: "discord".into(),
            project: "default".into(),
            workspace: "1".into(),
            channel: "2".into(),
            thread: "2".into(),
            daemon_session: None,
            cwd: String::new(),
            started_by: String::new(),
            title: String::new(),
            status: "active".into(),
            created_at: 0,
            updated_at: 0,
        };
        assert_eq!(
            permalink(&c).as_deref(),
            Some("https://discord.com/channels/1/2")
        );
        c.thread = "javascript:alert(1)".into();
        assert_eq!(permalink(&c), None);
        c.platform = "console".into();
        c.thread = "2".into();
        assert_eq!(permalink(&c), None);
    }

    #[test]
    fn a_carriage_return_in_a_prompt_is_a_visible_placeholder() {
        let r = Redactor::default();
        assert_eq!(shown_prompt(&r, "ls\rrm -rf /"), "ls\u{240d}rm -rf /");
        assert_eq!(shown_prompt(&r, "a\r\nb"), "a\nb");
    }
}
