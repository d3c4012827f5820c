//! One replica's part in D5: exactly one replica on a database is active (holds the leader lease:
//! a Postgres advisory lock on a dedicated connection); the others stand by, serve `/healthz`,
//! `/readyz` (role `standby`) and the history API, and try again every `service.leader_retry`.
//! A replica that is killed loses its connection and with it the lock, so a standby takes over
//! within one retry interval.
//!
//! The active replica checks its lease every `service.leader_check`. When the lease connection is
//! lost (a database restart), it takes the lock again on a new connection and carries on; only if
//! another replica got it first does it stop acting at once ([`Watch::lost`]) — one active replica,
//! never two.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::channel::Channel;
use crate::core::Core;
use crate::store::leader::{self, LOCK_KEY, Lease};
use crate::store::{Store, StoreError};

/// What this replica is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Role {
    /// Opening the store, not yet contending.
    Starting = 0,
    /// Waiting for the leader lease.
    Standby = 1,
    /// Holding the lease: connected to the daemon and the chat platform.
    Active = 2,
    /// Shutting down (SIGTERM): draining, taking no new work.
    Stopping = 3,
}

impl Role {
    /// The name `/readyz` reports.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Standby => "standby",
            Self::Active => "active",
            Self::Stopping => "stopping",
        }
    }

    fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::Standby,
            2 => Self::Active,
            3 => Self::Stopping,
            _ => Self::Starting,
        }
    }
}

/// The replica's state as `/readyz` and `/metrics` see it.
#[derive(Default)]
pub struct Status {
    role: AtomicU8,
    /// The platform sends its requests to this process (Slack's HTTP Events API): a standby, which
    /// does not listen for them, must not be sent any.
    requests_only_when_active: std::sync::atomic::AtomicBool,
    cores: OnceLock<Vec<Arc<Core>>>,
    channel: OnceLock<Arc<dyn Channel>>,
    live: Arc<crate::core::live::Board>,
}

impl std::fmt::Debug for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Status")
            .field("role", &self.role())
            .finish_non_exhaustive()
    }
}

/// How long `/readyz` waits for the store before calling it unreachable.
const STORE_PING_LIMIT: Duration = Duration::from_secs(2);

impl Status {
    /// The current role.
    #[must_use]
    pub fn role(&self) -> Role {
        Role::from_u8(self.role.load(Ordering::SeqCst))
    }

    /// Changes the role.
    pub fn set_role(&self, role: Role) {
        self.role.store(role as u8, Ordering::SeqCst);
        metrics::gauge!("chatbridge_replica_active").set(if role == Role::Active {
            1.0
        } else {
            0.0
        });
    }

    /// Says that the platform sends requests to this process, so only the active replica may take
    /// traffic (see [`Status::probe`]).
    pub fn set_requests_only_when_active(&self, yes: bool) {
        self.requests_only_when_active.store(yes, Ordering::SeqCst);
    }

    /// `/readyz`: [`Status::readiness`], except that a standby whose platform sends requests to
    /// the process (Slack's HTTP Events API) says it takes no traffic, so that a load balancer sends
    /// Slack's events and clicks to the active replica only. `chatbridge_ready` keeps the health
    /// (a healthy standby is ready), so no alert fires for it.
    pub async fn probe(&self, store: &Store) -> (bool, Value) {
        let (ready, mut body) = self.readiness(store).await;
        if ready
            && self.role() == Role::Standby
            && self.requests_only_when_active.load(Ordering::SeqCst)
        {
            body["ready"] = json!(false);
            body["traffic"] =
                json!("standby: only the active replica takes the platform's requests");
            return (false, body);
        }
        (ready, body)
    }

    /// The open turns this replica runs (empty while it stands by), for the live view.
    #[must_use]
    pub fn live(&self) -> &Arc<crate::core::live::Board> {
        &self.live
    }

    /// The cores (one per project) and channel of the active replica, for readiness.
    pub fn attach(&self, cores: Vec<Arc<Core>>, channel: Arc<dyn Channel>) {
        let _ = self.cores.set(cores);
        let _ = self.channel.set(channel);
    }

    /// Whether the daemon is connected — every project's (`None` when this replica is not
    /// active).
    #[must_use]
    pub fn daemon_connected(&self) -> Option<bool> {
        self.cores
            .get()
            .map(|cs| cs.iter().all(|c| c.daemon_connected.load(Ordering::SeqCst)))
    }

    /// Each project's daemon link, when `[[projects]]` is configured (empty otherwise, and on a
    /// standby).
    #[must_use]
    pub fn project_daemons(&self) -> Vec<(String, bool)> {
        self.cores.get().map_or_else(Vec::new, |cs| {
            cs.iter()
                .filter(|c| c.cfg.project.is_some())
                .map(|c| {
                    (
                        c.project().to_owned(),
                        c.daemon_connected.load(Ordering::SeqCst),
                    )
                })
                .collect()
        })
    }

