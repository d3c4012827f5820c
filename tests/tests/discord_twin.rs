//! The Discord adapter against `discord-digital-twin` (npm, written by others; see
//! `chat_bridge_tests::discord_twin`), besides the project's own fake: a mention gets a thread with
//! the message's id and a result embed; a timeout is red with its partial output; an approval by
//! the requester and a refusal for another person; `/readyz` says false within 5 s of the gateway
//! going away (a close frame without a status code) and true again once it is back. Each test says
//! SKIPPED and passes when the twin cannot be installed from npm.

use std::time::Duration;

use chat_bridge_tests::bridge::config;
use chat_bridge_tests::discord_twin::{Twin, headline, http_get, http_status, text_of};
use chat_bridge_tests::{free_port, init_tracing};
use tokio_util::sync::CancellationToken;

/// Long enough for a cold Node and a shared, busy machine; never reached when things work.
const WITHIN: Duration = Duration::from_secs(60);

struct Bridge {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    http: String,
    _dir: tempfile::TempDir,
}

impl Bridge {
    async fn start(twin: &mut Twin, tweak: impl FnOnce(&mut chat_bridge::config::Config)) -> Self {
        init_tracing();
        let dir = tempfile::tempdir().expect("tmp");
        let mut cfg = config(
            &format!("sqlite://{}", dir.path().join("twin.db").display()),
            dir.path(),
        );
        let http = format!("127.0.0.1:{}", free_port());
        cfg.http.listen = Some(http.clone());
        cfg.discord_mut().token = Some(twin.token.as_str().into());
        cfg.discord_mut().api_base_url = twin.base_url.clone();
        cfg.discord_mut().allowed_users = twin.people[..1].to_vec();
        tweak(&mut cfg);
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let stop = stop.clone();
            async move { chat_bridge::startup::run(&cfg, stop).await }
        });
        let bridge = Self {
            stop,
            task,
            http,
            _dir: dir,
        };
        bridge.ready(true, WITHIN).await;
        bridge
    }

    /// Waits until `/readyz` says `want` (ready: as the active replica, not a standby); how long it
    /// took.
    async fn ready(&self, want: bool, within: Duration) -> Duration {
        let started = tokio::time::Instant::now();
        loop {
            let answer = http_get(&self.http, "/readyz", Duration::from_secs(1)).await;
            let status = answer.as_ref().map(|(s, _)| *s);
            let active = answer
                .as_ref()
                .is_some_and(|(_, body)| body.contains(r#""role":"active""#));
            if (status == Some(200) && active) == want {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < within,
                "/readyz not {want} within {within:?} (last {status:?})"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("stops in time")
            .expect("join")
            .expect("clean shutdown");
    }
}

macro_rules! twin_or_skip {
    () => {
        match Twin::start().await {
            Some(t) => t,
            None => return,
        }
    };
}

/// R1/R2 on a Discord written by others: the thread is the message's, the result a green embed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twin_a_mention_gets_a_thread_and_a_green_result_embed() {
    let mut twin = twin_or_skip!();
    let bridge = Bridge::start(&mut twin, |_| {}).await;
    let (channel, ana, bot) = (
        twin.channel.clone(),
        twin.people[0].clone(),
        twin.bot.clone(),
    );
    let mention = twin
        .post(&channel, &ana, &format!("<@{bot}> echo from the twin"))
        .await;
    let thread = mention["id"].as_str().expect("id").to_owned();
    let result = twin
        .wait_for("the result embed", WITHIN, async |t| {
            t.find(&thread, "✅ echo from the twin").await
        })
        .await;
    let info = twin.channel_info(&thread).await;
    assert_eq!(
        info["parent_id"],
        channel.as_str(),
        "a thread of the channel"
    );
    assert_eq!(info["name"], "echo from the twin", "named from the prompt");
    assert_eq!(result["embeds"][0]["color"], 0x2E_CC71, "green");
    assert!(text_of(&result).contains("from the twin"), "{result}");
    let in_thread = twin.messages(&thread).await;
    assert_eq!(
        in_thread
            .iter()
            .filter(|m| m["author"]["id"] == bot.as_str())
            .filter(|m| headline(m).contains("echo from the twin"))
            .count(),
        1,
        "one message for the one tool, edited in place: {in_thread:#?}"
    );
    bridge.stop().await;
}

/// R3: a timeout is red and keeps what the command printed before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twin_a_timeout_is_red_with_its_partial_output() {
    let mut twin = twin_or_skip!();
    let bridge = Bridge::start(&mut twin, |_| {}).await;
    let (channel, ana, bot) = (
        twin.channel.clone(),
        twin.people[0].clone(),
        twin.bot.clone(),
    );
    let mention = twin
        .post(
            &channel,
            &ana,
            &format!("<@{bot}> timeout=1s echo partial; sleep 30"),
        )
        .await;
    let thread = mention["id"].as_str().expect("id").to_owned();
    let m = twin
        .wait_for("the timeout", WITHIN, async |t| t.find(&thread, "⏱").await)
        .await;
    assert_eq!(m["embeds"][0]["color"], 0xE7_4C3C, "red");
    let text = text_of(&m);
    assert!(
        text.contains("timed out") && text.contains("partial"),
        "{text}"
    );
    let footer = m["embeds"]
        .as_array()
        .and_then(|e| e.last())
        .and_then(|e| e["footer"]["text"].as_str())
        .unwrap_or_default()
        .to_owned();
    assert!(
        footer.contains("chat-bridge history show") && !footer.contains('`'),
        "a plain-text pointer in the footer: {footer}"
    );
    bridge.stop().await;
}

/// R6 and the A-rules: another person's click is refused (to them alone); the requester's runs the
/// command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twin_an_approval_by_the_requester_and_a_refusal_for_another_person() {
    let mut twin = twin_or_skip!();
    let bridge = Bridge::start(&mut twin, |cfg| {
        cfg.shell_agent.require_approval = true;
    })
    .await;
    let (channel, ana, bob, bot) = (
        twin.channel.clone(),
        twin.people[0].clone(),
        twin.people[1].clone(),
        twin.bot.clone(),
    );
    let mention = twin
        .post(&channel, &ana, &format!("<@{bot}> echo approved"))
        .await;
    let thread = mention["id"].as_str().expect("id").to_owned();
    let (approval, allow) = twin
        .wait_for("the approval buttons", WITHIN, async |t| {
            t.messages(&thread).await.into_iter().find_map(|m| {
                let b = &m["components"][0]["components"][0];
                Some((
                    m["id"].as_str()?.to_owned(),
                    b["custom_id"].as_str()?.to_owned(),
                ))
            })
        })
        .await;
    twin.click(&thread, &bob, &approval, &allow).await;
    // bob's refusal is an ephemeral follow-up: the twin stores it in the thread, flagged 64.
    let refusal = twin
        .wait_for("the refusal", WITHIN, async |t| {
            t.messages(&thread)
                .await
                .into_iter()
                .find(|m| text_of(m).contains("not allowed"))
        })
        .await;
    assert_eq!(
        refusal["flags"].as_u64().map(|f| f & 64),
        Some(64),
        "only bob sees it: {refusal}"
    );
    assert!(
        twin.find(&thread, "✅ echo approved").await.is_none(),
        "another person's click runs nothing"
    );
    twin.click(&thread, &ana, &approval, &allow).await;
    let result = twin
        .wait_for("the result", WITHIN, async |t| {
            t.find(&thread, "✅ echo approved").await
        })
        .await;
    assert!(text_of(&result).contains("approved"), "{result}");
    let decided = twin
        .messages(&thread)
        .await
        .into_iter()
        .find(|m| m["id"] == approval.as_str())
        .expect("the approval message");
    // The twin leaves out an empty `components`.
    assert!(
        decided["components"].as_array().is_none_or(Vec::is_empty),
        "buttons gone once decided: {decided}"
    );
    // Who decided, as a mention, and what.
    assert!(
        text_of(&decided).contains(&format!("Allowed once by <@{ana}>")),
        "{decided}"
    );
    bridge.stop().await;
}

