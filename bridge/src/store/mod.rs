//! Persistence: the system of record (PostgreSQL) and the embedded default (SQLite), one query layer.
//!
//! The backend comes from the URL (`postgres://…`, `sqlite://…`). Queries are runtime SQL through
//! sqlx's `Any` driver, written to run unchanged on both (unix-ms `BIGINT` times, JSON as `TEXT`,
//! `$N` placeholders, `ON CONFLICT`, `RETURNING`); the schema lives in `migrations/postgres` and
//! `migrations/sqlite`, embedded in the binary and run at start-up. Each table has its own module;
//! no SQL lives outside this one.
//!
//! A statement that returns rows is read to its end — `fetch_all`, or for one row
//! [`bind::FetchExt`]'s `first`/`only` — never with sqlx's `fetch_optional` or `fetch_one`
//! (`clippy.toml` forbids them): the `Any` driver hands those the first row
//! as it arrives, and PostgreSQL sends it before the statement has finished — on a connection of
//! its own, before it has committed. A write reported as done could then be lost with its
//! connection a moment later, or fail after its row (D1: a tool's result was shown as recorded
//! and lost when PostgreSQL stopped). `fetch_all` reads to the statement's end, its commit or its
//! error.
//!
//! # Layout
//! - [`conversations`], [`turns`], [`tool_calls`], [`transcript`], [`message_map`],
//!   [`inbound`] (D2), [`outbox`] (D1), [`permissions`] (R6): one module per table.
//! - [`history`]: the read side for on-call (lists, transcripts, search).
//! - [`leader`]: the Postgres advisory-lock lease behind D5.

pub mod bind;
pub mod conversations;
pub mod history;
pub mod inbound;
pub mod leader;
pub mod members;
pub mod message_map;
pub mod outbox;
pub mod permissions;
pub mod schedules;
pub mod tool_calls;
pub mod transcript;
pub mod turns;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bind::FetchExt;
use sqlx::AnyConnection;
use sqlx::any::AnyPoolOptions;
use sqlx::migrate::{MigrateError, Migrator};
use sqlx::{Any, AnyPool, Transaction};

static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("../migrations/postgres");
static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("../migrations/sqlite");

/// Which database a store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// PostgreSQL: the system of record; supports several replicas (D5).
    Postgres,
    /// SQLite: the single-node embedded default.
    Sqlite,
}

/// What went wrong in the store, named for what the caller does next.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Fix the configuration: the URL's scheme is not one we support.
    #[error("unsupported database URL {url}: use postgres://… or sqlite://…")]
    UnknownScheme {
        /// The URL, password masked.
        url: String,
    },
    /// Retry later or fix the configuration: the database did not answer.
    #[error("cannot reach the database at {url}: {source}")]
    Unreachable {
        /// The URL, password masked.
        url: String,
        /// The driver's error.
        source: sqlx::Error,
    },
    /// Upgrade chat-bridge: the database was migrated by a newer version.
    #[error(
        "the database at {url} was migrated by a newer chat-bridge (it has migration {found}, this build knows up to {known}); run the newer version or restore a matching backup"
    )]
    NewerSchema {
        /// The URL, password masked.
        url: String,
        /// The newest migration in the database.
        found: i64,
        /// The newest migration this build has.
        known: i64,
    },
    /// The migrations could not be applied.
    #[error("migrating the database at {url} failed: {source}")]
    Migrate {
        /// The URL, password masked.
        url: String,
        /// The migrator's error.
        source: MigrateError,
    },
    /// A query failed; usually transient (connection lost), else a bug.
    #[error("database error: {0}")]
    Query(#[from] sqlx::Error),
    /// Stored data did not have the expected shape.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
}

/// Runs `step` again while it fails because the database is unreachable ([`StoreError::is_transient`]):
/// after 100 ms, doubling to 5 s, at most `retries` more times. `on_first` hears the first such failure
/// (to log it once). `None` when `stop` comes during a wait; the last error when the retries run out.
pub async fn retry_transient<T, Fut>(
    retries: u32,
    stop: &tokio_util::sync::CancellationToken,
    on_first: impl FnOnce(&StoreError),
    mut step: impl FnMut() -> Fut,
) -> Option<Result<T>>
where
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut on_first = Some(on_first);
    let mut attempt = 0u32;
    loop {
        match step().await {
            Err(e) if e.is_transient() && attempt < retries => {
                attempt += 1;
                if let Some(tell) = on_first.take() {
                    tell(&e);
                }
                let delay = daemon_client::client::backoff_delay(
                    Duration::from_millis(100),
                    Duration::from_secs(5),
                    attempt,
                );
                tokio::select! {
                    () = stop.cancelled() => return None,
                    () = tokio::time::sleep(delay) => {}
                }
            }
            r => return Some(r),
        }
    }
}

