//! Shared by the binary-level tests: a fresh PostgreSQL database per test, and waiting for delivery.
#![allow(dead_code)] // each test binary uses part of it

/// A new database on the server `DATABASE_URL` names (`scripts/test` provides one); dropped with
/// [`FreshDb::drop_now`].
pub struct FreshDb {
    /// Its URL.
    pub url: String,
    name: String,
    admin: chat_bridge::store::Store,
}

impl FreshDb {
    /// Creates it.
    pub async fn create(prefix: &str) -> Self {
        let admin_url =
            std::env::var("DATABASE_URL").expect("DATABASE_URL (scripts/test provides one)");
        let admin = chat_bridge::store::Store::connect(&admin_url)
            .await
            .expect("admin connection");
        let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(admin.statements())
            .await
            .expect("create database");
        let (base, _) = admin_url.rsplit_once('/').expect("url with a database");
        Self {
            url: format!("{base}/{name}"),
            name,
            admin,
        }
    }

    /// Drops it (connections still open are closed by force).
    pub async fn drop_now(self) {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        )))
        .execute(self.admin.statements())
        .await;
        self.admin.close().await;
    }
}

/// Waits (up to 10 s) until every chat action in the database at `url` is recorded delivered: a
/// SIGKILL after that is outside the at-least-once window the crash suite (Q1) covers.
///
/// # Panics
/// When the store cannot be read or delivery takes longer.
pub async fn wait_delivered(url: &str) {
    let store = chat_bridge::store::Store::connect(url)
        .await
        .expect("store");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !chat_bridge::outbox_worker::drained(&store)
        .await
        .expect("stats")
    {
        assert!(tokio::time::Instant::now() < deadline, "delivery recorded");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    store.close().await;
}
