//! A2 and A3: who may act in a thread, as pure decisions the conversation asks before it does anything.
//!
//! A thread belongs to the person who opened it. With `access.threads = "owner"` (the default) only
//! the owner, the configured approvers and the people the owner invited may prompt, `/cancel`, start
//! over or answer approvals there; everyone else is refused and nothing runs. With `"shared"` anyone
//! the allowlists admit may prompt and `/cancel`; approvals stay with the requester, the owner, the
//! invited and the approvers. `approvals.require_second_person` (A3) takes the requester out of the
//! people who may answer their own tool call.

use crate::config::ThreadAccess;

/// Something a person wants to do in a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// Send the agent a prompt.
    Prompt,
    /// `/cancel` the running turn.
    Cancel,
    /// `/new`: start over with a new agent session.
    New,
    /// `/invite` or `/uninvite` someone.
    Invite,
    /// `/status`, `/history`, `/help`: read what the thread already shows.
    Read,
}

/// Who holds which role in one thread.
#[derive(Debug, Clone, Copy)]
pub struct Roles<'a> {
    /// `access.threads`.
    pub mode: ThreadAccess,
    /// Who opened the thread.
    pub owner: &'a str,
    /// Whom the owner invited.
    pub members: &'a [String],
    /// `approvals.approvers`: may act in every thread.
    pub approvers: &'a [String],
}

/// Why someone may not do what they asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The thread belongs to someone else (A2).
    NotAMember,
    /// Only the owner and approvers invite people.
    NotTheOwner,
    /// Not the requester, the owner, an invited member or an approver (R6).
    MayNotAnswer,
    /// A3: the requester may not approve their own call.
    OwnRequest,
    /// The option is not one the request offered.
    UnknownOption,
}

impl Refusal {
    /// What the person is told (only they see it).
    #[must_use]
    pub fn text(&self, owner: &str) -> String {
        match self {
            Self::NotAMember => format!(
                "This thread belongs to {owner}; only they, the people they `/invite` and the approvers can use it. Mention the bot in the channel to open a thread of your own."
            ),
            Self::NotTheOwner => {
                format!("Only {owner} (who opened this thread) and the approvers can invite people.")
            }
            Self::MayNotAnswer => "You are not allowed to answer this approval; only the person who asked, the thread's owner and invited members, or an approver can.".to_owned(),
            Self::OwnRequest => "You asked for this tool call, so someone else has to approve it (approvals.require_second_person).".to_owned(),
            Self::UnknownOption => "That is not one of the options this approval offered.".to_owned(),
        }
    }
}

impl Roles<'_> {
    fn approver(&self, user: &str) -> bool {
        self.approvers.iter().any(|a| a == user)
    }

    /// Whether `user` owns the thread, was invited to it, or is an approver.
    #[must_use]
    pub fn is_member(&self, user: &str) -> bool {
        user == self.owner || self.approver(user) || self.members.iter().any(|m| m == user)
    }

    /// A2: whether `user` may do `act` here.
    ///
    /// # Errors
    /// The [`Refusal`] to tell them.
    pub fn may(&self, user: &str, act: Act) -> Result<(), Refusal> {
        match act {
            Act::Read => Ok(()),
            Act::Invite if user == self.owner || self.approver(user) => Ok(()),
            Act::Invite => Err(Refusal::NotTheOwner),
            _ if self.mode == ThreadAccess::Shared || self.is_member(user) => Ok(()),
            _ => Err(Refusal::NotAMember),
        }
    }

    /// R6, A2, A3: whether `user` may answer a permission request `requester` caused, choosing
    /// `option` out of `offered`.
    ///
    /// # Errors
    /// The [`Refusal`] to tell them.
    pub fn may_answer(
        &self,
        user: &str,
        requester: &str,
        option: &str,
        offered: &[&str],
        require_second_person: bool,
    ) -> Result<(), Refusal> {
        if require_second_person && user == requester {
            return Err(Refusal::OwnRequest);
        }
        if user != requester && !self.is_member(user) {
            return Err(Refusal::MayNotAnswer);
        }
        if !offered.contains(&option) {
            return Err(Refusal::UnknownOption);
        }
        Ok(())
    }
}

