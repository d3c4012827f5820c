//! Hostile input from the daemon side, at the bridge: a flood of unknown events, bytes that are not
//! UTF-8, JSON nested 100,000 deep, updates for sessions nobody has, and finally a frame over the
//! 16 MB limit. The bridge posts nothing for any of it, keeps serving another conversation in the
//! middle of the flood, closes only the connection that carried the oversized frame, reconnects,
//! loads the session and delivers the running command's result once. (The real daemons cannot be
//! made to send these, so a scripted daemon does.)

use std::sync::Arc;

use chat_bridge::app::Application;
use chat_bridge::channel::{Inbound, Tone, console};
use chat_bridge_tests::bridge::{config, settle};
use chat_bridge_tests::on_both;
use chat_bridge_tests::recorder::Recorder;
use chat_bridge_tests::scripted::{Peer, ScriptedDaemon};
use serde_json::json;

fn second_thread(text: &str) -> Inbound {
    let mut m = console::inbound(text);
    m.target.thread = "second".into();
    m
}

async fn hostile_daemon(mut peer: Peer) {
    let update = |s: &str, u: serde_json::Value| json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":s,"update":u}});
    peer.handshake().await;
    if peer.number == 1 {
        let new = peer.expect_skipping("session/new").await;
        peer.reply(&new, json!({"sessionId": "s1"})).await;
        peer.expect_skipping("session/prompt").await;
        peer.send(update("s1", json!({"sessionUpdate":"tool_call","toolCallId":"c1","title":"make build","kind":"execute","status":"in_progress"}))).await;
        for n in 0..5_000 {
            peer.send(update(
                "s1",
                json!({"sessionUpdate": format!("mystery_{n}"), "payload": n}),
            ))
            .await;
        }
        peer.send_binary(vec![0xff, 0xfe, b'{', 0xc3, 0x28, b'}'])
            .await;
        peer.send_raw(&"[".repeat(100_000)).await;
        peer.send_raw(&format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{}}}",
            "{\"a\":".repeat(50_000)
        ))
        .await;
        peer.send(update("nobody", json!({"sessionUpdate":"tool_call_update","toolCallId":"x","status":"completed","rawOutput":{"output":"ghost"}}))).await;
        // Another conversation is served in the middle of all that.
        let new = peer.expect_skipping("session/new").await;
        peer.reply(&new, json!({"sessionId": "s2"})).await;
        let prompt = peer.expect_skipping("session/prompt").await;
        peer.send(update("s2", json!({"sessionUpdate":"tool_call","toolCallId":"c2","title":"echo second","kind":"execute","status":"in_progress"}))).await;
        peer.send(update("s2", json!({"sessionUpdate":"tool_call_update","toolCallId":"c2","status":"completed","rawOutput":{"output":"second ok","exitCode":0}}))).await;
        peer.reply(&prompt, json!({"stopReason": "end_turn"})).await;
        // Give the bridge a moment to take the second turn's end, then the frame over the limit.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        peer.send_raw(&format!("{{\"pad\":\"{}\"}}", "x".repeat(17 << 20)))
            .await;
        let _ = peer.recv().await;
        return;
    }
    // The next connection: load what is open, finish the command, say the turn is complete.
    let load = peer.expect_skipping("session/load").await;
    assert_eq!(load["params"]["sessionId"], "s1");
    peer.reply(&load, json!({})).await;
    peer.send(update("s1", json!({"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed","rawOutput":{"output":"first survived","exitCode":0}}))).await;
    peer.send(json!({"jsonrpc":"2.0","method":"_shell_agent/turn_complete","params":{"sessionId":"s1","stopReason":"end_turn"}})).await;
    while peer.recv().await.is_some() {}
}

on_both! {
    async fn hostile_daemon_input_posts_nothing_keeps_serving_and_an_oversized_frame_closes_only_its_connection(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let daemon = ScriptedDaemon::start(hostile_daemon).await;
        let mut cfg = config(&db.url, dir.path());
        cfg.daemon.url = Some(daemon.url.clone());
        cfg.daemon.token = Some(daemon.token.clone().into());
        cfg.liveness.idle = std::time::Duration::from_secs(10);
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        app.core.accept(console::inbound("make build")).await.expect("accept");
        rec.wait_for("the first tool message", |r| !r.posts().is_empty()).await;
        app.core.accept(second_thread("echo second")).await.expect("accept");
        settle(&app).await;

        let latest = rec.latest();
        let titles: Vec<&str> = latest.iter().map(|(_, m)| m.title.as_str()).collect();
        assert!(titles.iter().any(|t| t.starts_with("✅ echo second")), "the other conversation was served: {titles:?}");
        assert_eq!(titles.iter().filter(|t| t.starts_with("✅ make build")).count(), 1, "delivered once: {titles:?}");
        assert!(latest.iter().any(|(_, m)| m.code.as_deref() == Some("first survived")), "{latest:#?}");
        let everything = format!("{:?}", rec.calls());
        assert!(!everything.contains("mystery") && !everything.contains("ghost"), "no chat noise from junk");
        assert!(rec.with_tone(Tone::Warning).is_empty() && rec.with_tone(Tone::Error).is_empty(), "no stall or error: {titles:?}");
        assert_eq!(latest.len(), 2, "one message per tool call and nothing else: {titles:?}");
        assert_eq!(daemon.connections(), 2, "the oversized frame closed its connection; the bridge reconnected once");
        app.shutdown().await;
    }
}
