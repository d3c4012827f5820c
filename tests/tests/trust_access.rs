//! The trust boundary inside a thread (A2, A3), on the fake Slack with the real shell agent: a thread
//! belongs to the person who opened it; strangers are told so privately and nothing of theirs runs —
//! not a prompt, not a `/cancel`, not a click, not even after the owner chose "Allow always"; the
//! owner can `/invite` people; four eyes keep a requester from approving their own call; a forged
//! option id is refused.

use std::path::Path;

use chat_bridge_tests::fake_slack::{FakeSlack, event_envelope};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const THREAD: &str = "1700.000100";

fn mention(user: &str, text: &str) -> Value {
    json!({"type": "app_mention", "user": user, "channel": "C1", "ts": THREAD, "text": format!("<@UBOT> {text}"), "event_ts": THREAD})
}

fn reply(user: &str, ts: &str, text: &str) -> Value {
    json!({"type": "message", "user": user, "channel": "C1", "ts": ts, "thread_ts": THREAD, "text": text})
}

fn click(envelope_id: &str, user: &str, value: &str) -> Value {
    json!({"envelope_id": envelope_id, "type": "interactive", "accepts_response_payload": false, "payload": {
        "type": "block_actions", "user": {"id": user}, "team": {"id": "T1"}, "channel": {"id": "C1"},
        "message": {"ts": "1700000000.000001", "thread_ts": THREAD},
        "actions": [{"action_id": "choice_0", "block_id": "b", "value": value, "type": "button"}]}})
}

async fn bridge(
    fake: &FakeSlack,
    dir: &Path,
    tweak: impl FnOnce(&mut chat_bridge::config::Config),
) -> (
    CancellationToken,
    tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    chat_bridge_tests::fake_slack::run_bridge(fake, dir, |cfg| {
        cfg.shell_agent.require_approval = true;
        tweak(cfg);
    })
    .await
}

/// The approval buttons' values (`perm:<id>:<option>`) of every approval message, in order.
fn approvals(f: &FakeSlack) -> Vec<Vec<String>> {
    f.calls_of("chat.postMessage")
        .into_iter()
        .filter_map(|c| {
            let blocks: Vec<Value> = c.body["attachments"]
                .as_array()?
                .iter()
                .flat_map(|a| a["blocks"].as_array().cloned().unwrap_or_default())
                .collect();
            let actions = blocks.into_iter().find(|b| b["type"] == "actions")?;
            Some(
                actions["elements"]
                    .as_array()?
                    .iter()
                    .filter_map(|e| e["value"].as_str().map(str::to_owned))
                    .collect(),
            )
        })
        .collect()
}

fn option<'a>(buttons: &'a [String], id: &str) -> &'a str {
    buttons
        .iter()
        .find(|v| v.ends_with(&format!(":{id}")))
        .unwrap_or_else(|| panic!("no {id} button in {buttons:?}"))
}

fn finished(f: &FakeSlack, title: &str) -> bool {
    f.calls_of("chat.update").iter().any(|c| {
        c.body["text"]
            .as_str()
            .is_some_and(|t| t.starts_with(&format!("✅ {title}")))
    })
}

fn ephemerals_to(f: &FakeSlack, user: &str) -> Vec<String> {
    f.calls_of("chat.postEphemeral")
        .into_iter()
        .filter(|c| c.body["user"] == user)
        .map(|c| c.body["text"].as_str().unwrap_or("").to_owned())
        .collect()
}

