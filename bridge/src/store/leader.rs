//! The leader lease behind D5: on Postgres, a session-level advisory lock held on a dedicated
//! connection — it is released when that connection ends, so a dead replica's lease frees itself. On
//! SQLite (one node) the lease is always granted.

use sqlx::AnyConnection;
use sqlx::Connection;

use super::bind::{BindExt, FetchExt};
use super::{Backend, Result, Store};

/// The advisory-lock key chat-bridge replicas contend for (`chatbrdg` in ASCII).
pub const LOCK_KEY: i64 = 0x6368_6174_6272_6467;

/// A held leadership lease.
#[derive(Debug)]
pub struct Lease {
    conn: Option<AnyConnection>,
    key: i64,
}

/// Tries to become the active replica; `None` when another replica holds the lease.
///
/// # Errors
/// Database errors.
pub async fn try_acquire(store: &Store, key: i64) -> Result<Option<Lease>> {
    if store.backend() == Backend::Sqlite {
        return Ok(Some(Lease { conn: None, key }));
    }
    let mut conn = store.statements().acquire().await?.detach();
    let (held,): (bool,) = sqlx::query_as("SELECT pg_try_advisory_lock($1)")
        .arg(key)
        .only(&mut conn)
        .await?;
    if held {
        Ok(Some(Lease {
            conn: Some(conn),
            key,
        }))
    } else {
        let _ = conn.close().await;
        Ok(None)
    }
}

impl Lease {
    /// Whether the lease still holds (its connection answers). A lost connection means a lost lock:
    /// stop acting as leader at once.
    pub async fn check(&mut self) -> bool {
        match &mut self.conn {
            None => true,
            Some(conn) => sqlx::query("SELECT 1").execute(conn).await.is_ok(),
        }
    }

    /// Gives the lease up.
    pub async fn release(mut self) {
        if let Some(mut conn) = self.conn.take() {
            let _ = sqlx::query("SELECT pg_advisory_unlock($1)")
                .arg(self.key)
                .execute(&mut conn)
                .await;
            let _ = conn.close().await;
        }
    }
}
