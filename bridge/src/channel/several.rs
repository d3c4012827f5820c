//! Several platforms behind one [`Channel`], for a process that serves them at once: the outbox
//! delivers each action through the channel of its conversation's platform ([`Channel::route`]),
//! readiness lists each platform ([`Channel::each_connected`]). Capabilities are what every platform
//! can do (the smallest message and output caps; buttons, edits and reactions only when all have
//! them), so the core's choices suit each of them.

use std::sync::Arc;

use super::{BoxFuture, Capabilities, Channel, DeliveryError, Message, Target};

/// The channels of the platforms served, in registry order. Delivering through it without a
/// platform (an outbox row whose conversation is gone) is refused for good rather than guessed:
/// a message must never reach another platform's channel.
pub struct Several {
    channels: Vec<Arc<dyn Channel>>,
}

impl std::fmt::Debug for Several {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.channels.iter().map(|c| c.platform()))
            .finish()
    }
}

impl Several {
    /// One channel standing for `channels`; the single channel itself when there is one.
    ///
    /// # Errors
    /// `channels` is empty.
    pub fn join(mut channels: Vec<Arc<dyn Channel>>) -> anyhow::Result<Arc<dyn Channel>> {
        match channels.len() {
            0 => anyhow::bail!("no platform to serve"),
            1 => Ok(channels.remove(0)),
            _ => Ok(Arc::new(Self { channels })),
        }
    }

    fn first(&self) -> &dyn Channel {
        // Built with at least two.
        self.channels[0].as_ref()
    }
}

fn unrouted() -> DeliveryError {
    DeliveryError::Permanent(
        "the message's conversation is gone, so its platform is unknown: not delivered".into(),
    )
}

impl Channel for Several {
    fn platform(&self) -> &'static str {
        self.first().platform()
    }

    fn capabilities(&self) -> Capabilities {
        let mut all = self.first().capabilities();
        for c in &self.channels[1..] {
            let c = c.capabilities();
            all.max_message_len = all.max_message_len.min(c.max_message_len);
            all.output_cap = all.output_cap.min(c.output_cap);
            all.answer_len = all.answer_len.min(c.answer_len);
            all.can_edit &= c.can_edit;
            all.has_buttons &= c.has_buttons;
            all.has_threads &= c.has_threads;
            all.has_reactions &= c.has_reactions;
            all.takes_requests |= c.takes_requests;
        }
        all
    }

    fn route(&self, platform: &str) -> Option<&dyn Channel> {
        self.channels
            .iter()
            .find(|c| c.platform() == platform)
            .map(AsRef::as_ref)
    }

    fn parent_channel(&self, platform: &str, channel: &str) -> Option<String> {
        self.route(platform)
            .and_then(|c| c.parent_channel(platform, channel))
    }

    fn each_connected(&self) -> Vec<(&'static str, bool)> {
        self.channels
            .iter()
            .map(|c| (c.platform(), c.connected()))
            .collect()
    }

    fn connected(&self) -> bool {
        self.channels.iter().all(|c| c.connected())
    }

    fn post<'a>(
        &'a self,
        _target: &'a Target,
        _message: &'a Message,
    ) -> BoxFuture<'a, Result<String, DeliveryError>> {
        Box::pin(async { Err(unrouted()) })
    }

    fn edit<'a>(
        &'a self,
        _target: &'a Target,
        _id: &'a str,
        _message: &'a Message,
    ) -> BoxFuture<'a, Result<(), DeliveryError>> {
        Box::pin(async { Err(unrouted()) })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    /// A channel that records what it delivered.
    struct Fake {
        name: &'static str,
        up: AtomicBool,
        buttons: bool,
        posted: std::sync::Mutex<Vec<String>>,
    }

    impl Fake {
        fn new(name: &'static str, buttons: bool) -> Arc<Self> {
            Arc::new(Self {
                name,
                up: AtomicBool::new(true),
                buttons,
                posted: std::sync::Mutex::default(),
            })
        }
    }

    impl Channel for Fake {
        fn platform(&self) -> &'static str {
            self.name
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities {
                max_message_len: if self.buttons { 4000 } else { 100_000 },
                output_cap: 3000,
                answer_len: 3000,
                can_edit: true,
                has_buttons: self.buttons,
                has_threads: true,
                has_reactions: true,
                takes_requests: false,
            }
        }
        fn connected(&self) -> bool {
            self.up.load(Ordering::SeqCst)
        }
        fn post<'a>(
            &'a self,
            _target: &'a Target,
            message: &'a Message,
        ) -> BoxFuture<'a, Result<String, DeliveryError>> {
            self.posted
                .lock()
                .expect("lock")
                .push(message.title.clone());
            Box::pin(async { Ok("id".to_owned()) })
        }
        fn edit<'a>(
            &'a self,
            _target: &'a Target,
            _id: &'a str,
            _message: &'a Message,
        ) -> BoxFuture<'a, Result<(), DeliveryError>> {
            Box::pin(async { Ok(()) })
        }
    }

    #[tokio::test]
    async fn issue17_each_platform_delivers_its_own_and_readiness_names_the_one_down() {
        let slack = Fake::new("slack", true);
        let console = Fake::new("console", false);
        let both = Several::join(vec![slack.clone(), console.clone()]).expect("two");
        let target = Target {
            workspace: "w".into(),
            channel: "c".into(),
            thread: "t".into(),
        };
        let to = |p: &str| both.route(p).expect("routed").platform();
        assert_eq!((to("slack"), to("console")), ("slack", "console"));
        assert!(both.route("discord").is_none(), "not served");
        both.route("console")
            .expect("console")
            .post(
                &target,
                &Message::text(super::super::Tone::Neutral, "to the console"),
            )
            .await
            .expect("posted");
        assert!(slack.posted.lock().expect("lock").is_empty());
        // Without a platform nothing is guessed: refused for good, nothing sent anywhere.
        let unrouted = both
            .post(&target, &Message::text(super::super::Tone::Neutral, "lost"))
            .await;
        assert!(matches!(unrouted, Err(DeliveryError::Permanent(_))));
        assert!(slack.posted.lock().expect("lock").is_empty());
        assert_eq!(*console.posted.lock().expect("lock"), ["to the console"]);
        // What every platform can do: no buttons when one lacks them, the smallest limits.
        let caps = both.capabilities();
        assert!(!caps.has_buttons);
        assert_eq!(caps.max_message_len, 4000);
        // Readiness: each platform by name; one down is named and the whole is not connected.
        assert!(both.connected());
        console.up.store(false, Ordering::SeqCst);
        assert_eq!(both.each_connected(), [("slack", true), ("console", false)]);
        assert!(!both.connected());
        // One platform is the channel itself.
        let one = Several::join(vec![slack.clone()]).expect("one");
        assert_eq!(one.each_connected(), [("slack", true)]);
        assert!(one.route("slack").is_none(), "itself");
    }
}