fn reacted(f: &FakeSlack, ts: &str, name: &str) -> bool {
    f.calls_of("reactions.add")
        .iter()
        .any(|c| c.body["timestamp"] == ts && c.body["name"] == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2_strangers_cannot_prompt_cancel_or_ride_on_allow_always_until_the_owner_invites_them() {
    let fake = FakeSlack::start().await;
    let dir = tempfile::tempdir().expect("tmp");
    let pwned = dir.path().join("pwned");
    let (stop, task) = bridge(&fake, dir.path(), |_| {}).await;

    // The owner opens the thread and allows its commands always.
    fake.push(event_envelope(
        "env-1",
        "Ev1",
        0,
        mention("U1", "echo first"),
    ));
    fake.wait_for("the first approval", |f| approvals(f).len() == 1)
        .await;
    let always = option(&approvals(&fake)[0], "allow_always").to_owned();
    fake.push(click("env-2", "U1", &always));
    fake.wait_for("the first result", |f| finished(f, "echo first"))
        .await;

    // A stranger's command, a stranger's /cancel: refused privately, marked ⛔, nothing runs.
    fake.push(event_envelope(
        "env-3",
        "Ev3",
        0,
        reply("U2", "1700.000200", &format!("touch {}", pwned.display())),
    ));
    fake.push(event_envelope(
        "env-4",
        "Ev4",
        0,
        reply("U2", "1700.000300", "/cancel"),
    ));
    fake.wait_for("two refusals", |f| ephemerals_to(f, "U2").len() == 2)
        .await;
    for text in ephemerals_to(&fake, "U2") {
        assert!(
            text.contains("belongs to <@U1>") && text.contains("/invite"),
            "{text}"
        );
    }
    fake.wait_for("⛔ on both refused messages", |f| {
        reacted(f, "1700.000200", "no_entry_sign") && reacted(f, "1700.000300", "no_entry_sign")
    })
    .await;

    // The owner invites them: now their command runs (under the owner's "Allow always").
    fake.push(event_envelope(
        "env-5",
        "Ev5",
        0,
        reply("U1", "1700.000400", "/invite <@U2>"),
    ));
    fake.push(event_envelope(
        "env-6",
        "Ev6",
        0,
        reply("U2", "1700.000500", "echo from-u2"),
    ));
    fake.wait_for("the invited member's result", |f| {
        finished(f, "echo from-u2")
    })
    .await;
    assert!(
        fake.calls_of("chat.postMessage")
            .iter()
            .any(|c| c.body["text"]
                .as_str()
                .is_some_and(|t| t.contains("<@U1> invited <@U2>"))),
        "the invitation is said in the thread"
    );

    // While the owner's slow command runs, the member queues a command; then the owner uninvites
    // them: at its turn the queued command is asked again, refused, and never runs.
    fake.push(event_envelope(
        "env-7",
        "Ev7",
        0,
        reply("U1", "1700.000600", "sleep 2; echo slow"),
    ));
    fake.wait_for("the slow command's message", |f| {
        f.calls_of("chat.postMessage").iter().any(|c| {
            c.body["text"]
                .as_str()
                .is_some_and(|t| t.contains("sleep 2; echo slow"))
        })
    })
    .await;
    fake.push(event_envelope(
        "env-8",
        "Ev8",
        0,
        reply("U2", "1700.000700", &format!("touch {}", pwned.display())),
    ));
    fake.push(event_envelope(
        "env-8b",
        "Ev8b",
        0,
        reply("U1", "1700.000750", "/uninvite <@U2>"),
    ));
    fake.wait_for("the queued message's refusal", |f| {
        ephemerals_to(f, "U2").len() == 3 && reacted(f, "1700.000700", "no_entry_sign")
    })
    .await;
    assert!(finished(&fake, "sleep 2; echo slow"));
    // A member cannot invite: only the owner (and approvers).
    fake.push(event_envelope(
        "env-9",
        "Ev9",
        0,
        reply("U3", "1700.000800", "/invite <@U3>"),
    ));
    fake.wait_for("the invite refusal", |f| !ephemerals_to(f, "U3").is_empty())
        .await;
    assert!(ephemerals_to(&fake, "U3")[0].contains("can invite people"));

    assert!(!pwned.exists(), "no stranger's command ran");
    let titles: Vec<String> = fake
        .calls_of("chat.postMessage")
        .iter()
        .filter_map(|c| c.body["text"].as_str().map(str::to_owned))
        .collect();
    assert!(
        !titles.iter().any(|t| t.contains("touch")),
        "no tool message for a refused prompt: {titles:#?}"
    );
    stop.cancel();
    task.await.expect("join").expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a3_four_eyes_refuse_the_requesters_own_click_and_a_forged_option() {
    let fake = FakeSlack::start().await;
    let dir = tempfile::tempdir().expect("tmp");
    let (stop, task) = bridge(&fake, dir.path(), |cfg| {
        cfg.approvals.require_second_person = true;
        cfg.approvals.approvers = vec!["U9".into()];
    })
    .await;
    fake.push(event_envelope(
        "env-1",
        "Ev1",
        0,
        mention("U1", "echo four eyes"),
    ));
    fake.wait_for("the approval", |f| approvals(f).len() == 1)
        .await;
    let buttons = approvals(&fake)[0].clone();
    let once = option(&buttons, "allow_once").to_owned();
    assert!(
        !buttons.iter().any(|b| b.ends_with(":allow_always")),
        "no \"always\" under four eyes, or the requester's later calls would run unseen: {buttons:?}"
    );

    fake.push(click("env-2", "U1", &once));
    fake.wait_for("the requester's refusal", |f| {
        !ephemerals_to(f, "U1").is_empty()
    })
    .await;
    assert!(
        ephemerals_to(&fake, "U1")[0].contains("someone else has to approve"),
        "{:?}",
        ephemerals_to(&fake, "U1")
    );
    // A hand-made button value with an option the request never offered.
    let forged = once.replace(":allow_once", ":proceed_always_server");
    fake.push(click("env-3", "U9", &forged));
    fake.wait_for("the forged option's refusal", |f| {
        !ephemerals_to(f, "U9").is_empty()
    })
    .await;
    assert!(ephemerals_to(&fake, "U9")[0].contains("not one of the options"));
    // "Allow always" was not offered, so a hand-made click for it is refused too.
    fake.push(click(
        "env-3b",
        "U9",
        &once.replace(":allow_once", ":allow_always"),
    ));
    // A number out of range while the approval waits is a wrong answer, not a shell command.
    fake.push(event_envelope(
        "env-3c",
        "Ev3c",
        0,
        reply("U9", "1700.000900", "9"),
    ));
    fake.wait_for("both refusals", |f| ephemerals_to(f, "U9").len() == 3)
        .await;
    for text in ephemerals_to(&fake, "U9") {
        assert!(text.contains("not one of the options"), "{text}");
    }
    assert!(
        !finished(&fake, "echo four eyes"),
        "nothing ran on a refused answer"
    );

    fake.push(click("env-4", "U9", &once));
    fake.wait_for("the approved result", |f| finished(f, "echo four eyes"))
        .await;
    assert!(
        fake.calls_of("chat.update")
            .iter()
            .any(|c| c.body.to_string().contains("<@U9> chose: Allow once")),
        "the second person's decision is shown"
    );
    stop.cancel();
    task.await.expect("join").expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2_shared_threads_let_anyone_prompt_but_approvals_stay_with_the_thread() {
    let fake = FakeSlack::start().await;
    let dir = tempfile::tempdir().expect("tmp");
    let (stop, task) = bridge(&fake, dir.path(), |cfg| {
        cfg.access.threads = chat_bridge::config::ThreadAccess::Shared;
    })
    .await;
    fake.push(event_envelope("env-1", "Ev1", 0, mention("U1", "echo one")));
    fake.wait_for("the first approval", |f| approvals(f).len() == 1)
        .await;
    let once = option(&approvals(&fake)[0], "allow_once").to_owned();
    fake.push(click("env-2", "U1", &once));
    fake.wait_for("the first result", |f| finished(f, "echo one"))
        .await;
    // Another member prompts in the shared thread: it runs (after its own approval).
    fake.push(event_envelope(
        "env-3",
        "Ev3",
        0,
        reply("U2", "1700.000200", "echo two"),
    ));
    fake.wait_for("the second approval", |f| approvals(f).len() == 2)
        .await;
    let once = option(&approvals(&fake)[1], "allow_once").to_owned();
    // A third person may not answer U2's request; the owner may.
    fake.push(click("env-4", "U3", &once));
    fake.wait_for("the outsider's refusal", |f| {
        !ephemerals_to(f, "U3").is_empty()
    })
    .await;
    fake.push(click("env-5", "U1", &once));
    fake.wait_for("the second result", |f| finished(f, "echo two"))
        .await;
    stop.cancel();
    task.await.expect("join").expect("clean shutdown");
}

mod discord {
    use chat_bridge_tests::bridge::config;
    use chat_bridge_tests::fake_discord::{BOT, CHANNEL, FakeDiscord, TOKEN, person_message};
    use chat_bridge_tests::init_tracing;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a2_s2_discord_strangers_get_a_refusal_and_thread_names_are_redacted_before_the_cut() {
        init_tracing();
        let fake = FakeDiscord::start(300).await;
        let dir = tempfile::tempdir().expect("tmp");
        let pwned = dir.path().join("pwned");
        let mut cfg = config(
            &format!("sqlite://{}", dir.path().join("discord.db").display()),
            dir.path(),
        );
        cfg.discord_mut().token = Some(TOKEN.into());
        cfg.discord_mut().api_base_url = fake.base_url.clone();
        cfg.access.open = true;
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn({
            let stop = stop.clone();
            async move { chat_bridge::startup::run(&cfg, stop).await }
        });
        fake.wait_for("the gateway session", |f| !f.frames_op(2).is_empty())
            .await;

        // A prompt whose first 100 characters end inside a token: the name must not hold any of it.
        let token = format!("ghp_{}", "a".repeat(40));
        let prompt = format!("echo {} {token}", "x".repeat(80));
        fake.dispatch(
            "MESSAGE_CREATE",
            person_message("1001", CHANNEL, "501", &format!("<@{BOT}> {prompt}"), true),
        );
        fake.wait_for("the owner's result", |f| {
            f.messages_in("1001").iter().any(|m| {
                m["embeds"][0]["title"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("✅"))
            })
        })
        .await;
        let create =
            &fake.requests_to(&format!("POST /channels/{CHANNEL}/messages/1001/threads"))[0];
        let name = create.body["name"].as_str().expect("name");
        assert!(
            name.ends_with("[redacted]") && !name.contains("ghp_"),
            "{name}"
        );

        // A stranger in the owner's thread.
        fake.dispatch(
            "MESSAGE_CREATE",
            person_message(
                "1002",
                "1001",
                "777",
                &format!("touch {}", pwned.display()),
                false,
            ),
        );
        fake.wait_for("the 🚫 on the stranger's message", |f| {
            !f.requests_to("PUT /channels/1001/messages/1002/reactions/")
                .is_empty()
        })
        .await;
        fake.wait_for("the refusal addressed to them", |f| {
            f.messages_in("1001").iter().any(|m| {
                m["content"]
                    .as_str()
                    .is_some_and(|c| c.starts_with("<@777>") && c.contains("belongs to <@501>"))
            })
        })
        .await;
        assert!(!pwned.exists(), "the stranger's command never ran");
        stop.cancel();
        task.await.expect("join").expect("clean shutdown");
    }
}
