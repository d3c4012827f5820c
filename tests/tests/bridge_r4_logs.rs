//! R4 in its own test binary: tracing caches per-callsite interest process-wide, so a capture
//! subscriber must not share the process with threads that hit the same callsites without one.

use std::sync::Arc;

use chat_bridge::app::Application;
use chat_bridge::channel::console;
use chat_bridge_tests::bridge::{config, settle};
use chat_bridge_tests::recorder::Recorder;

#[test]
fn r4_logs_carry_ids_and_outcomes_but_never_command_output_or_prompt_text() {
    let logs = chat_bridge_tests::logs::logged(tracing::Level::DEBUG, || async {
        let dir = tempfile::tempdir().expect("tmp");
        let url = format!("sqlite://{}", dir.path().join("r4.db").display());
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&config(&url, dir.path()), rec.clone())
            .await
            .expect("build");
        app.core
            .accept(console::inbound(
                "timeout=1s echo SECRET-OUTPUT-7731; sleep 30",
            ))
            .await
            .expect("accept");
        settle(&app).await;
        assert!(
            rec.latest()[0].1.code.as_deref() == Some("SECRET-OUTPUT-7731"),
            "the thread shows the output"
        );
        app.shutdown().await;
    });
    assert!(
        logs.contains("tool finished") && logs.contains("timed_out"),
        "the log has the outcome: {logs}"
    );
    assert!(
        !logs.contains("SECRET-OUTPUT-7731"),
        "no output or prompt text in logs:\n{logs}"
    );
}
