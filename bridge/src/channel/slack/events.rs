//! Socket Mode envelopes → what the bridge does with them. Pure, so every rule is tested on its own:
//! every envelope with an `envelope_id` is acknowledged first; mentions and DMs start a conversation in
//! a thread (`thread_ts` = the mention's `ts`); replies in a thread continue it; bot messages (ours
//! included), edits, deletions and other subtypes are ignored — except `file_share`, a message with
//! files, which is never dropped; button clicks become actions; the
//! A-rules (allowed channels and users, DM policy) decide who may prompt. Message text is decoded
//! from Slack's format into what the person typed (R8).

use serde_json::Value;

use crate::channel::{Attachment, Inbound, InboundKind, Target};

/// Who may prompt (A-rules). Empty lists allow everyone, which start-up refuses for users unless
/// `access.open` says so on purpose (A1). DMs follow the user list too.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    /// Channel ids the bridge answers in.
    pub channels: Vec<String>,
    /// User ids who may prompt.
    pub users: Vec<String>,
    /// Whether direct messages are answered.
    pub allow_dms: bool,
}

impl Access {
    fn allows(&self, channel: &str, user: &str, dm: bool) -> bool {
        let channel_ok = if dm {
            self.allow_dms
        } else {
            self.channels.is_empty() || self.channels.iter().any(|c| c == channel)
        };
        channel_ok && (self.users.is_empty() || self.users.iter().any(|u| u == user))
    }
}

/// What an envelope means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// `hello`: connected.
    Hello,
    /// `disconnect`: open a new connection (reason given).
    Disconnect(String),
    /// Hand this to the core.
    Inbound(Inbound),
    /// Nothing to do (why, for debug logs; never message text).
    Ignore(&'static str),
    /// Refused by the access rules (A1): ignored like [`Decision::Ignore`], but counted in
    /// `chatbridge_access_refusals_total` so on-call sees strangers knocking.
    Refused(&'static str),
}

/// The `envelope_id` to acknowledge, if the envelope has one.
#[must_use]
pub fn ack_id(envelope: &Value) -> Option<&str> {
    envelope.get("envelope_id").and_then(Value::as_str)
}

/// Decides what an envelope means. `me` is our bot user id (from `auth.test`).
#[must_use]
pub fn decide(envelope: &Value, me: &str, access: &Access) -> Decision {
    match envelope.get("type").and_then(Value::as_str) {
        Some("hello") => Decision::Hello,
        Some("disconnect") => Decision::Disconnect(
            envelope
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("unknown")
                .to_owned(),
        ),
        Some("events_api") => event(&envelope["payload"], me, access),
        Some("interactive") => interactive(&envelope["payload"], envelope, access),
        _ => Decision::Ignore("envelope type not handled"),
    }
}

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

/// The prompt a person typed: our own mention (`<@UBOT>`) removed, then Slack's format decoded
/// ([`super::format::decode`]: `&gt;` is `>`, `<https://x>` is the URL, `<@U1>` is `@U1`).
fn prompt(text: &str, me: &str) -> String {
    let mut text = text.replace(&format!("<@{me}>"), "");
    let labelled = format!("<@{me}|");
    while let Some(at) = text.find(&labelled) {
        let Some(end) = text[at..].find('>') else {
            break;
        };
        text.replace_range(at..=at + end, "");
    }
    super::format::decode(&text).trim().to_owned()
}

fn event(payload: &Value, me: &str, access: &Access) -> Decision {
    let ev = &payload["event"];
    let (Some(event_id), Some(team)) = (s(payload, "event_id"), s(payload, "team_id")) else {
        return Decision::Ignore("event without event_id or team_id");
    };
    if ev.get("bot_id").is_some() || s(ev, "user") == Some(me) {
        return Decision::Ignore("bot message");
    }
    // A message with files is `file_share`: handled like any message, never dropped (its text
    // runs and each file is used or explained).
    if ev.get("subtype").is_some() && s(ev, "subtype") != Some("file_share") {
        return Decision::Ignore("edits, deletions and other subtypes");
    }
    let (Some(user), Some(channel), Some(ts)) = (s(ev, "user"), s(ev, "channel"), s(ev, "ts"))
    else {
        return Decision::Ignore("event without user, channel or ts");
    };
    let text = s(ev, "text").unwrap_or("");
    let dm = s(ev, "channel_type") == Some("im");
    let thread = s(ev, "thread_ts").unwrap_or(ts).to_owned();
    let opens = match s(ev, "type") {
        Some("app_mention") => true,
        Some("message") if dm => true,
        // A mention also arrives as a message event; the app_mention one handles it.
        Some("message") if text.contains(&format!("<@{me}>")) => {
            return Decision::Ignore("mention echoed as a message");
        }
        // Replies in threads: the core continues them only where a conversation exists.
        Some("message") if s(ev, "thread_ts").is_some() => false,
        _ => return Decision::Ignore("not a mention, a DM, or a thread reply"),
    };
    if !access.allows(channel, user, dm) {
        return Decision::Refused("not allowed by the access rules");
    }
    Decision::Inbound(Inbound {
        event_id: event_id.to_owned(),
        platform: "slack".into(),
        target: Target {
            workspace: team.to_owned(),
            channel: channel.to_owned(),
            thread,
        },
        user: user.to_owned(),
        message_id: Some(ts.to_owned()),
        opens,
        kind: match files(ev) {
            f if f.is_empty() => InboundKind::Message(prompt(text, me)),
            files => InboundKind::Files {
                text: prompt(text, me),
                files,
            },
        },
    })
}

/// The files of a message event (`files`: Slack's file objects). A file Slack hides from bots
/// (`mode: "tombstone"` / `"hidden_by_limit"`) still counts, so the person hears it was not used.
fn files(ev: &Value) -> Vec<Attachment> {
    ev.get("files")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|f| {
            let id = s(f, "id")?;
            Some(Attachment {
                id: id.to_owned(),
                name: s(f, "name")
                    .or_else(|| s(f, "title"))
                    .unwrap_or(id)
                    .to_owned(),
                mime: s(f, "mimetype").map(str::to_owned),
                size: f.get("size").and_then(Value::as_u64),
                url: s(f, "url_private_download")
                    .or_else(|| s(f, "url_private"))
                    .map(str::to_owned),
            })
        })
        .collect()
}

