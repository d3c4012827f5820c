//! `chat-bridge migrate` (D4): applies the embedded migrations, again harmlessly, and reports bad URLs
//! in one clear line with the password masked.

use std::process::Command;

fn migrate(url: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_chat-bridge"))
        .args(["migrate", "--database-url", url])
        .env_remove("CHAT_BRIDGE_DATABASE__URL")
        .env_remove("CHAT_BRIDGE_CONFIG")
        .output()
        .expect("run chat-bridge")
}

#[test]
fn d4_migrate_applies_the_schema_and_is_idempotent() {
    let dir = tempfile::tempdir().expect("tmp");
    let url = format!("sqlite://{}", dir.path().join("cb.db").display());
    for _ in 0..2 {
        let out = migrate(&url);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("migrations applied"));
    }
    assert!(dir.path().join("cb.db").exists());
}

#[test]
fn migrate_reports_an_unreachable_database_with_the_password_masked() {
    let out = migrate("postgres://bridge:hunter2@127.0.0.1:1/cb");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot reach the database at postgres://bridge:***@127.0.0.1:1/cb"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
}
