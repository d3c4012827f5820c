//! Gateway dispatches → what the bridge does with them. Pure, so every rule is tested on its own:
//! bots (ourselves included) and non-chat message types are ignored; a mention in an allowed channel
//! opens a conversation in a thread created from that message (the thread's id is the message's id);
//! messages in a thread continue the conversation the bridge owns there; DMs follow the DM policy;
//! button clicks become actions (the core decides who may answer an approval). The A-rules: channel,
//! user and role allowlists — empty lists allow everyone, which start-up refuses for users and roles
//! unless `access.open` says so on purpose (A1). DMs follow the user list (they carry no roles).

use serenity::model::application::ComponentInteraction;
use serenity::model::channel::{Message, MessageType};
use serenity::model::id::UserId;

use crate::channel::{Attachment, Inbound, InboundKind, Target};
use crate::conversation::Mark;

/// The `workspace` of DM conversations (they belong to no guild).
pub const DM_WORKSPACE: &str = "@me";

/// Who may prompt (A-rules).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    /// Channel ids where a mention opens a conversation (empty: every channel).
    pub channels: Vec<String>,
    /// User ids who may prompt.
    pub users: Vec<String>,
    /// Role ids whose members may prompt.
    pub roles: Vec<String>,
    /// Whether direct messages are answered.
    pub allow_dms: bool,
}

impl Access {
    fn person_allowed(&self, user: &str, roles: &[String]) -> bool {
        if self.users.is_empty() && self.roles.is_empty() {
            return true;
        }
        self.users.iter().any(|u| u == user) || roles.iter().any(|r| self.roles.contains(r))
    }

    fn channel_allowed(&self, channel: &str) -> bool {
        self.channels.is_empty() || self.channels.iter().any(|c| c == channel)
    }
}

