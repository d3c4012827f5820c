//! We own shutdown: every task the core spawns — each conversation's runner, each prompt call, the
//! heartbeat-count writer — is on the core's `TaskTracker` and ends once the bridge stops, even with
//! a turn running. Before, a runner waited on its mailbox forever (the core held its sender).

use std::sync::Arc;
use std::time::Duration;

use chat_bridge::app::Application;
use chat_bridge::channel::console;
use chat_bridge_tests::bridge::config;
use chat_bridge_tests::on_both;
use chat_bridge_tests::recorder::Recorder;

on_both! {
    async fn every_core_task_ends_after_shutdown_while_a_turn_runs(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&config(&db.url, dir.path()), rec.clone()).await.expect("build");
        for n in 0..3 {
            app.core.accept(console::inbound(&format!("sleep 30; echo {n}"))).await.expect("accept");
        }
        rec.wait_for("the running tool's message", |r| !r.posts().is_empty()).await;
        let core = app.core.clone();
        // The writer, the conversation's runner and its prompt call at least.
        assert!(core.tasks().len() >= 3, "tracked: {}", core.tasks().len());
        app.shutdown().await;
        tokio::time::timeout(Duration::from_secs(5), core.stopped())
            .await
            .expect("every conversation, prompt call and writer ended");
        assert!(core.tasks().is_empty());
        assert_eq!(core.busy(), 3, "the open turn and the queued prompts stay for the next start (D3)");
    }
}