    /// Readiness and the JSON body saying why: a standby is ready when the store answers (it can
    /// take over); the active replica when the store, the daemon and the chat platform all do.
    pub async fn readiness(&self, store: &Store) -> (bool, Value) {
        let role = self.role();
        let store_ok = tokio::time::timeout(STORE_PING_LIMIT, store.ping())
            .await
            .unwrap_or(false);
        let daemon = self.daemon_connected();
        let connected = self.channel.get().map(|c| (c.platform(), c.connected()));
        let channel_ok = connected.is_none_or(|(_, up)| up);
        let channel =
            connected.map(|(platform, up)| json!({"platform": platform, "connected": up}));
        // Each platform served, by name, so that a process on several says which one is down.
        let platforms: Vec<Value> = self.channel.get().map_or_else(Vec::new, |c| {
            c.each_connected()
                .into_iter()
                .map(|(platform, up)| json!({"platform": platform, "connected": up}))
                .collect()
        });
        // With several projects, one project's daemon being down does not take the replica out of
        // service (the others still answer, and a platform that sends its requests to the process
        // must keep reaching them): it is named in `projects` and `daemons_down` instead.
        let projects = self.project_daemons();
        let daemon_ok = if projects.len() > 1 {
            projects.iter().any(|(_, up)| *up)
        } else {
            daemon == Some(true)
        };
        let ready = match role {
            Role::Standby => store_ok,
            Role::Active => store_ok && daemon_ok && channel_ok,
            Role::Starting | Role::Stopping => false,
        };
        let mut body = json!({"ready": ready, "role": role.name(), "store": store_ok, "daemon": daemon, "channel": channel, "platforms": platforms});
        if !projects.is_empty() {
            body["projects"] = projects
                .iter()
                .map(|(name, up)| json!({"project": name, "daemon": up}))
                .collect();
            body["daemons_down"] = projects
                .iter()
                .filter(|(_, up)| !up)
                .map(|(name, _)| json!(name))
                .collect();
        }
        (ready, body)
    }
}

/// Stands by until this replica holds the leader lease (`None` if `stop` comes first).
///
/// # Errors
/// Never for an unreachable database (it keeps trying and says so); only for what retrying cannot
/// fix.
pub async fn acquire(
    store: &Store,
    status: &Status,
    retry: Duration,
    stop: &CancellationToken,
) -> Result<Option<Lease>, StoreError> {
    status.set_role(Role::Standby);
    let mut said = false;
    loop {
        match leader::try_acquire(store, LOCK_KEY).await {
            Ok(Some(lease)) => {
                tracing::info!("this replica holds the leader lease: active");
                return Ok(Some(lease));
            }
            Ok(None) => {
                if !said {
                    tracing::info!(
                        retry_secs = retry.as_secs_f64(),
                        "another replica is active; standing by"
                    );
                    said = true;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot reach the database to take the leader lease; retrying")
            }
        }
        tokio::select! {
            () = stop.cancelled() => return Ok(None),
            () = tokio::time::sleep(retry) => {}
        }
    }
}

/// The lease holder's watch.
#[derive(Debug)]
pub struct Watch {
    /// Cancelled when another replica took the lease: stop acting at once.
    pub lost: CancellationToken,
    task: JoinHandle<()>,
    stop: CancellationToken,
}

impl Watch {
    /// Watches `lease` every `every`, on `tracker` (so shutdown waits for it within its bound).
    #[must_use]
    pub fn start(
        store: Store,
        lease: Lease,
        every: Duration,
        tracker: &tokio_util::task::TaskTracker,
    ) -> Self {
        let lost = CancellationToken::new();
        let stop = CancellationToken::new();
        let task = tracker.spawn(watch(store, lease, every, lost.clone(), stop.clone()));
        Self { lost, task, stop }
    }

    /// Gives the lease up (shutdown).
    pub async fn release(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

async fn watch(
    store: Store,
    mut lease: Lease,
    every: Duration,
    lost: CancellationToken,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            () = stop.cancelled() => {
                lease.release().await;
                return;
            }
            () = tokio::time::sleep(every) => {}
        }
        if lease.check().await {
            continue;
        }
        tracing::warn!("the leader lease's database connection is gone; taking the lease again");
        loop {
            match leader::try_acquire(&store, LOCK_KEY).await {
                Ok(Some(again)) => {
                    tracing::info!("leader lease taken again; still active");
                    lease = again;
                    break;
                }
                Ok(None) => {
                    tracing::error!(
                        "another replica took the leader lease while this one could not reach the database; stopping"
                    );
                    lost.cancel();
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "database unreachable; still acting as the active replica and retrying");
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(every) => {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_standby_takes_no_traffic_when_the_platform_sends_requests_but_stays_healthy() {
        let dir = tempfile::tempdir().expect("tmp");
        let url = format!("sqlite://{}", dir.path().join("probe.db").display());
        let store = Store::open(&url).await.expect("store");
        let status = Status::default();
        status.set_role(Role::Standby);

        let (probe, _) = status.probe(&store).await;
        assert!(
            probe,
            "a standby of a platform that connects out (Socket Mode, Discord) is ready"
        );

        status.set_requests_only_when_active(true);
        let (probe, body) = status.probe(&store).await;
        assert!(
            !probe,
            "Slack's HTTP Events go to the active replica only: {body}"
        );
        assert_eq!(body["role"], "standby");
        assert!(
            body["traffic"]
                .as_str()
                .is_some_and(|t| t.contains("active")),
            "{body}"
        );
        let (healthy, _) = status.readiness(&store).await;
        assert!(
            healthy,
            "chatbridge_ready keeps the health: no alert for a healthy standby"
        );
        store.close().await;
    }
}