impl StoreError {
    /// The database's own code for the error (PostgreSQL's SQLSTATE, e.g. `55P03` for a lock not had
    /// within `lock_timeout`; SQLite's result code), when the database answered with one; `-` when
    /// it did not (unreachable, a cut connection, …). For the log.
    #[must_use]
    pub fn code(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Self::Query(sqlx::Error::Database(db)) => db.code().unwrap_or("-".into()),
            _ => "-".into(),
        }
    }

    /// Whether retrying later can succeed: the database is unreachable, restarting, busy, or its
    /// disk is full.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Unreachable { .. } => true,
            Self::Query(e) => transient(e),
            // A migration cut off by a lost connection (its transaction rolled back) runs again.
            Self::Migrate {
                source: MigrateError::Execute(e) | MigrateError::ExecuteMigration(e, _),
                ..
            } => transient(e),
            _ => false,
        }
    }
}

/// Whether a driver error can pass by itself (see [`StoreError::is_transient`]).
fn transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_)
        | sqlx::Error::Tls(_) => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|c| {
            // Postgres: connection exceptions (08…), shutting down or starting (57P01–57P03),
            // too many connections, a full disk (53100), a read-only database (25006: a demoted
            // primary during a failover, or `default_transaction_read_only`), a serialization
            // failure or deadlock (40001, 40P01), a statement cancelled — by `statement_timeout`
            // or an operator's `pg_cancel_backend` (57014) — or a lock not had in `lock_timeout`
            // (55P03); SQLite: busy (5), locked (6), a full disk (13) or an I/O error (10 and its
            // extended codes). Each leaves nothing of the statement written. A full or read-only
            // database is put right by an operator or a failover, a lock by its holder: what
            // waits for the database must not be dropped meanwhile.
            c.starts_with("08")
                || matches!(
                    c.as_ref(),
                    "57P01"
                        | "57P02"
                        | "57P03"
                        | "53300"
                        | "53100"
                        | "25006"
                        | "40001"
                        | "40P01"
                        | "57014"
                        | "55P03"
                        | "5"
                        | "6"
                        | "13"
                )
                || c.parse::<i32>().is_ok_and(|n| n & 0xff == 10)
        }),
        _ => false,
    }
}

/// Shorthand for store results.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Unix time in milliseconds, as every `*_at` column stores it.
#[must_use]
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A fresh random id for rows we create.
#[must_use]
pub fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Marks SQL assembled only from constant fragments (column lists), never from input.
pub(crate) fn sql(s: String) -> sqlx::AssertSqlSafe<String> {
    sqlx::AssertSqlSafe(s)
}

/// A duration in whole milliseconds, saturating.
#[must_use]
pub fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Masks the password in a database URL (`postgres://user:***@host/db`) and `password=` parameters.
#[must_use]
pub fn mask_url(url: &str) -> String {
    // One masking for every URL the bridge prints (S2): a password may hold `/` or `@`.
    daemon_client::mask_url(url)
}

/// The store: a pool on one backend.
#[derive(Debug, Clone)]
pub struct Store {
    /// Transactions (and migrations). On an SQLite file exactly one connection: SQLite admits one
    /// writer, so transactions queue here fairly and are handed the connection the moment it is
    /// free, instead of sleeping in SQLite's busy handler.
    pool: AnyPool,
    /// Reads outside a transaction ([`Store::conn`]). On an SQLite file a few connections of their
    /// own, so code that holds one while it begins a transaction never waits for itself (writes
    /// outside a transaction take `pool`: [`Store::write_conn`]); elsewhere `pool`.
    shared: AnyPool,
    /// Bookkeeping whose loss is harmless — delivery claims, "delivered" marks and retries, and
    /// heartbeat counts: on PostgreSQL its own few connections with `synchronous_commit = off`, so
    /// it never waits for a WAL flush nor for a connection the conversations hold. Only a database
    /// crash can lose such a commit, and then a delivery is repeated harmlessly (a post is found by
    /// its idempotency key — its intent is written on the durable pool first — and an edit or a
    /// reaction repeats itself) or a count is a little low. The same pool on SQLite.
    relaxed: AnyPool,
    /// Reads that need not see a write in flight — history, the UI, metrics. On an SQLite file its
    /// own read-only connections, so the one writer never waits behind a long read; else `pool`.
    read: AnyPool,
    backend: Backend,
    url: String,
    /// Where the outbox workers' claims start looking (PostgreSQL; see [`outbox::ClaimFloor`]).
    claim_floor: Arc<outbox::ClaimFloor>,
}