/// `/readyz` (channels connected), issue 24 item 2: connected only between READY/RESUMED and the
/// next disconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twin_readyz_is_false_within_5s_of_the_gateway_going_away_and_true_once_it_is_back() {
    let mut twin = twin_or_skip!();
    let bridge = Bridge::start(&mut twin, |_| {}).await;
    twin.drop_gateway().await;
    let down = bridge.ready(false, Duration::from_secs(5)).await;
    // Reconnects are refused meanwhile: still not ready, and /healthz answers at once.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        http_status(&bridge.http, "/readyz", Duration::from_secs(1)).await,
        Some(503),
        "not ready while the gateway refuses"
    );
    assert_eq!(
        http_status(&bridge.http, "/healthz", Duration::from_secs(1)).await,
        Some(200),
        "alive, and answering within a second"
    );
    twin.restore_gateway().await;
    let up = bridge.ready(true, WITHIN).await;
    eprintln!("readyz false after {down:?}; true again {up:?} after the gateway returned");
    // And the session works again: a mention is answered.
    let (channel, ana, bot) = (
        twin.channel.clone(),
        twin.people[0].clone(),
        twin.bot.clone(),
    );
    let mention = twin
        .post(&channel, &ana, &format!("<@{bot}> echo back"))
        .await;
    let thread = mention["id"].as_str().expect("id").to_owned();
    twin.wait_for("the result after reconnecting", WITHIN, async |t| {
        t.find(&thread, "✅ echo back").await
    })
    .await;
    bridge.stop().await;
}