/// The people named in an `/invite` or `/uninvite`: Slack mentions (`<@U123>`, `<@U123|ana>`),
/// Discord mentions (`<@123>`, `<@!123>`) and bare ids, in order, without duplicates.
#[must_use]
pub fn mentioned_users(text: &str) -> Vec<String> {
    let mut users: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        let id = match word.strip_prefix("<@").and_then(|w| w.strip_suffix('>')) {
            Some(inner) => inner
                .trim_start_matches('!')
                .split('|')
                .next()
                .unwrap_or(""),
            None => word.trim_start_matches('@'),
        };
        // Discord sends `@everyone` / `@here` as plain text; a console user may type `@channel`.
        let everyone = ["everyone", "here", "channel"]
            .iter()
            .any(|w| id.eq_ignore_ascii_case(w));
        let valid = !everyone
            && id.len() <= 64
            && id.starts_with(|c: char| c.is_ascii_alphanumeric())
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if valid && !users.iter().any(|u| u == id) {
            users.push(id.to_owned());
        }
    }
    users
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roles<'a>(mode: ThreadAccess, members: &'a [String], approvers: &'a [String]) -> Roles<'a> {
        Roles {
            mode,
            owner: "U_OWNER",
            members,
            approvers,
        }
    }

    #[test]
    fn a2_owner_mode_admits_owner_members_and_approvers_only() {
        let members = vec!["U_FRIEND".to_owned()];
        let approvers = vec!["U_LEAD".to_owned()];
        let r = roles(ThreadAccess::Owner, &members, &approvers);
        for act in [Act::Prompt, Act::Cancel, Act::New] {
            assert_eq!(r.may("U_OWNER", act), Ok(()));
            assert_eq!(r.may("U_FRIEND", act), Ok(()));
            assert_eq!(r.may("U_LEAD", act), Ok(()));
            assert_eq!(
                r.may("U_STRANGER", act),
                Err(Refusal::NotAMember),
                "{act:?}"
            );
        }
        assert_eq!(r.may("U_STRANGER", Act::Read), Ok(()), "reading is free");
    }

    #[test]
    fn a2_only_the_owner_and_approvers_invite() {
        let members = vec!["U_FRIEND".to_owned()];
        let approvers = vec!["U_LEAD".to_owned()];
        let r = roles(ThreadAccess::Owner, &members, &approvers);
        assert_eq!(r.may("U_OWNER", Act::Invite), Ok(()));
        assert_eq!(r.may("U_LEAD", Act::Invite), Ok(()));
        assert_eq!(r.may("U_FRIEND", Act::Invite), Err(Refusal::NotTheOwner));
        assert_eq!(r.may("U_STRANGER", Act::Invite), Err(Refusal::NotTheOwner));
        let shared = roles(ThreadAccess::Shared, &members, &approvers);
        assert_eq!(
            shared.may("U_STRANGER", Act::Invite),
            Err(Refusal::NotTheOwner)
        );
    }

    #[test]
    fn a2_shared_mode_lets_anyone_prompt_and_cancel() {
        let r = roles(ThreadAccess::Shared, &[], &[]);
        assert_eq!(r.may("U_STRANGER", Act::Prompt), Ok(()));
        assert_eq!(r.may("U_STRANGER", Act::Cancel), Ok(()));
    }

    #[test]
    fn a2_approvals_stay_with_requester_owner_members_and_approvers_in_both_modes() {
        let members = vec!["U_FRIEND".to_owned()];
        let approvers = vec!["U_LEAD".to_owned()];
        let offered = ["proceed_once", "cancel"];
        for mode in [ThreadAccess::Owner, ThreadAccess::Shared] {
            let r = roles(mode, &members, &approvers);
            for who in ["U_REQ", "U_OWNER", "U_FRIEND", "U_LEAD"] {
                assert_eq!(
                    r.may_answer(who, "U_REQ", "proceed_once", &offered, false),
                    Ok(()),
                    "{who} {mode:?}"
                );
            }
            assert_eq!(
                r.may_answer("U_STRANGER", "U_REQ", "proceed_once", &offered, false),
                Err(Refusal::MayNotAnswer)
            );
        }
    }

    #[test]
    fn a3_four_eyes_refuses_the_requester_and_admits_another_member() {
        let approvers = vec!["U_LEAD".to_owned()];
        let r = roles(ThreadAccess::Owner, &[], &approvers);
        let offered = ["proceed_once", "cancel"];
        assert_eq!(
            r.may_answer("U_OWNER", "U_OWNER", "proceed_once", &offered, true),
            Err(Refusal::OwnRequest)
        );
        assert_eq!(
            r.may_answer("U_LEAD", "U_OWNER", "proceed_once", &offered, true),
            Ok(())
        );
        assert_eq!(
            r.may_answer("U_LEAD", "U_LEAD", "cancel", &offered, true),
            Err(Refusal::OwnRequest),
            "an approver who asked is still the requester"
        );
        assert_eq!(
            r.may_answer("U_OWNER", "U_OWNER", "proceed_once", &offered, false),
            Ok(()),
            "without four eyes the requester answers"
        );
    }

    #[test]
    fn a3_an_option_that_was_not_offered_is_refused() {
        let r = roles(ThreadAccess::Owner, &[], &[]);
        let offered = ["proceed_once", "cancel"];
        assert_eq!(
            r.may_answer(
                "U_OWNER",
                "U_OWNER",
                "proceed_always_server",
                &offered,
                false
            ),
            Err(Refusal::UnknownOption)
        );
        assert_eq!(
            r.may_answer("U_OWNER", "U_OWNER", "", &offered, false),
            Err(Refusal::UnknownOption)
        );
    }

    #[test]
    fn a2_invite_reads_slack_and_discord_mentions_and_bare_ids() {
        assert_eq!(
            mentioned_users("<@U123> <@U456|ana>  <@!789> <@101> bob @carol <@U123>"),
            ["U123", "U456", "789", "101", "bob", "carol"]
        );
        assert!(mentioned_users("<@> <@!> $(rm -rf /) a;b").is_empty());
        // Group mentions are not people: `/invite @everyone` must not open the thread to anyone.
        assert!(mentioned_users("@everyone @here @Channel <@everyone>").is_empty());
    }
}
