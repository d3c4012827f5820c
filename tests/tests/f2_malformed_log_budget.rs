//! F2 in its own test binary (tracing caches per-callsite interest process-wide, so a capture
//! subscriber must not share the process with threads that hit the same callsites without one):
//! a daemon that floods the client with malformed frames gets each counted, but the log a bounded
//! number of lines a minute — an outside tester's 1,000 garbage frames made 1,000 WARN lines.

use std::time::Duration;

use chat_bridge_tests::scripted::{Peer, ScriptedDaemon};
use daemon_client::{ClientConfig, DaemonClient, DaemonEvent, StopReason};
use serde_json::json;

#[test]
fn f2_a_flood_of_malformed_frames_is_counted_each_but_logged_ten_lines_a_minute() {
    const FLOOD: usize = 1000;
    let log = chat_bridge_tests::logs::logged(tracing::Level::INFO, || async {
        let daemon = ScriptedDaemon::start(|mut peer: Peer| async move {
            peer.handshake().await;
            let new = peer.expect("session/new").await;
            peer.reply(&new, json!({"sessionId": "s1"})).await;
            let prompt = peer.expect("session/prompt").await;
            for i in 0..FLOOD {
                // Half garbage, half a tool update without its call id (F2's two kinds).
                if i % 2 == 0 {
                    peer.send_raw("{this is not json").await;
                } else {
                    peer.send(
                        json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1",
                            "update":{"sessionUpdate":"tool_call_update","status":"in_progress"}}}),
                    )
                    .await;
                }
            }
            peer.reply(&prompt, json!({"stopReason":"end_turn"})).await;
            let _ = peer.recv().await;
        })
        .await;
        let mut cfg = ClientConfig::new(&daemon.url).with_token(&daemon.token);
        cfg.backoff_base = Duration::from_millis(20);
        let (client, _, mut events) = DaemonClient::connect(cfg).await.expect("connect");
        let s = client.new_session("/").await.expect("new").session;
        assert_eq!(
            client.prompt(&s, "x").await.expect("prompt"),
            StopReason::EndTurn,
            "the session lives on"
        );
        let mut malformed = 0;
        loop {
            let e = tokio::time::timeout(Duration::from_secs(30), events.recv())
                .await
                .expect("an event")
                .expect("open");
            match e {
                DaemonEvent::Malformed { .. } => malformed += 1,
                DaemonEvent::TurnEnded { .. } => break,
                _ => {}
            }
        }
        assert_eq!(malformed, FLOOD, "every one reaches the consumer");
        assert_eq!(
            client.stats().classifier.malformed,
            FLOOD as u64,
            "and is counted"
        );
        client.close();
        // The connection ends: what went unlogged is said then.
        while let Ok(Some(e)) = tokio::time::timeout(Duration::from_secs(10), events.recv()).await {
            if matches!(e, DaemonEvent::Closed { .. }) {
                break;
            }
        }
    });
    let each = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("malformed frame from the daemon skipped"))
        .count();
    assert_eq!(each, 10, "ten lines a minute, not {FLOOD}:\n{log}");
    assert!(
        log.lines().any(|l| l.contains("WARN")
            && l.contains(
                "the rest of this minute's are counted (chatbridge_malformed_frames_total)"
            )),
        "the log says the rest are only counted:\n{log}"
    );
    assert!(
        log.lines().any(|l| l.contains("WARN")
            && l.contains("skipped=990")
            && l.contains("without a line of their own before the connection ended")),
        "the count left unlogged is said when the connection ends:\n{log}"
    );
    assert!(
        log.contains("session=\"s1\"") || log.contains("session=s1"),
        "a line names the session when the frame did:\n{log}"
    );
}
