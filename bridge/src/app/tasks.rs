//! The bridge's own background tasks — the HTTP server, the inbox pruning — and the bounded wait
//! shutdown uses.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::Clock;
use crate::config::Config;
use crate::replica::Status;
use crate::store::Store;

/// How long handled inbound event ids are kept for deduplication: platforms retry within minutes
/// (Slack) or replay within a gateway session (Discord).
pub const INBOX_KEEP: Duration = Duration::from_secs(24 * 3600);

/// Forgets handled inbox entries older than [`INBOX_KEEP`] by `clock`, hourly, until `stop`.
pub(super) async fn prune_inbox(store: Store, clock: Arc<dyn Clock>, stop: CancellationToken) {
    loop {
        match prune_inbox_once(&store, clock.as_ref()).await {
            Ok(n) if n > 0 => tracing::debug!(n, "pruned handled inbound events"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "could not prune handled inbound events"),
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(Duration::from_secs(3600)) => {}
        }
    }
}

/// Checkpoints an SQLite database's write-ahead log every [`crate::store::CHECKPOINT_EVERY`], off
/// the writers' path, until `stop` (PostgreSQL: returns at once).
pub(super) async fn checkpoint_wal(store: Store, stop: CancellationToken) {
    if store.backend() != crate::store::Backend::Sqlite {
        return;
    }
    let mut failing = false;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(crate::store::CHECKPOINT_EVERY) => {}
        }
        match store.checkpoint().await {
            Ok(()) => failing = false,
            // Said once per spell: past 10,000 pages a commit checkpoints anyway.
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "could not checkpoint the SQLite write-ahead log; commits will do it");
            }
            Err(_) => {}
        }
    }
}

/// Forgets handled inbox entries received more than [`INBOX_KEEP`] before `clock`'s now; how many.
///
/// # Errors
/// Store errors.
pub async fn prune_inbox_once(
    store: &Store,
    clock: &dyn Clock,
) -> Result<u64, crate::store::StoreError> {
    let keep = i64::try_from(INBOX_KEEP.as_millis()).unwrap_or(i64::MAX);
    let mut c = store.write_conn().await?;
    crate::store::inbound::prune(&mut c, clock.now_ms().saturating_sub(keep)).await
}

/// The HTTP server of a replica (it runs from start-up to exit, standby or active).
#[derive(Debug)]
pub(super) struct Http {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Http {
    pub(super) async fn start(
        cfg: &Config,
        store: &Store,
        status: &Arc<Status>,
        tracker: &TaskTracker,
    ) -> anyhow::Result<Option<(Self, std::net::SocketAddr)>> {
        let Some(listen) = &cfg.http.listen else {
            return Ok(None);
        };
        let listener = tokio::net::TcpListener::bind(listen.as_str())
            .await
            .with_context(|| format!("http.listen {listen}"))?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let mut state =
            crate::http::HttpState::new(store.clone(), status.clone(), cfg.http.api_token.clone())
                .with_login_limit(&cfg.http)?;
        if cfg.http.ui {
            let redactor = crate::core::redact::Redactor::new(&cfg.redact.patterns)
                .context("redact.patterns")?;
            state = state.with_ui(crate::ui::Ui::new(&cfg.http, redactor, stop.clone())?);
        }
        let router = crate::http::router(state);
        let stop_http = stop.clone();
        let task = tracker.spawn(async move {
            // The peer's address: wrong sign-in tokens are limited per client.
            let service = router.into_make_service_with_connect_info::<std::net::SocketAddr>();
            let _ = axum::serve(listener, service)
                .with_graceful_shutdown(async move { stop_http.cancelled().await })
                .await;
        });
        tracing::info!(%addr, ui = cfg.http.ui, "HTTP listening: /healthz /readyz /metrics /api/v1");
        Ok(Some((Self { stop, task }, addr)))
    }

    /// Stops the server, waiting for it until `deadline` at most.
    pub(super) async fn stop(self, deadline: Instant) {
        self.stop.cancel();
        bounded("the HTTP server", deadline, self.task).await;
    }
}

/// `what` awaited until `deadline`; `None` (logged) when it had not ended by then.
pub async fn bounded<F: std::future::IntoFuture>(
    what: &str,
    deadline: Instant,
    what_to_wait_for: F,
) -> Option<F::Output> {
    match tokio::time::timeout_at(deadline, what_to_wait_for).await {
        Ok(out) => Some(out),
        Err(_) => {
            tracing::warn!("shutdown: {what} did not end in time; abandoned");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::store::inbound;

    #[tokio::test]
    async fn s2_debug_of_the_http_state_never_shows_the_api_token() {
        let dir = tempfile::tempdir().expect("tmp");
        let url = format!("sqlite://{}", dir.path().join("http.db").display());
        let store = Store::open(&url).await.expect("store");
        let state = crate::http::HttpState::new(
            store.clone(),
            Arc::default(),
            Some("api-token-424242".into()),
        );
        let debug = format!("{state:?}");
        assert!(!debug.contains("424242"), "{debug}");
        drop(state);
        store.close().await;
    }

    #[tokio::test]
    async fn d2_handled_inbox_entries_are_kept_exactly_the_keep_window_and_unhandled_ones_always() {
        let dir = tempfile::tempdir().expect("tmp");
        let url = format!("sqlite://{}", dir.path().join("inbox.db").display());
        let store = Store::open(&url).await.expect("store");
        let t0 = 1_800_000_000_000;
        {
            let mut c = store.conn().await.expect("conn");
            inbound::record(&mut c, "slack", "handled", "{}", t0)
                .await
                .expect("record");
            inbound::mark_handled(&mut c, "slack", "handled", t0)
                .await
                .expect("handled");
            inbound::record(&mut c, "slack", "waiting", "{}", t0)
                .await
                .expect("record");
        }
        let keep = i64::try_from(INBOX_KEEP.as_millis()).expect("ms");
        let clock = ManualClock::at(t0 + keep);
        assert_eq!(
            prune_inbox_once(&store, &clock).await.expect("prune"),
            0,
            "kept for the whole window: a platform retry within it is still recognised (D2)"
        );
        clock.advance(Duration::from_millis(1));
        assert_eq!(prune_inbox_once(&store, &clock).await.expect("prune"), 1);
        clock.advance(Duration::from_secs(30 * 24 * 3600));
        assert_eq!(
            prune_inbox_once(&store, &clock).await.expect("prune"),
            0,
            "an event not yet handled is never forgotten"
        );
        let mut c = store.conn().await.expect("conn");
        assert_eq!(
            inbound::unhandled(&mut c).await.expect("unhandled").len(),
            1
        );
        drop(c);
        store.close().await;
    }
}
