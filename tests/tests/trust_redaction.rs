//! S2 and `redact.store`, end to end on PostgreSQL and on SQLite with the real shell agent: text is
//! redacted before it is cut, so `/history` never shows half a token; with `redact.store = true` the
//! history itself never holds the secret, and without it the history keeps what ran.

use std::sync::Arc;

use chat_bridge::app::Application;
use chat_bridge::channel::console;
use chat_bridge::store::bind::FetchExt;
use chat_bridge::store::{history, tool_calls, transcript, turns};
use chat_bridge_tests::bridge::{config, settle};
use chat_bridge_tests::on_both;
use chat_bridge_tests::recorder::Recorder;

/// A GitHub token: 40 characters after the prefix.
fn token() -> String {
    format!("ghp_{}", "Z9".repeat(20))
}

/// Everything the store holds about the only conversation, as one string.
async fn stored_text(app: &Application) -> String {
    let mut c = app.store.conn().await.expect("conn");
    let conv = history::list(&mut c, &Default::default())
        .await
        .expect("list")
        .items
        .remove(0);
    let mut all = format!("{}\n", conv.title);
    for t in turns::of_conversation(&mut c, &conv.id)
        .await
        .expect("turns")
    {
        all.push_str(&format!("{}\n{}\n", t.prompt, t.answer.unwrap_or_default()));
    }
    for call in tool_calls::of_conversation(&mut c, &conv.id)
        .await
        .expect("calls")
    {
        all.push_str(&format!(
            "{}\n{}\n{}\n",
            call.title,
            call.summary.unwrap_or_default(),
            call.output.unwrap_or_default()
        ));
    }
    for e in transcript::list(&mut c, &conv.id)
        .await
        .expect("transcript")
    {
        all.push_str(&format!("{}\n", e.body));
    }
    all
}

on_both! {
    async fn s2_history_redacts_before_it_cuts_so_no_half_token_reaches_the_thread(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&config(&db.url, dir.path()), rec.clone()).await.expect("build");
        // 60 characters end inside the token: cut first, the regex no longer sees a token.
        let prompt = format!("echo {} {}", "x".repeat(40), token());
        app.core.accept(console::inbound(&prompt)).await.expect("accept");
        settle(&app).await;
        app.core.accept(console::inbound("/history")).await.expect("accept");
        settle(&app).await;
        let history = rec.latest().into_iter().map(|(_, m)| m).find(|m| m.title.starts_with("This thread:")).expect("the /history notice");
        assert!(history.title.contains("[redacted]"), "{}", history.title);
        assert!(!history.title.contains("ghp_"), "no part of the token: {}", history.title);
        for (_, m) in rec.latest() {
            let all = format!("{}{:?}{:?}", m.title, m.body, m.code);
            assert!(!all.contains("Z9Z9Z9"), "nothing chat-bound holds the token: {all}");
        }
        app.shutdown().await;
    }

    async fn s2_redact_store_keeps_secrets_out_of_the_history_and_its_default_keeps_what_ran(db) {
        for redact_store in [false, true] {
            let dir = tempfile::tempdir().expect("tmp");
            // A database of its own for each setting.
            let own = chat_bridge_tests::db::TestDb::new(db.store.backend()).await;
            let mut cfg = config(&own.url, dir.path());
            cfg.redact.store = redact_store;
            let rec = Arc::new(Recorder::default());
            let app = Application::build(&cfg, rec.clone()).await.expect("build");
            let prompt = format!("echo {} password=hunter22", token());
            app.core.accept(console::inbound(&prompt)).await.expect("accept");
            settle(&app).await;
            let stored = stored_text(&app).await;
            if redact_store {
                assert!(!stored.contains(&token()) && !stored.contains("hunter22"), "redact.store: {stored}");
                assert!(stored.contains("password=[redacted]"), "{stored}");
            } else {
                assert!(stored.contains(&token()), "by default the history keeps what ran: {stored}");
            }
            // The title is a preview: redacted either way.
            let mut c = app.store.conn().await.expect("conn");
            let conv = history::list(&mut c, &Default::default()).await.expect("list").items.remove(0);
            assert!(!conv.title.contains("ghp_"), "{}", conv.title);
            drop(c);
            let (raw,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM inbound_events WHERE payload IS NOT NULL")
                .only(app.store.statements())
                .await
                .expect("count");
            assert_eq!(raw, 0, "a handled event's raw text does not stay in the inbox");
            let (_, result) = rec.latest().pop().expect("the tool message");
            assert!(!format!("{result:?}").contains("hunter22"), "chat never holds it: {result:?}");
            app.shutdown().await;
            own.cleanup().await;
        }
    }
}

/// S2: the bridge's own secrets (here the Discord token and the HTTP API token, formats no pattern
/// knows) are redacted literally from everything chat-bound: a command that prints one (as
/// `echo $CHAT_BRIDGE_DISCORD__TOKEN` would, the built-in agent's commands inheriting the bridge's
/// environment) shows `[redacted]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s2_the_bridges_own_tokens_never_reach_a_chat_whatever_their_format() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(
        &format!("sqlite://{}", dir.path().join("own.db").display()),
        dir.path(),
    );
    let discord = "MTA5ODc2NTQzMjE.own-discord-token.x";
    let api = "own-api-token-0123456789";
    cfg.discord_mut().token = Some(discord.into());
    cfg.http.api_token = Some(api.into());
    let rec = Arc::new(Recorder::default());
    let app = Application::build(&cfg, rec.clone()).await.expect("build");
    app.core
        .accept(console::inbound(&format!("echo {discord}; echo {api}")))
        .await
        .expect("accept");
    settle(&app).await;
    let shown: String = rec
        .latest()
        .into_iter()
        .map(|(_, m)| format!("{}{:?}{:?}{:?}", m.title, m.body, m.code, m.footer))
        .collect();
    assert!(shown.contains("[redacted]"), "{shown}");
    for secret in ["own-discord-token", "own-api-token"] {
        assert!(
            !shown.contains(secret),
            "{secret} reached the chat: {shown}"
        );
    }
    app.shutdown().await;
}