fn interactive(payload: &Value, envelope: &Value, access: &Access) -> Decision {
    if s(payload, "type") != Some("block_actions") {
        return Decision::Ignore("interaction type not handled");
    }
    let user = payload["user"]["id"].as_str().unwrap_or("");
    let channel = payload["channel"]["id"].as_str().unwrap_or("");
    let team = payload["team"]["id"].as_str().unwrap_or("");
    let message = &payload["message"];
    let thread = s(message, "thread_ts")
        .or_else(|| s(message, "ts"))
        .unwrap_or("");
    let Some(value) = payload["actions"][0]["value"].as_str() else {
        return Decision::Ignore("action without a value");
    };
    if user.is_empty() || channel.is_empty() || thread.is_empty() {
        return Decision::Ignore("action without user, channel or message");
    }
    // Access to *decide* is the core's (requester or approver); only the channel rule applies here.
    if !access.channels.is_empty() && !access.channels.iter().any(|c| c == channel) {
        return Decision::Refused("not allowed by the access rules");
    }
    let event_id = ack_id(envelope).unwrap_or(value);
    Decision::Inbound(Inbound {
        event_id: format!("action:{event_id}"),
        platform: "slack".into(),
        target: Target {
            workspace: team.to_owned(),
            channel: channel.to_owned(),
            thread: thread.to_owned(),
        },
        user: user.to_owned(),
        message_id: None,
        opens: false,
        kind: InboundKind::Action(value.to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn envelope(event: Value) -> Value {
        json!({"envelope_id": "env-1", "type": "events_api", "accepts_response_payload": false, "retry_attempt": 0,
               "payload": {"type": "event_callback", "team_id": "T1", "event_id": "Ev1", "event": event}})
    }

    fn open() -> Access {
        Access {
            allow_dms: true,
            ..Access::default()
        }
    }

    #[test]
    fn slack_a_mention_starts_a_thread_at_its_own_ts_without_the_mention() {
        let e = envelope(
            json!({"type": "app_mention", "user": "U1", "channel": "C1", "ts": "1700.000100", "text": "<@UBOT> run the tests"}),
        );
        assert_eq!(ack_id(&e), Some("env-1"));
        let Decision::Inbound(m) = decide(&e, "UBOT", &open()) else {
            panic!("inbound")
        };
        assert_eq!(
            (
                m.event_id.as_str(),
                m.target.thread.as_str(),
                m.user.as_str()
            ),
            ("Ev1", "1700.000100", "U1")
        );
        assert_eq!(m.kind, InboundKind::Message("run the tests".into()));
    }

    #[test]
    fn r8_slack_prompts_reach_the_agent_as_typed_in_mentions_replies_and_commands() {
        let cases = [
            (
                "app_mention",
                "<@UBOT> echo hi &gt; f &amp;&amp; cat f 2&gt;&amp;1",
                "echo hi > f && cat f 2>&1",
            ),
            (
                "app_mention",
                "<@UBOT> curl -s <https://example.com/a?b=1&amp;c=2>",
                "curl -s https://example.com/a?b=1&c=2",
            ),
            ("message", "/invite <@U2> <@U3|carol>", "/invite @U2 @U3"),
            (
                "message",
                "<!channel> look &lt;here&gt;",
                "@channel look <here>",
            ),
        ];
        for (kind, wire, typed) in cases {
            let e = envelope(
                json!({"type": kind, "user": "U1", "channel": "C1", "ts": "1700.2", "thread_ts": "1700.1", "text": wire}),
            );
            let Decision::Inbound(m) = decide(&e, "UBOT", &open()) else {
                panic!("inbound for {wire}")
            };
            assert_eq!(m.kind, InboundKind::Message(typed.into()), "{wire}");
        }
    }

    #[test]
    fn slack_a_file_share_message_is_handled_with_its_text_and_files() {
        let e = envelope(
            json!({"type": "message", "subtype": "file_share", "user": "U1", "channel": "C1",
            "ts": "1700.2", "thread_ts": "1700.1", "text": "what is wrong here? 2&gt;&amp;1",
            "files": [{"id": "F1", "name": "shot.png", "mimetype": "image/png", "size": 1234,
                       "url_private": "https://files.slack.com/files-pri/T1-F1/shot.png",
                       "url_private_download": "https://files.slack.com/files-pri/T1-F1/download/shot.png"},
                      {"id": "F2", "title": "log", "mimetype": "text/plain"},
                      {"name": "no id: skipped"}]}),
        );
        let Decision::Inbound(m) = decide(&e, "UBOT", &open()) else {
            panic!("a message with files is never dropped")
        };
        let InboundKind::Files { text, files } = m.kind else {
            panic!("files kept")
        };
        assert_eq!(text, "what is wrong here? 2>&1");
        assert_eq!(files.len(), 2);
        assert_eq!(files[0].name, "shot.png");
        assert_eq!(files[0].mime.as_deref(), Some("image/png"));
        assert_eq!(files[0].size, Some(1234));
        assert_eq!(
            files[0].url.as_deref(),
            Some("https://files.slack.com/files-pri/T1-F1/download/shot.png")
        );
        assert_eq!((files[1].name.as_str(), files[1].size), ("log", None));
        // A file with no text at all is still a message; other subtypes stay ignored.
        let bare = envelope(
            json!({"type": "message", "subtype": "file_share", "channel_type": "im", "user": "U1",
            "channel": "D1", "ts": "1700.3", "files": [{"id": "F3", "name": "a.txt"}]}),
        );
        assert!(
            matches!(decide(&bare, "UBOT", &open()), Decision::Inbound(m) if matches!(&m.kind, InboundKind::Files { text, .. } if text.is_empty()))
        );
    }

    #[test]
    fn slack_thread_replies_continue_and_dms_follow_the_dm_policy() {
        let reply = envelope(
            json!({"type": "message", "user": "U1", "channel": "C1", "ts": "1700.2", "thread_ts": "1700.1", "text": "and now?"}),
        );
        assert!(
            matches!(decide(&reply, "UBOT", &open()), Decision::Inbound(m) if m.target.thread == "1700.1")
        );
        let top_level = envelope(
            json!({"type": "message", "user": "U1", "channel": "C1", "ts": "1700.2", "text": "chatter"}),
        );
        assert!(matches!(
            decide(&top_level, "UBOT", &open()),
            Decision::Ignore(_)
        ));
        let dm = envelope(
            json!({"type": "message", "channel_type": "im", "user": "U1", "channel": "D1", "ts": "1700.3", "text": "hi"}),
        );
        assert!(matches!(decide(&dm, "UBOT", &open()), Decision::Inbound(_)));
        assert!(
            matches!(
                decide(&dm, "UBOT", &Access::default()),
                Decision::Refused(_)
            ),
            "DMs off"
        );
    }

    #[test]
    fn slack_bots_ourselves_edits_deletions_and_mention_echoes_are_ignored() {
        for ev in [
            json!({"type": "message", "bot_id": "B9", "user": "U9", "channel": "C1", "ts": "1", "thread_ts": "0"}),
            json!({"type": "message", "user": "UBOT", "channel": "C1", "ts": "1", "thread_ts": "0"}),
            json!({"type": "message", "subtype": "message_changed", "channel": "C1", "ts": "1"}),
            json!({"type": "message", "subtype": "message_deleted", "channel": "C1", "ts": "1"}),
            json!({"type": "message", "user": "U1", "channel": "C1", "ts": "1", "text": "<@UBOT> hi"}),
        ] {
            assert!(
                matches!(
                    decide(&envelope(ev.clone()), "UBOT", &open()),
                    Decision::Ignore(_)
                ),
                "{ev}"
            );
        }
    }

    #[test]
    fn a1_slack_dms_follow_the_user_allowlist() {
        let access = Access {
            channels: vec!["C1".into()],
            users: vec!["U1".into()],
            allow_dms: true,
        };
        let dm = |user: &str, thread: Option<&str>| {
            let mut ev = json!({"type": "message", "channel_type": "im", "user": user, "channel": "D1", "ts": "1700.3", "text": "id"});
            if let Some(t) = thread {
                ev["thread_ts"] = json!(t);
            }
            envelope(ev)
        };
        // The channel allowlist is about channels; a DM is admitted by the user allowlist alone.
        assert!(matches!(
            decide(&dm("U1", None), "UBOT", &access),
            Decision::Inbound(_)
        ));
        for thread in [None, Some("1700.1")] {
            assert!(
                matches!(
                    decide(&dm("U2", thread), "UBOT", &access),
                    Decision::Refused(_)
                ),
                "a DM from someone not on the list runs nothing ({thread:?})"
            );
        }
    }

    #[test]
    fn slack_access_rules_limit_channels_and_users() {
        let access = Access {
            channels: vec!["C1".into()],
            users: vec!["U1".into()],
            allow_dms: false,
        };
        let mention = |user: &str, channel: &str| {
            envelope(
                json!({"type": "app_mention", "user": user, "channel": channel, "ts": "1", "text": "<@UBOT> x"}),
            )
        };
        assert!(matches!(
            decide(&mention("U1", "C1"), "UBOT", &access),
            Decision::Inbound(_)
        ));
        assert!(matches!(
            decide(&mention("U2", "C1"), "UBOT", &access),
            Decision::Refused(_)
        ));
        assert!(matches!(
            decide(&mention("U1", "C2"), "UBOT", &access),
            Decision::Refused(_)
        ));
    }

    #[test]
    fn slack_button_clicks_become_actions_in_their_thread_and_control_envelopes_are_told_apart() {
        let click = json!({"envelope_id": "env-9", "type": "interactive", "payload": {
            "type": "block_actions", "user": {"id": "U2"}, "team": {"id": "T1"}, "channel": {"id": "C1"},
            "message": {"ts": "1700.5", "thread_ts": "1700.1"}, "actions": [{"action_id": "choice_0", "value": "perm:abc:allow_once"}]}});
        let Decision::Inbound(m) = decide(&click, "UBOT", &open()) else {
            panic!("inbound")
        };
        assert_eq!(
            (m.target.thread.as_str(), m.kind),
            ("1700.1", InboundKind::Action("perm:abc:allow_once".into()))
        );
        assert_eq!(
            decide(
                &json!({"type": "hello", "num_connections": 1}),
                "UBOT",
                &open()
            ),
            Decision::Hello
        );
        assert_eq!(
            decide(
                &json!({"type": "disconnect", "reason": "refresh_requested"}),
                "UBOT",
                &open()
            ),
            Decision::Disconnect("refresh_requested".into())
        );
    }
}