/// Connections of the bookkeeping pool (PostgreSQL): the outbox workers and progress writes.
const RELAXED_CONNECTIONS: u32 = 8;

/// How often the bridge checkpoints an SQLite database's write-ahead log ([`Store::checkpoint`]).
pub const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// How long a PostgreSQL connection may sit idle in the pool and still be handed out without a
/// ping (see [`Store::connect`]).
const PING_IDLE_AFTER: Duration = Duration::from_millis(500);

/// The PostgreSQL pool for the conversations' transactions, unless `database.max_connections` says
/// otherwise.
pub const POOL_CONNECTIONS: u32 = 10;

/// The most `database.max_connections` takes (PostgreSQL's own default limit is 100 for everyone).
pub const MAX_POOL_CONNECTIONS: u32 = 500;

/// Read-only connections beside SQLite's one writer (see [`Store::read_conn`]).
const SQLITE_READERS: u32 = 4;

/// Connections for single statements beside SQLite's one transaction connection (see
/// [`Store::conn`]).
const SQLITE_SHARED: u32 = 4;

/// How a transaction starts on SQLite: with the write lock taken at once, so a transaction that
/// reads and then writes can never be refused with SQLITE_BUSY half-way (a deferred `BEGIN` can,
/// when another connection — another process — wrote in between).
const SQLITE_BEGIN: &str = "BEGIN IMMEDIATE";

/// The per-connection settings of every SQLite connection: WAL (readers never block the writer),
/// a busy wait for another process's lock, foreign keys, and a WAL flush only at checkpoints.
async fn sqlite_pragmas(conn: &mut sqlx::AnyConnection) -> std::result::Result<(), sqlx::Error> {
    for pragma in [
        "PRAGMA journal_mode = WAL",
        "PRAGMA busy_timeout = 5000",
        "PRAGMA foreign_keys = ON",
        "PRAGMA synchronous = NORMAL",
        // The WAL is copied back into the database by the bridge's checkpoint task, off the
        // writers' path (`Store::checkpoint`): done inside a commit, as SQLite does by default
        // every 1,000 pages, it put milliseconds on that commit (P2's tail). Past 10,000 pages
        // (about 40 MB: the task not running, a standalone command) a commit still does it.
        "PRAGMA wal_autocheckpoint = 10000",
    ] {
        sqlx::query(pragma).execute(&mut *conn).await?;
    }
    Ok(())
}

/// Whether a pooled SQLite connection may be handed out: not while sqlx still counts it inside a
/// transaction. SQLite ends a transaction by itself on a full disk or an I/O error (`SQLITE_FULL`,
/// `SQLITE_IOERR`); sqlx's rollback of it then fails ("no transaction is active") and leaves its
/// count at one, and every later `BEGIN` on that connection is refused — on the one writer
/// connection, every write of the bridge, for good. Such a connection is closed and a new one
/// opened. (One whose dropped transaction's rollback is merely still queued is closed too: a
/// reconnect, on an error path.)
fn sqlite_usable(conn: &sqlx::AnyConnection) -> bool {
    let usable = !sqlx::Connection::is_in_transaction(conn);
    if !usable {
        tracing::warn!(
            "an SQLite connection still inside a transaction is replaced by a new one (SQLite ended the transaction itself after a full disk or an I/O error, or its rollback was still queued)"
        );
    }
    usable
}

/// Connections beside SQLite's one transaction connection, opened on first use: for single
/// statements, or (`read_only`, `query_only`) for reads that never hold up the writer.
fn sqlite_side_pool(url: &str, masked: &str, max: u32, read_only: bool) -> Result<AnyPool> {
    AnyPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(5))
        .test_before_acquire(false)
        .before_acquire(|conn, _| Box::pin(async move { Ok(sqlite_usable(conn)) }))
        .after_connect(move |conn, _| {
            Box::pin(async move {
                sqlite_pragmas(conn).await?;
                if read_only {
                    sqlx::query("PRAGMA query_only = ON")
                        .execute(&mut *conn)
                        .await?;
                }
                Ok(())
            })
        })
        .connect_lazy(url)
        .map_err(|source| StoreError::Unreachable {
            url: masked.to_owned(),
            source,
        })
}

