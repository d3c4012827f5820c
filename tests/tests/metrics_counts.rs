//! The delivery metrics the alerts and the dashboard read count what the outbox worker did: a chat
//! API call refused with a 5xx and then for good shows in `chatbridge_chat_api_errors_total` by
//! platform, method and error, and in `chatbridge_deliveries_total` as `retried` then
//! `dead_lettered` (ChatBridgeDeliveryFailures, ChatBridgeDeadLetters). One test in its own process,
//! so the process-wide recorder's counts are this test's alone.

use std::sync::Mutex;
use std::time::Duration;

use chat_bridge::channel::{
    BoxFuture, Capabilities, Channel, ChatAction, DeliveryError, Message, Target, Tone,
};
use chat_bridge::outbox_worker::{Step, deliver_once};
use chat_bridge::store::conversations::{self, Key};
use chat_bridge::store::outbox::{self, Kind, NewAction, RetryPolicy};
use chat_bridge::store::{Store, now_ms};

/// A platform that answers each post with the next scripted result.
struct Scripted(Mutex<Vec<Result<(), DeliveryError>>>);

impl Channel for Scripted {
    fn platform(&self) -> &'static str {
        "discord"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            max_message_len: 2000,
            answer_len: 2000,
            output_cap: 1800,
            can_edit: true,
            has_buttons: false,
            has_threads: true,
            has_reactions: false,
            takes_requests: false,
        }
    }
    fn post<'a>(
        &'a self,
        _t: &'a Target,
        m: &'a Message,
    ) -> BoxFuture<'a, Result<String, DeliveryError>> {
        let r = self.0.lock().expect("lock").pop().unwrap_or(Ok(()));
        Box::pin(async move { r.map(|()| format!("id-{}", m.title)) })
    }
    fn edit<'a>(
        &'a self,
        _t: &'a Target,
        _id: &'a str,
        _m: &'a Message,
    ) -> BoxFuture<'a, Result<(), DeliveryError>> {
        Box::pin(async { Ok(()) })
    }
}

fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).map(str::trim))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{series} missing from /metrics:\n{text}"))
}

#[tokio::test]
async fn a_refused_post_counts_as_a_chat_api_error_by_platform_and_as_retried_then_dead_lettered() {
    chat_bridge::metrics::register("discord");
    let metrics = chat_bridge::metrics::handle().expect("recorder");
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(&format!("sqlite://{}/m.db", dir.path().display()))
        .await
        .expect("store");
    let mut c = store.conn().await.expect("conn");
    let key = Key {
        platform: "discord",
        workspace: "g",
        channel: "c",
        thread: "t",
    };
    let conv = conversations::find_or_create(&mut c, &key, "u", "t", now_ms())
        .await
        .expect("conversation")
        .0
        .id;
    let action = ChatAction::Post {
        target: Target {
            workspace: "g".into(),
            channel: "c".into(),
            thread: "t".into(),
        },
        key: "k:doomed".into(),
        message: Message::text(Tone::Neutral, "doomed"),
    };
    let json = serde_json::to_string(&action).expect("json");
    let new = NewAction {
        conversation_id: &conv,
        kind: Kind::Post,
        coalesce_key: action.key(),
        action: &json,
    };
    outbox::enqueue(&mut c, &new, now_ms())
        .await
        .expect("enqueue");
    drop(c);

    let before = metrics.render();
    let errors = |e: &str| {
        format!(
            "chatbridge_chat_api_errors_total{{platform=\"discord\",method=\"post\",error=\"{e}\"}}"
        )
    };
    assert_eq!(value(&before, &errors("temporary")), 0.0, "registered at 0");

    // Popped from the end: a 502 first, then a refusal for good.
    let channel = Scripted(Mutex::new(vec![
        Err(DeliveryError::Permanent("missing access".into())),
        Err(DeliveryError::Temporary("HTTP 502".into())),
    ]));
    let policy = RetryPolicy {
        base: Duration::from_millis(10),
        cap: Duration::from_millis(10),
        max_attempts: 5,
    };
    assert_eq!(
        deliver_once(&store, &channel, "w", &policy)
            .await
            .expect("step"),
        Step::Failed
    );
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(
        deliver_once(&store, &channel, "w", &policy)
            .await
            .expect("step"),
        Step::Failed
    );

    let after = metrics.render();
    assert_eq!(value(&after, &errors("temporary")), 1.0);
    assert_eq!(value(&after, &errors("permanent")), 1.0);
    assert_eq!(value(&after, &errors("rate_limited")), 0.0);
    assert_eq!(
        value(&after, "chatbridge_deliveries_total{result=\"retried\"}"),
        1.0
    );
    assert_eq!(
        value(
            &after,
            "chatbridge_deliveries_total{result=\"dead_lettered\"}"
        ),
        1.0
    );
    assert_eq!(
        value(&after, "chatbridge_deliveries_total{result=\"ok\"}"),
        0.0
    );
}
