//! Who said what: in a thread several people may write (A2 `shared`, invited members, approvers),
//! and the agent sees one stream of prompts. Each prompt therefore reaches the agent as
//! `[name] text` (`turns.speaker_prefix`), the name being what the person shows in the platform,
//! asked once per user (Slack `users.info`, Discord's user) and kept.
//!
//! The label is made safe to read as a label: a display name is chosen by its owner, so brackets,
//! line breaks and control characters are taken out — nobody can name themselves `bob] [alice` or
//! start a new line that looks like another speaker's prompt.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::channel::Channel;
use crate::core::lock;

/// The longest label kept, in characters.
pub const LABEL_MAX: usize = 64;

/// How long a name lookup may take before the user id stands in for it.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// Names kept at most; past this the cache starts over (a workspace rarely has that many writers).
const CACHE_MAX: usize = 10_000;

/// `name` as a speaker label: control characters and line breaks become spaces, brackets go,
/// runs of white space become one, and it is cut to [`LABEL_MAX`] characters. `None` when nothing
/// is left.
#[must_use]
pub fn label(name: &str) -> Option<String> {
    let cleaned: String = name
        .chars()
        .filter(|c| !matches!(c, '[' | ']'))
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let words: Vec<&str> = cleaned.split_whitespace().collect();
    let joined = words.join(" ");
    let cut: String = joined.chars().take(LABEL_MAX).collect();
    let cut = cut.trim_end().to_owned();
    (!cut.is_empty()).then_some(cut)
}

/// The prompt as the agent receives it: `[name] text`, the name a safe [`label`] (the user id when
/// the name leaves nothing).
#[must_use]
pub fn prefixed(name: &str, user: &str, text: &str) -> String {
    let who = label(name)
        .or_else(|| label(user))
        .unwrap_or_else(|| "someone".to_owned());
    format!("[{who}] {text}")
}

/// Display names by user id, asked of the platform once per user.
#[derive(Default)]
pub struct Speakers {
    channel: OnceLock<Arc<dyn Channel>>,
    names: Mutex<HashMap<String, String>>,
}

impl std::fmt::Debug for Speakers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Speakers")
            .field("attached", &self.channel.get().is_some())
            .field("known", &lock(&self.names).len())
            .finish()
    }
}

impl Speakers {
    /// Names are asked of `channel` from now on (the first one attached stays).
    pub fn attach(&self, channel: Arc<dyn Channel>) {
        let _ = self.channel.set(channel);
    }

    /// Names known so far (for tests and `/status`-like reports).
    #[must_use]
    pub fn known(&self) -> usize {
        lock(&self.names).len()
    }

    /// The name `user` shows: kept from an earlier lookup, else asked of the platform. A platform
    /// without lookups (the console) or a user it does not know gives the id itself, and that is
    /// kept too; a failed lookup (network, rate limit) gives the id this time and is asked again
    /// next time.
    pub async fn name(&self, user: &str) -> String {
        if let Some(n) = lock(&self.names).get(user) {
            return n.clone();
        }
        let Some(channel) = self.channel.get() else {
            return user.to_owned();
        };
        let found = match tokio::time::timeout(LOOKUP_TIMEOUT, channel.display_name(user)).await {
            Ok(Ok(name)) => name.unwrap_or_else(|| user.to_owned()),
            Ok(Err(e)) => {
                tracing::warn!(user, error = %e, "could not look up a display name; the user id stands in");
                return user.to_owned();
            }
            Err(_) => {
                tracing::warn!(
                    user,
                    "a display name lookup took too long; the user id stands in"
                );
                return user.to_owned();
            }
        };
        let mut names = lock(&self.names);
        if names.len() >= CACHE_MAX {
            names.clear();
        }
        names.insert(user.to_owned(), found.clone());
        found
    }
}