/// A transaction: state changes and the outbox rows they cause commit together (D1).
#[derive(Debug)]
pub struct Tx {
    inner: Transaction<'static, Any>,
}

impl Tx {
    /// The connection the repository functions take.
    pub fn conn(&mut self) -> &mut AnyConnection {
        &mut self.inner
    }

    /// Commits.
    ///
    /// # Errors
    /// [`StoreError::Query`] when the commit fails (nothing was written).
    pub async fn commit(self) -> Result<()> {
        Ok(self.inner.commit().await?)
    }
}

/// PostgreSQL sends NOTICEs (`relation "_sqlx_migrations" already exists, skipping` on every start
/// and every `history` command) that sqlx would log; only warnings and errors are worth a line.
async fn quiet_notices(conn: &mut sqlx::AnyConnection) -> std::result::Result<(), sqlx::Error> {
    sqlx::query("SET client_min_messages = warning")
        .execute(conn)
        .await
        .map(drop)
}

/// The file an SQLite `url` names (`sqlite://./x.db`, `sqlite:x.db?mode=rwc`), or `None` for
/// another backend or an in-memory database.
#[must_use]
pub fn sqlite_file(url: &str) -> Option<std::path::PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or("");
    if path.is_empty() || path == ":memory:" || url.contains("mode=memory") {
        return None;
    }
    Some(std::path::PathBuf::from(path))
}

impl Store {
    /// Connects to `url` and runs the embedded migrations (D4).
    ///
    /// # Errors
    /// [`StoreError::UnknownScheme`], [`StoreError::Unreachable`], [`StoreError::NewerSchema`] or
    /// [`StoreError::Migrate`] — each naming the URL with its password masked.
    pub async fn open(url: &str) -> Result<Self> {
        Self::open_with(url, POOL_CONNECTIONS).await
    }

    /// [`Store::open`] with `connections` in the PostgreSQL pool for transactions
    /// (`database.max_connections`; SQLite keeps its one writer).
    ///
    /// # Errors
    /// As [`Store::open`].
    pub async fn open_with(url: &str, connections: u32) -> Result<Self> {
        let store = Self::connect_with(url, connections).await?;
        store.migrate().await?;
        Ok(store)
    }