/// What a dispatch means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// A mention in a guild channel: create a thread named `name` from the message (its id becomes
    /// the thread's), then hand `inbound` to the core. If the message is already in a thread, the
    /// conversation lives in that thread instead.
    Open {
        /// The channel the mention was posted in.
        parent: String,
        /// The thread name (1–100 characters, from the prompt).
        name: String,
        /// The message, targeted at the thread to be created.
        inbound: Inbound,
    },
    /// Hand this to the core.
    Inbound(Inbound),
    /// Nothing to do (why, for debug logs; never message text).
    Ignore(&'static str),
    /// Refused by the access rules (A1): ignored like [`Decision::Ignore`], but counted in
    /// `chatbridge_access_refusals_total` so on-call sees strangers knocking.
    Refused(&'static str),
}

/// Removes mentions of us (`<@id>`, `<@!id>`) from a prompt.
fn strip_mention(text: &str, me: UserId) -> String {
    text.replace(&format!("<@{me}>"), "")
        .replace(&format!("<@!{me}>"), "")
        .trim()
        .to_owned()
}

/// A thread name from a prompt: its first line, 1–100 characters, `@everyone` and `@here` made
/// plain words (thread names render no markdown, so nothing else needs escaping; a backslash would
/// show).
#[must_use]
pub fn thread_name(prompt: &str) -> String {
    let line = prompt.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let line = super::render::neutralize_mentions(line.trim());
    let name: String = line.chars().take(100).collect();
    if name.is_empty() {
        "chat-bridge session".into()
    } else {
        name
    }
}

/// Decides what a `MESSAGE_CREATE` means. `me` is our bot user (from READY).
#[must_use]
pub fn decide_message(msg: &Message, me: UserId, access: &Access) -> Decision {
    if msg.author.bot || msg.author.id == me {
        return Decision::Ignore("bot message");
    }
    if !matches!(msg.kind, MessageType::Regular | MessageType::InlineReply) {
        return Decision::Ignore("not a chat message (system message, thread starter, …)");
    }
    let user = msg.author.id.to_string();
    let roles: Vec<String> = msg
        .member
        .as_ref()
        .map(|m| m.roles.iter().map(ToString::to_string).collect())
        .unwrap_or_default();
    if !access.person_allowed(&user, &roles) {
        return Decision::Refused("not allowed by the access rules");
    }
    let channel = msg.channel_id.to_string();
    let text = strip_mention(&msg.content, me);
    let files: Vec<Attachment> = msg
        .attachments
        .iter()
        .map(|a| Attachment {
            id: a.id.to_string(),
            name: a.filename.clone(),
            mime: a.content_type.clone(),
            size: Some(u64::from(a.size)),
            url: Some(a.url.clone()),
        })
        .collect();
    let kind = if files.is_empty() {
        InboundKind::Message(text.clone())
    } else {
        InboundKind::Files {
            text: text.clone(),
            files,
        }
    };
    let inbound = |workspace: String, thread: String, opens: bool| Inbound {
        event_id: format!("message:{}", msg.id),
        platform: "discord".into(),
        target: Target {
            workspace,
            channel: thread.clone(),
            thread,
        },
        user: user.clone(),
        message_id: Some(msg.id.to_string()),
        opens,
        kind: kind.clone(),
    };
    let Some(guild) = msg.guild_id else {
        if !access.allow_dms {
            return Decision::Refused("direct messages are off (discord.allow_dms)");
        }
        // A DM channel is one conversation.
        return Decision::Inbound(inbound(DM_WORKSPACE.into(), channel.clone(), true));
    };
    let mentioned = msg.mentions.iter().any(|u| u.id == me)
        || msg.content.contains(&format!("<@{me}>"))
        || msg.content.contains(&format!("<@!{me}>"));
    if !mentioned {
        // A reply in a thread: the core continues it only where a conversation exists.
        return Decision::Inbound(inbound(guild.to_string(), channel, false));
    }
    if !access.channel_allowed(&channel) {
        return Decision::Refused("channel not in discord.allowed_channels");
    }
    if text.is_empty() && msg.attachments.is_empty() {
        return Decision::Ignore("a mention without a prompt");
    }
    Decision::Open {
        parent: channel,
        name: thread_name(&text),
        inbound: inbound(guild.to_string(), msg.id.to_string(), true),
    }
}

/// Decides what a button click (`INTERACTION_CREATE`, message component) means. Clicks are not
/// filtered by the allowlists: the core decides who may answer an approval and tells the others.
#[must_use]
pub fn decide_click(i: &ComponentInteraction) -> Decision {
    let user = i
        .member
        .as_ref()
        .map_or(i.user.id, |m| m.user.id)
        .to_string();
    let channel = i.channel_id.to_string();
    let workspace = i
        .guild_id
        .map_or_else(|| DM_WORKSPACE.to_owned(), |g| g.to_string());
    if i.data.custom_id.is_empty() {
        return Decision::Ignore("component without a custom_id");
    }
    Decision::Inbound(Inbound {
        event_id: format!("interaction:{}", i.id),
        platform: "discord".into(),
        target: Target {
            workspace,
            channel: channel.clone(),
            thread: channel,
        },
        user,
        message_id: Some(i.message.id.to_string()),
        opens: false,
        kind: InboundKind::Action(i.data.custom_id.clone()),
    })
}

/// A reaction (a [`Mark`] as the core names it) → the emoji Discord takes; a name that is no mark
/// passes through.
#[must_use]
pub fn emoji(name: &str) -> &str {
    match name.parse::<Mark>() {
        Ok(mark) => mark_emoji(mark),
        Err(_) => name,
    }
}

/// The emoji Discord shows for each mark.
#[must_use]
pub fn mark_emoji(mark: Mark) -> &'static str {
    match mark {
        Mark::Received => "👀",
        Mark::Done => "✅",
        Mark::Failed => "❌",
        Mark::TimedOut => "⏱️",
        Mark::Stopped => "⏹️",
        Mark::Refused => "🚫",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const ME: u64 = 900;

    fn message(v: Value) -> Message {
        let mut base = json!({
            "id": "1001", "channel_id": "10", "guild_id": "1",
            "author": {"id": "501", "username": "ana", "discriminator": "0", "avatar": null, "global_name": "Ana"},
            "member": {"roles": ["77"], "joined_at": "2026-01-01T00:00:00.000000+00:00", "deaf": false, "mute": false, "flags": 0},
            "content": "<@900> ls -la", "timestamp": "2026-11-29T10:00:00.000000+00:00",
            "edited_timestamp": null, "tts": false, "mention_everyone": false,
            "mentions": [{"id": "900", "username": "bridge", "discriminator": "0", "avatar": null, "bot": true}],
            "mention_roles": [], "attachments": [], "embeds": [], "pinned": false, "type": 0,
        });
        if let (Some(b), Some(o)) = (base.as_object_mut(), v.as_object()) {
            for (k, val) in o {
                b.insert(k.clone(), val.clone());
            }
        }
        serde_json::from_value(base).expect("a real-shaped MESSAGE_CREATE")
    }

    fn open(d: Decision) -> (String, String, Inbound) {
        match d {
            Decision::Open {
                parent,
                name,
                inbound,
            } => (parent, name, inbound),
            other => panic!("expected Open, got {other:?}"),
        }
    }

    #[test]
    fn discord_a_message_with_attachments_keeps_its_text_and_files() {
        let att = json!([{"id": "3001", "filename": "shot.png", "size": 2048, "content_type": "image/png",
            "url": "https://cdn.discordapp.com/attachments/10/3001/shot.png",
            "proxy_url": "https://media.discordapp.net/attachments/10/3001/shot.png"}]);
        let (_, _, inbound) = open(decide_message(
            &message(json!({"content": "<@900> why?", "attachments": att})),
            UserId::new(ME),
            &Access::default(),
        ));
        let InboundKind::Files { text, files } = inbound.kind else {
            panic!("files kept")
        };
        assert_eq!(text, "why?");
        assert_eq!(files[0].name, "shot.png");
        assert_eq!(files[0].size, Some(2048));
        assert_eq!(files[0].mime.as_deref(), Some("image/png"));
        // A mention with only a file is not "a mention without a prompt": it opens a thread.
        let (_, name, inbound) = open(decide_message(
            &message(json!({"content": "<@900>", "attachments": att})),
            UserId::new(ME),
            &Access::default(),
        ));
        assert_eq!(name, "chat-bridge session");
        assert_eq!(inbound.kind.text(), Some(""));
    }

    #[test]
    fn discord_a_mention_opens_a_thread_named_from_the_prompt() {
        let (parent, name, inbound) = open(decide_message(
            &message(json!({})),
            UserId::new(ME),
            &Access::default(),
        ));
        assert_eq!(parent, "10");
        assert_eq!(name, "ls -la");
        assert_eq!(
            inbound.target.channel, "1001",
            "the thread's id is the message's"
        );
        assert_eq!(inbound.target.thread, "1001");
        assert_eq!(inbound.target.workspace, "1");
        assert_eq!(inbound.kind, InboundKind::Message("ls -la".into()));
        assert_eq!(inbound.event_id, "message:1001");
        assert!(inbound.opens);
        let long = format!("<@900> {}\nsecond line", "y".repeat(300));
        let (_, name, _) = open(decide_message(
            &message(json!({"content": long})),
            UserId::new(ME),
            &Access::default(),
        ));
        assert_eq!(name.chars().count(), 100);
        assert_eq!(thread_name("   \n"), "chat-bridge session");
    }

    /// Issue 15 item 2: a thread name never looks like a mass mention; markdown stays as typed
    /// (thread names do not render it).
    #[test]
    fn discord_thread_names_escaping_table() {
        for (prompt, name) in [
            ("@everyone deploy", "@\u{200B}everyone deploy"),
            ("tell @here hi\nmore", "tell @\u{200B}here hi"),
            ("ls *.rs | wc -l", "ls *.rs | wc -l"),
            ("<@501> check", "<@501> check"),
        ] {
            assert_eq!(thread_name(prompt), name, "{prompt}");
        }
        assert_eq!(thread_name(&"@everyone ".repeat(30)).chars().count(), 100);
    }

    #[test]
    fn discord_bots_ourselves_and_system_messages_are_ignored() {
        let bot = json!({"author": {"id": "502", "username": "other", "discriminator": "0", "avatar": null, "bot": true}});
        assert_eq!(
            decide_message(&message(bot), UserId::new(ME), &Access::default()),
            Decision::Ignore("bot message")
        );
        let us = json!({"author": {"id": "900", "username": "bridge", "discriminator": "0", "avatar": null}});
        assert_eq!(
            decide_message(&message(us), UserId::new(ME), &Access::default()),
            Decision::Ignore("bot message")
        );
        let join = json!({"type": 7});
        assert!(matches!(
            decide_message(&message(join), UserId::new(ME), &Access::default()),
            Decision::Ignore(_)
        ));
        let bare = json!({"content": "<@900>"});
        assert!(matches!(
            decide_message(&message(bare), UserId::new(ME), &Access::default()),
            Decision::Ignore(_)
        ));
    }

    #[test]
    fn discord_thread_replies_continue_and_dms_follow_the_policy() {
        let reply = json!({"channel_id": "1001", "content": "and now pwd", "mentions": []});
        match decide_message(&message(reply), UserId::new(ME), &Access::default()) {
            Decision::Inbound(i) => {
                assert!(!i.opens, "only continues a conversation the bridge owns");
                assert_eq!(
                    (i.target.channel.as_str(), i.target.thread.as_str()),
                    ("1001", "1001")
                );
            }
            other => panic!("{other:?}"),
        }
        let dm = || {
            message(
                json!({"guild_id": null, "member": null, "channel_id": "55", "content": "uptime", "mentions": []}),
            )
        };
        let on = Access {
            allow_dms: true,
            ..Access::default()
        };
        match decide_message(&dm(), UserId::new(ME), &on) {
            Decision::Inbound(i) => {
                assert!(i.opens);
                assert_eq!(i.target.workspace, DM_WORKSPACE);
                assert_eq!(i.target.thread, "55");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            decide_message(&dm(), UserId::new(ME), &Access::default()),
            Decision::Refused(_)
        ));
    }

    #[test]
    fn a1_discord_dms_follow_the_user_allowlist() {
        let me = UserId::new(ME);
        let dm = || {
            message(
                json!({"guild_id": null, "member": null, "channel_id": "55", "content": "id", "mentions": []}),
            )
        };
        let listed = Access {
            users: vec!["501".into()],
            channels: vec!["11".into()],
            allow_dms: true,
            ..Access::default()
        };
        assert!(
            matches!(decide_message(&dm(), me, &listed), Decision::Inbound(_)),
            "the author is on the list; the channel allowlist does not apply to DMs"
        );
        let others = Access {
            users: vec!["999".into()],
            allow_dms: true,
            ..Access::default()
        };
        assert!(matches!(
            decide_message(&dm(), me, &others),
            Decision::Refused(_)
        ));
        // A DM carries no guild roles: a role allowlist cannot admit it.
        let by_role = Access {
            roles: vec!["77".into()],
            allow_dms: true,
            ..Access::default()
        };
        assert!(matches!(
            decide_message(&dm(), me, &by_role),
            Decision::Refused(_)
        ));
    }

    #[test]
    fn discord_a_rules_channel_user_and_role_allowlists() {
        let me = UserId::new(ME);
        let channels = Access {
            channels: vec!["11".into()],
            ..Access::default()
        };
        assert!(matches!(
            decide_message(&message(json!({})), me, &channels),
            Decision::Refused(_)
        ));
        let users = Access {
            users: vec!["999".into()],
            ..Access::default()
        };
        assert!(matches!(
            decide_message(&message(json!({})), me, &users),
            Decision::Refused(_)
        ));
        let by_role = Access {
            users: vec!["999".into()],
            roles: vec!["77".into()],
            ..Access::default()
        };
        assert!(
            matches!(
                decide_message(&message(json!({})), me, &by_role),
                Decision::Open { .. }
            ),
            "a listed role admits"
        );
        let wrong_role = Access {
            roles: vec!["78".into()],
            ..Access::default()
        };
        assert!(matches!(
            decide_message(&message(json!({})), me, &wrong_role),
            Decision::Refused(_)
        ));
    }

    #[test]
    fn discord_a_click_becomes_an_action_with_the_clicker() {
        let i: ComponentInteraction = serde_json::from_value(json!({
            "id": "7001", "application_id": "900", "type": 3, "token": "tok", "version": 1,
            "guild_id": "1", "channel_id": "1001", "locale": "en-US", "entitlements": [],
            "attachment_size_limit": 10_485_760,
            "data": {"custom_id": "perm:req-1:allow", "component_type": 2},
            "member": {"user": {"id": "501", "username": "ana", "discriminator": "0", "avatar": null},
                       "roles": [], "joined_at": "2026-01-01T00:00:00.000000+00:00", "deaf": false, "mute": false, "flags": 0},
            "message": message(json!({"id": "3003", "channel_id": "1001", "content": "", "mentions": []})),
        }))
        .expect("a real-shaped INTERACTION_CREATE");
        match decide_click(&i) {
            Decision::Inbound(inb) => {
                assert_eq!(inb.user, "501");
                assert_eq!(inb.kind, InboundKind::Action("perm:req-1:allow".into()));
                assert_eq!(inb.target.thread, "1001");
                assert_eq!(inb.event_id, "interaction:7001");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(emoji("eyes"), "👀");
    }
}
