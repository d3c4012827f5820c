//! Test databases: a fresh real PostgreSQL database per test (from `DATABASE_URL`, which
//! `scripts/test` provides), or a fresh SQLite file.

use chat_bridge::store::{Backend, Store};

/// A throwaway database and a store on it.
#[allow(missing_debug_implementations)]
pub struct TestDb {
    /// The store on the test database.
    pub store: Store,
    /// Its URL.
    pub url: String,
    admin: Option<(String, String)>,
    _dir: Option<tempfile::TempDir>,
}

/// `url` with its database name replaced by `db`.
#[must_use]
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{db}", &base[..path_start]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// `DATABASE_URL`.
///
/// # Panics
/// When it is not set: the PostgreSQL tests need a server.
#[must_use]
pub fn admin_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| {
        panic!("DATABASE_URL is not set: run scripts/test (it starts a throwaway PostgreSQL) or point DATABASE_URL at one")
    })
}

impl TestDb {
    /// A fresh database on `backend`.
    ///
    /// # Panics
    /// When it cannot be created.
    pub async fn new(backend: Backend) -> Self {
        match backend {
            Backend::Postgres => {
                let admin = admin_url();
                let name = format!("cb_test_{}", uuid::Uuid::new_v4().simple());
                let admin_store = Store::connect(&admin).await.expect("admin connection");
                sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .execute(admin_store.statements())
                    .await
                    .expect("create database");
                admin_store.close().await;
                let url = with_database(&admin, &name);
                let store = Store::open(&url).await.expect("open test database");
                Self {
                    store,
                    url,
                    admin: Some((admin, name)),
                    _dir: None,
                }
            }
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("tempdir");
                let url = format!("sqlite://{}", dir.path().join("test.db").display());
                let store = Store::open(&url).await.expect("open sqlite");
                Self {
                    store,
                    url,
                    admin: None,
                    _dir: Some(dir),
                }
            }
        }
    }

    /// Sets `lock_timeout` on this PostgreSQL database: connections opened after it (the bridge's)
    /// give up a lock wait after `timeout` (e.g. `100ms`) with 55P03.
    ///
    /// # Panics
    /// On SQLite, or when the database refuses.
    pub async fn set_lock_timeout(&self, timeout: &str) {
        let (admin, name) = self.admin.as_ref().expect("a PostgreSQL database");
        let admin_store = Store::connect(admin).await.expect("admin connection");
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "ALTER DATABASE {name} SET lock_timeout = '{timeout}'"
        )))
        .execute(admin_store.statements())
        .await
        .expect("lock_timeout");
        admin_store.close().await;
    }

    /// Closes the store and drops the database.
    pub async fn cleanup(self) {
        self.store.close().await;
        if let Some((admin, name)) = self.admin
            && let Ok(admin_store) = Store::connect(&admin).await
        {
            let drop_db = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
            let _ = sqlx::query(sqlx::AssertSqlSafe(drop_db))
                .execute(admin_store.statements())
                .await;
            admin_store.close().await;
        }
    }
}

/// A connection to `url` holding `table` locked (ACCESS EXCLUSIVE) in a transaction: what needs the
/// table waits until the connection commits or closes.
///
/// # Panics
/// When it cannot connect or lock.
pub async fn hold_table(url: &str, table: &str) -> sqlx::AnyConnection {
    use sqlx::Connection;
    let mut holder = sqlx::AnyConnection::connect(url).await.expect("connect");
    sqlx::query("BEGIN")
        .execute(&mut holder)
        .await
        .expect("begin");
    let lock = format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE");
    sqlx::query(sqlx::AssertSqlSafe(lock))
        .execute(&mut holder)
        .await
        .expect("lock");
    holder
}

/// Runs each test body once on PostgreSQL and once on SQLite: `mod NAME { fn postgres, fn sqlite }`.
#[macro_export]
macro_rules! on_both {
    ($(async fn $name:ident($db:ident) $body:block)*) => {$(
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                let $db = $crate::db::TestDb::new(chat_bridge::store::Backend::Postgres).await;
                $body
                $db.cleanup().await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let $db = $crate::db::TestDb::new(chat_bridge::store::Backend::Sqlite).await;
                $body
                $db.cleanup().await;
            }
        }
    )*};
}