    /// Connects without migrating.
    ///
    /// # Errors
    /// As [`Store::open`], except migration errors.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, POOL_CONNECTIONS).await
    }

    /// [`Store::connect`] with `connections` in the PostgreSQL pool for transactions.
    ///
    /// # Errors
    /// As [`Store::connect`].
    pub async fn connect_with(url: &str, connections: u32) -> Result<Self> {
        sqlx::any::install_default_drivers();
        let masked = mask_url(url);
        let backend = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Backend::Postgres
        } else if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else {
            return Err(StoreError::UnknownScheme { url: masked });
        };
        let url = match backend {
            // Create the file on first use; the embedded default starts from nothing.
            Backend::Sqlite if !url.contains("mode=") => {
                format!("{url}{}mode=rwc", if url.contains('?') { '&' } else { '?' })
            }
            _ => url.to_owned(),
        };
        // SQLite admits one writer at a time. Several pooled connections would contend for it and
        // wait in SQLite's busy handler, which sleeps in milliseconds; one transaction connection
        // instead queues its callers fairly in the pool and hands it on the moment it is free.
        // Single statements (`shared`) and reads that may run long (`read`) have their own.
        let options = AnyPoolOptions::new()
            .max_connections(if backend == Backend::Sqlite {
                1
            } else {
                connections.max(1)
            })
            .acquire_timeout(Duration::from_secs(5))
            // A local file does not go away under an open connection; a ping per acquire would
            // cost the one writer a round trip each time. On PostgreSQL the pool pings every
            // connection it takes back, so one handed on at once is known alive; one that sat idle
            // (the server may have restarted meanwhile) is pinged before use. Under load that is a
            // round trip saved on every transaction (P2).
            .test_before_acquire(false)
            .before_acquire(move |conn, meta| {
                Box::pin(async move {
                    match backend {
                        Backend::Postgres if meta.idle_for >= PING_IDLE_AFTER => {
                            sqlx::Connection::ping(conn).await?;
                        }
                        Backend::Postgres => {}
                        Backend::Sqlite => return Ok(sqlite_usable(conn)),
                    }
                    Ok(true)
                })
            })
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    match backend {
                        Backend::Postgres => quiet_notices(conn).await,
                        Backend::Sqlite => sqlite_pragmas(conn).await,
                    }
                })
            });
        let pool = options
            .connect(&url)
            .await
            .map_err(|source| StoreError::Unreachable {
                url: masked.clone(),
                source,
            })?;
        let file = backend == Backend::Sqlite && sqlite_file(&url).is_some();
        // An in-memory database is private to its one connection: everything goes there.
        let shared = if file {
            sqlite_side_pool(&url, &masked, SQLITE_SHARED, false)?
        } else {
            pool.clone()
        };
        let relaxed = match backend {
            Backend::Sqlite => pool.clone(),
            Backend::Postgres => AnyPoolOptions::new()
                .max_connections(RELAXED_CONNECTIONS)
                .acquire_timeout(Duration::from_secs(5))
                .after_connect(|conn, _| {
                    Box::pin(async move {
                        quiet_notices(conn).await?;
                        sqlx::query("SET synchronous_commit = off")
                            .execute(&mut *conn)
                            .await?;
                        Ok(())
                    })
                })
                .connect_lazy(&url)
                .map_err(|source| StoreError::Unreachable {
                    url: masked.clone(),
                    source,
                })?,
        };
        let read = if file {
            sqlite_side_pool(&url, &masked, SQLITE_READERS, true)?
        } else {
            pool.clone()
        };
        Ok(Self {
            pool,
            shared,
            relaxed,
            read,
            backend,
            url: masked,
            claim_floor: Arc::default(),
        })
    }

    /// The lowest outbox id a claim needs to look at ([`outbox::ClaimFloor`]): found again at most
    /// every [`outbox::FLOOR_EVERY`] by one caller while the others use the last one; always 0 on
    /// SQLite, whose indexes keep no delivered rows to walk.
    ///
    /// # Errors
    /// Database errors (the floor is left as it was).
    pub async fn claim_floor(&self, c: &mut AnyConnection) -> Result<i64> {
        match self.backend {
            Backend::Sqlite => Ok(0),
            Backend::Postgres => self.claim_floor.get(c).await,
        }
    }

    /// Runs the embedded migrations; idempotent.
    ///
    /// # Errors
    /// [`StoreError::NewerSchema`] when the database has migrations this build does not know.
    pub async fn migrate(&self) -> Result<()> {
        let migrator = match self.backend {
            Backend::Postgres => &POSTGRES_MIGRATIONS,
            Backend::Sqlite => &SQLITE_MIGRATIONS,
        };
        let known = migrator.iter().map(|m| m.version).max().unwrap_or(0);
        match migrator.run(&self.pool).await {
            Ok(()) => Ok(()),
            Err(MigrateError::VersionMissing(found)) if found > known => {
                Err(StoreError::NewerSchema {
                    url: self.url.clone(),
                    found,
                    known,
                })
            }
            Err(source) => Err(StoreError::Migrate {
                url: self.url.clone(),
                source,
            }),
        }
    }

    /// SQLite: copies what the write-ahead log holds back into the database as far as no reader
    /// still needs it (`wal_checkpoint(PASSIVE)`), on a side connection, never waiting for the
    /// writer. Nothing on PostgreSQL. The bridge runs it every [`CHECKPOINT_EVERY`].
    ///
    /// # Errors
    /// [`StoreError::Query`] when it cannot run.
    pub async fn checkpoint(&self) -> Result<()> {
        if self.backend == Backend::Sqlite {
            let mut c = self.shared.acquire().await?;
            sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                .execute(&mut *c)
                .await?;
        }
        Ok(())
    }

    /// Which backend this is.
    #[must_use]
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The URL, password masked.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The pool for one-statement operations (on an SQLite file not the transaction connection).
    #[must_use]
    pub fn statements(&self) -> &AnyPool {
        &self.shared
    }

    /// A pooled connection for a few statements that need not be atomic: reads that must see the
    /// last commit, and code that holds a connection while it begins a transaction. Writes go
    /// through [`Store::write_conn`] (or [`Store::relaxed_conn`]): on an SQLite file this is a
    /// connection beside the one writer, and a write here would wait for SQLite's lock in its busy
    /// handler, which sleeps 1, 2, 5, 10 … 100 ms between tries.
    ///
    /// # Errors
    /// [`StoreError::Query`] when no connection can be had.
    pub async fn conn(&self) -> Result<sqlx::pool::PoolConnection<Any>> {
        Ok(self.shared.acquire().await?)
    }

    /// A pooled connection for a few writes that need not be atomic (and the reads among them). On
    /// an SQLite file it is the one transaction connection, so the writes queue with the
    /// transactions in the pool, fairly and without a sleep, instead of contending with them for
    /// SQLite's write lock; elsewhere the main pool. Held for its statements only: whoever holds
    /// it must not begin a transaction or ask for another one meanwhile (on SQLite that waits for
    /// itself until the pool's timeout).
    ///
    /// # Errors
    /// [`StoreError::Query`] when no connection can be had.
    pub async fn write_conn(&self) -> Result<sqlx::pool::PoolConnection<Any>> {
        Ok(self.pool.acquire().await?)
    }

    /// A connection for reads only (history, the UI, metrics): on an SQLite file one of its
    /// read-only connections, which see the last commit and never hold up the writer; elsewhere
    /// the main pool. A write on it fails.
    ///
    /// # Errors
    /// [`StoreError::Query`] when no connection can be had.
    pub async fn read_conn(&self) -> Result<sqlx::pool::PoolConnection<Any>> {
        Ok(self.read.acquire().await?)
    }

    /// A transaction on `pool`: on SQLite it takes the write lock at once ([`SQLITE_BEGIN`]).
    async fn begin_on(&self, pool: &AnyPool) -> Result<Tx> {
        let inner = match self.backend {
            Backend::Sqlite => pool.begin_with(SQLITE_BEGIN).await?,
            Backend::Postgres => pool.begin().await?,
        };
        Ok(Tx { inner })
    }

    /// Begins a transaction.
    ///
    /// # Errors
    /// [`StoreError::Query`] when the database is unreachable.
    pub async fn begin(&self) -> Result<Tx> {
        self.begin_on(&self.pool).await
    }

    /// A connection for delivery bookkeeping whose commits may be lost by a database crash (see
    /// the `relaxed` field): claims, "delivered" marks, retries. Never for state or intents. On
    /// SQLite the one transaction connection, as for [`Store::write_conn`] (and under the same
    /// rule: never held while beginning a transaction).
    ///
    /// # Errors
    /// [`StoreError::Query`] when no connection can be had.
    pub async fn relaxed_conn(&self) -> Result<sqlx::pool::PoolConnection<Any>> {
        Ok(self.relaxed.acquire().await?)
    }

    /// A transaction on the bookkeeping connections (see [`Store::relaxed_conn`]).
    ///
    /// # Errors
    /// [`StoreError::Query`] when the database is unreachable.
    pub async fn relaxed_begin(&self) -> Result<Tx> {
        self.begin_on(&self.relaxed).await
    }

    /// Whether the database answers (for `/readyz`).
    pub async fn ping(&self) -> bool {
        match self.backend {
            // A read-only PostgreSQL (a demoted primary, `default_transaction_read_only`) answers
            // `SELECT 1` but takes no write: not ready.
            Backend::Postgres => {
                sqlx::query_scalar::<_, String>("SELECT current_setting('transaction_read_only')")
                    .only(&self.shared)
                    .await
                    .is_ok_and(|ro| ro == "off")
            }
            Backend::Sqlite => sqlx::query("SELECT 1").execute(&self.shared).await.is_ok(),
        }
    }

    /// Closes the pools.
    pub async fn close(&self) {
        self.read.close().await;
        self.relaxed.close().await;
        self.shared.close().await;
        self.pool.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_masked_in_urls() {
        assert_eq!(
            mask_url("postgres://bridge:s3cret@db:5432/cb"),
            "postgres://bridge:***@db:5432/cb"
        );
        assert_eq!(
            mask_url("postgres://bridge@db/cb"),
            "postgres://bridge@db/cb"
        );
        assert_eq!(
            mask_url("postgres://db/cb?user=x&password=s3cret"),
            "postgres://db/cb?user=x&password=***"
        );
        assert_eq!(
            mask_url("sqlite://./chat-bridge.db"),
            "sqlite://./chat-bridge.db"
        );
        assert_eq!(mask_url("postgres://u:p%40ss@h/d"), "postgres://u:***@h/d");
    }

    #[test]
    fn s2_a_store_error_never_carries_a_password_holding_slash_or_at() {
        for url in [
            "postgres://bridge:pa/ss@db:5432/cb",
            "postgres://bridge:p@ss/w@db:5432/cb",
        ] {
            let masked = mask_url(url);
            assert!(
                masked.starts_with("postgres://bridge:***@db:5432/cb"),
                "{masked}"
            );
            assert!(!masked.contains("ss"), "{masked}");
        }
    }
}
