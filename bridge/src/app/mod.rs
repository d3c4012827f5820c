//! The bridge around one channel: `Application::build` connects the store, each project's daemon
//! (the built-in shell agent when no URL is configured) and core, and the outbox;
//! [`Application::accept`] routes each chat event to its project's core; [`Application::shutdown`]
//! stops it within a bound. Which platforms feed it, and the process around it, is `startup.rs`.
//!
//! Without `[[projects]]` there is one core (the implicit project) and every event goes to it, as
//! before projects existed. With them, each project has its own core and daemon connection (its
//! own reconnect and liveness); an event goes to the core owning its conversation, else to the
//! project its channel is bound to, else to `default_project`, else nowhere (counted).
//!
//! Every task it spawns runs on one [`TaskTracker`] and ends on its cancellation token; shutdown
//! cancels, closes the tracker and waits a bounded time (`service.drain_timeout` plus
//! [`SHUTDOWN_GRACE`]), then abandons what is still running and closes the store.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use daemon_client::{AgentCommand, ClientConfig, DaemonClient, LivenessConfig};
use secrecy::ExposeSecret;
use shell_agent::{AgentConfig, ShellAgent};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::channel::Channel;
use crate::clock::SystemClock;
use crate::config::Config;
use crate::core::redact::Redactor;
use crate::core::{Core, CoreConfig};
use crate::outbox_worker;
use crate::replica::{self, Role, Status, Watch};
use crate::store::Store;
use crate::store::outbox::RetryPolicy;
use tasks::{Http, checkpoint_wal, prune_inbox};
pub use tasks::{INBOX_KEEP, bounded, prune_inbox_once};

mod tasks;

/// Events recorded ahead of the one being handed on (see [`Application::pump`]); past that, recording
/// waits.
const RECORDED_AHEAD: usize = 1024;

/// Events being recorded at once (see [`Application::pump`]): one after another, a burst of 385 took
/// longer than Slack's 3 s for its last ones on a loaded machine.
const RECORDING_AT_ONCE: usize = 8;

/// How long shutdown waits, beyond `service.drain_timeout`, for tasks to end before it abandons
/// them and closes the store.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

const LEASE_LOST: &str = "another replica took the leader lease while this one could not reach the database; stopped acting (restart it to stand by)";

/// A running bridge.
pub struct Application {
    /// The core of the default project (the one core of the one-project configuration).
    pub core: Arc<Core>,
    /// The store.
    pub store: Store,
    /// This replica's role and readiness.
    pub status: Arc<Status>,
    projects: Projects,
    agents: Vec<ShellAgent>,
    clients: Vec<DaemonClient>,
    stop: CancellationToken,
    tracker: TaskTracker,
    outbox: JoinHandle<()>,
    routers: Vec<JoinHandle<()>>,
    http: Option<Http>,
    lease: Watch,
    /// Cancelled when a project's core cannot go on ([`Core::fatal`]).
    fatal: CancellationToken,
    drain_timeout: Duration,
    grace: Duration,
    /// Where the default project's daemon is (for the banner).
    pub daemon_url: String,
    /// Where the HTTP server listens, when `http.listen` is set.
    pub http_addr: Option<std::net::SocketAddr>,
}

/// The projects served: a core each (its own daemon connection), and where arrivals go.
struct Projects {
    cores: Vec<Arc<Core>>,
    routes: crate::config::Routes,
    channel: Arc<dyn Channel>,
    /// `[projects.access] allowed_users`, for the projects that have one.
    allowed: std::collections::HashMap<String, Vec<String>>,
    /// Conversations of a project no longer configured, whose channel serves no project, told so
    /// in this run (each is told once).
    told: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl Projects {
    /// The core that takes `m`: in the one-project configuration the one core; otherwise the core
    /// of the project the conversation `m` belongs to (so a conversation has one runner, in one
    /// core), else of the project its channel (a thread's parent channel) is bound to, else of
    /// `default_project`; `None`: nobody's. A conversation whose project is no longer configured
    /// goes where its channel goes now: it is moved to that project (a new daemon session, the
    /// thread told once), or, when its channel serves no project, the thread is told once that it
    /// is not served here.
    async fn core_for(&self, store: &Store, m: &crate::channel::Inbound) -> Option<Arc<Core>> {
        if let [only] = self.cores.as_slice()
            && only.cfg.project.is_none()
        {
            return Some(only.clone());
        }
        let key = crate::store::conversations::Key {
            platform: &m.platform,
            workspace: &m.target.workspace,
            channel: &m.target.channel,
            thread: &m.target.thread,
        };
        let found = match store.conn().await {
            Ok(mut c) => crate::store::conversations::find(&mut c, &key).await,
            Err(e) => Err(e),
        };
        let gone = match found {
            Ok(Some(conv)) => {
                if let Some(core) = self.cores.iter().find(|c| c.project() == conv.project) {
                    return Some(core.clone());
                }
                Some(conv)
            }
            Ok(None) => None,
            // The channel's project then: the core retries the store itself.
            Err(e) => {
                tracing::warn!(error = %e, "could not look up a chat event's conversation");
                None
            }
        };
        let channel = self
            .channel
            .parent_channel(&m.platform, &m.target.channel)
            .unwrap_or_else(|| m.target.channel.clone());
        let to = self
            .routes
            .project_for(&m.platform, Some(&channel))
            .and_then(|name| self.cores.iter().find(|c| c.project() == name).cloned());
        if let Some(conv) = gone
            && !self.project_gone(&conv, to.as_ref()).await
        {
            // Not moved: its old session must not run on another project's daemon.
            return None;
        }
        to
    }

    /// The project of the conversation `m` belongs to, when it is stored.
    async fn project_of(&self, store: &Store, m: &crate::channel::Inbound) -> Option<String> {
        let key = crate::store::conversations::Key {
            platform: &m.platform,
            workspace: &m.target.workspace,
            channel: &m.target.channel,
            thread: &m.target.thread,
        };
        let mut c = store.conn().await.ok()?;
        crate::store::conversations::find(&mut c, &key)
            .await
            .ok()
            .flatten()
            .map(|conv| conv.project)
    }

    /// A conversation of a project no longer configured: moved to `to`'s project, or (no project
    /// takes its channel) its thread told, once per run, that it is not served here.
    /// `false` when it could not be moved.
    async fn project_gone(
        &self,
        conv: &crate::store::conversations::Conversation,
        to: Option<&Arc<Core>>,
    ) -> bool {
        let Some(teller) = to.or_else(|| self.cores.first()) else {
            return false;
        };
        if to.is_none() && !crate::core::lock(&self.told).insert(conv.id.clone()) {
            return false;
        }
        tracing::info!(
            conversation = %conv.id,
            from = %conv.project,
            to = to.map(|c| c.project()),
            "a conversation of a project no longer configured"
        );
        if let Err(e) = teller.project_gone(conv, to.map(|c| c.project())).await {
            tracing::warn!(error = %e, conversation = %conv.id, "could not move a conversation of a project no longer configured");
            if to.is_none() {
                crate::core::lock(&self.told).remove(&conv.id);
            }
            return false;
        }
        true
    }
}

/// What every project's start shares.
struct Shared<'a> {
    cfg: &'a Config,
    channel: &'a Arc<dyn Channel>,
    store: &'a Store,
    redactor: &'a Redactor,
    wake: &'a Arc<Notify>,
    stop: &'a CancellationToken,
    /// The board every project's conversations publish their open turns on (the live view).
    live: &'a Arc<crate::core::live::Board>,
}

/// One project, connected: its core, its daemon connection and (when it runs one) its built-in
/// shell agent.
struct Started {
    core: Arc<Core>,
    client: DaemonClient,
    events: daemon_client::EventStream,
    agent: Option<ShellAgent>,
    url: String,
}

impl std::fmt::Debug for Application {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Application")
            .field("daemon_url", &self.daemon_url)
            .finish_non_exhaustive()
    }
}

impl Application {
    /// Connects everything and starts the background tasks; open turns from a previous run are
    /// resumed (D3). Waits as a standby while another replica is active.
    ///
    /// # Errors
    /// The first thing that could not start, in words for the operator.
    pub async fn build(cfg: &Config, channel: Arc<dyn Channel>) -> anyhow::Result<Self> {
        Self::build_until(cfg, channel, &CancellationToken::new())
            .await?
            .context("stopped before this replica became active")
    }

    /// [`Application::build`], or `None` when `stop` comes while this replica stands by.
    ///
    /// # Errors
    /// The first thing that could not start, in words for the operator.
    pub async fn build_until(
        cfg: &Config,
        channel: Arc<dyn Channel>,
        stop_waiting: &CancellationToken,
    ) -> anyhow::Result<Option<Self>> {
        daemon_client::install_crypto_provider();
        crate::metrics::set_projects(cfg.projects.iter().map(|p| p.name.clone()));
        for (platform, _) in channel.each_connected() {
            crate::metrics::register(platform);
        }
        let store = Store::connect_with(&cfg.database.url, cfg.database.max_connections).await?;
        if let Err(e) = starting("migrating the database", || store.migrate()).await {
            store.close().await;
            return Err(e.into());
        }
        let status = Arc::new(Status::default());
        status.set_requests_only_when_active(channel.capabilities().takes_requests);
        let tracker = TaskTracker::new();
        let http = match Http::start(cfg, &store, &status, &tracker).await {
            Ok(http) => http,
            Err(e) => {
                bounded(
                    "closing the store",
                    Instant::now() + SHUTDOWN_GRACE,
                    store.close(),
                )
                .await;
                return Err(e);
            }
        };
        let (http, http_addr) = match http {
            Some((h, a)) => (Some(h), Some(a)),
            None => (None, None),
        };
        let lease =
            match replica::acquire(&store, &status, cfg.service.leader_retry, stop_waiting).await {
                Ok(Some(lease)) => lease,
                other => {
                    if let Some(http) = http {
                        http.stop(Instant::now() + SHUTDOWN_GRACE).await;
                    }
                    bounded(
                        "closing the store",
                        Instant::now() + SHUTDOWN_GRACE,
                        store.close(),
                    )
                    .await;
                    return match other {
                        Ok(_) => Ok(None),
                        Err(e) => Err(e.into()),
                    };
                }
            };
        let lease = Watch::start(store.clone(), lease, cfg.service.leader_check, &tracker);
        let activated = Self::activate(
            cfg,
            channel,
            store.clone(),
            status.clone(),
            lease,
            tracker,
            stop_waiting,
        )
        .await;
        match activated {
            Ok(Some(mut app)) => {
                app.http = http;
                app.http_addr = http_addr;
                Ok(Some(app))
            }
            other => {
                let deadline = Instant::now() + SHUTDOWN_GRACE;
                if let Some(http) = http {
                    http.stop(deadline).await;
                }
                bounded("closing the store", deadline, store.close()).await;
                other.map(|_| None)
            }
        }
    }

    async fn activate(
        cfg: &Config,
        channel: Arc<dyn Channel>,
        store: Store,
        status: Arc<Status>,
        lease: Watch,
        tracker: TaskTracker,
        stop_waiting: &CancellationToken,
    ) -> anyhow::Result<Option<Self>> {
        {
            // This process is the one active replica: claims left by a previous run are void.
            let released = starting("releasing outbox claims", || async {
                let mut c = store.write_conn().await?;
                crate::store::outbox::release_claims(&mut c).await
            })
            .await?;
            if released > 0 {
                tracing::info!(released, "released outbox claims left by a previous run");
            }
        }
        let redactor = Redactor::new(&cfg.redact.patterns)
            .context("redact.patterns")?
            .with_secrets(
                cfg.secrets()
                    .into_iter()
                    .filter_map(|(_, secret)| secret.map(ExposeSecret::expose_secret)),
            );
        let stop = CancellationToken::new();
        let wake = Arc::new(Notify::new());
        let named = !cfg.projects.is_empty();
        let default_name = cfg.default_project.clone().unwrap_or_else(|| {
            cfg.projects.first().map_or_else(
                || crate::config::IMPLICIT_PROJECT.to_owned(),
                |p| p.name.clone(),
            )
        });
        let shared = Shared {
            cfg,
            channel: &channel,
            store: &store,
            redactor: &redactor,
            wake: &wake,
            stop: &stop,
            live: status.live(),
        };
        // Every project's daemon is connected at once: a slow one does not hold the others up.
        let connecting = cfg
            .resolved_projects()
            .into_iter()
            .map(|p| shared.start_project(p, named));
        let started = tokio::select! {
            s = futures_util::future::join_all(connecting) => s,
            () = stop_waiting.cancelled() => {
                tracing::info!("stopped while connecting to the agent");
                return Ok(None);
            }
        };
        let mut projects = Vec::new();
        let mut failed = None;
        for s in started {
            match s {
                Ok(p) => projects.push(p),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failed {
            stop.cancel();
            for p in projects {
                p.client.close();
                if let Some(agent) = p.agent {
                    bounded(
                        "stopping the built-in shell agent",
                        Instant::now() + SHUTDOWN_GRACE,
                        agent.shutdown(),
                    )
                    .await;
                }
            }
            return Err(e);
        }
        let routes = cfg.routes();
        let first = projects
            .iter()
            .position(|p| p.core.project() == default_name)
            .unwrap_or(0);
        let core = projects[first].core.clone();
        let daemon_url = projects[first].url.clone();
        let mut routers = Vec::new();
        let mut cores = Vec::new();
        let mut clients = Vec::new();
        let mut agents = Vec::new();
        let mut allowed = std::collections::HashMap::new();
        for (p, access) in projects.into_iter().zip(cfg.resolved_projects()) {
            routers.push(tracker.spawn(p.core.clone().route_events(p.events)));
            if !access.access.allowed_users.is_empty() {
                allowed.insert(p.core.project().to_owned(), access.access.allowed_users);
            }
            cores.push(p.core);
            clients.push(p.client);
            agents.extend(p.agent);
        }
        let outbox = tracker.spawn(outbox_worker::run(
            store.clone(),
            channel.clone(),
            wake,
            stop.clone(),
            cfg.service.drain_timeout,
            RetryPolicy::default(),
            cfg.service.outbox_workers,
            Arc::new(SystemClock),
        ));
        status.attach(cores.clone(), channel.clone());
        status.set_role(Role::Active);
        let projects = Projects {
            cores,
            routes,
            channel,
            allowed,
            told: std::sync::Mutex::default(),
        };
        let mut resumed = 0;
        for core in &projects.cores {
            let open = starting("reading open turns", || core.open_turns()).await?;
            resumed += core.resume_open_turns(open).await;
        }
        if resumed > 0 {
            tracing::info!(resumed, "resuming open turns from the previous run");
        }
        starting("closing turns of projects no longer served", || {
            close_unserved_turns(&core, &projects, &store)
        })
        .await?;
        let pending = starting("reading the inbox", || core.unhandled_inbound()).await?;
        let taken = take_unhandled(&core, &projects, &store, pending).await;
        if taken > 0 {
            tracing::info!(
                taken,
                "taking chat events the previous run recorded but did not act on"
            );
        }
        // Only the active replica runs schedules: this is its activation (D5).
        for core in &projects.cores {
            tracker.spawn(crate::schedules::run(
                core.clone(),
                Arc::new(SystemClock),
                cfg.schedules.check_every,
                stop.clone(),
            ));
            if core.cfg.worktrees.is_some() {
                // Idle threads' worktrees are removed by the active replica only (D5).
                tracker.spawn(crate::checkouts::run(
                    core.clone(),
                    Arc::new(SystemClock),
                    cfg.workspace.sweep_every,
                    stop.clone(),
                ));
            }
        }
        // One token for the pump to watch: cancelled when any project's core cannot go on.
        let fatal = CancellationToken::new();
        for core in &projects.cores {
            let (core, fatal, stop) = (core.clone(), fatal.clone(), stop.clone());
            tracker.spawn(async move {
                tokio::select! {
                    () = core.fatal.cancelled() => fatal.cancel(),
                    () = stop.cancelled() => {}
                }
            });
        }
        tracker.spawn(checkpoint_wal(store.clone(), stop.clone()));
        tracker.spawn(prune_inbox(
            store.clone(),
            Arc::new(SystemClock),
            stop.clone(),
        ));
        Ok(Some(Self {
            core,
            projects,
            store,
            status,
            agents,
            clients,
            stop,
            tracker,
            outbox,
            routers,
            http: None,
            lease,
            fatal,
            drain_timeout: cfg.service.drain_timeout,
            grace: SHUTDOWN_GRACE,
            daemon_url,
            http_addr: None,
        }))
    }

    /// Resolves when this replica must stop acting because another took the leader lease.
    pub async fn lease_lost(&self) {
        self.lease.lost.cancelled().await;
    }

    /// Resolves when a project's daemon, first reached after start-up, turned out to be
    /// configured wrongly (another workspace than its `cwd`, a refused token): the bridge stops
    /// with that error, as it would have at start-up.
    async fn fatal(&self) -> String {
        self.fatal.cancelled().await;
        let Some(core) = self.projects.cores.iter().find(|c| c.fatal.is_cancelled()) else {
            return "connecting to the agent daemon".to_owned();
        };
        let reason = core.fatal_reason().unwrap_or_default();
        if core.cfg.project.is_some() {
            format!(
                "connecting to the agent daemon of project {}: {reason}",
                core.project()
            )
        } else {
            format!("connecting to the agent daemon: {reason}")
        }
    }

    /// Waits for the work in hand to end — every turn finished and its messages delivered — or
    /// `stop`: the input ended (the console's stdin closed) and the bridge exits once it is done.
    ///
    /// # Errors
    /// The store failing, or another replica taking the leader lease.
    pub async fn finish(&self, stop: &CancellationToken) -> anyhow::Result<()> {
        // Nobody is left to click an approval.
        for core in &self.projects.cores {
            core.input_ended().await;
        }
        let idle =
            futures_util::future::join_all(self.projects.cores.iter().map(|c| c.wait_idle()));
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            () = self.lease.lost.cancelled() => anyhow::bail!(LEASE_LOST),
            reason = self.fatal() => anyhow::bail!(reason),
            _ = idle => {}
        }
        while !outbox_worker::drained(&self.store).await? {
            tokio::select! {
                () = stop.cancelled() => return Ok(()),
                () = self.lease.lost.cancelled() => anyhow::bail!(LEASE_LOST),
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
        Ok(())
    }

    /// Hands one inbound event to the core: records it in the inbox (then tells the platform, when
    /// it waits for that) and gives it to its conversation. While the database is unreachable each
    /// step is retried until it is taken or `stop` comes; an event recorded but not handed on stays
    /// in the inbox and is taken at the next start.
    pub async fn accept(
        &self,
        arrival: impl Into<crate::channel::Arrival>,
        stop: &CancellationToken,
    ) {
        let at = crate::store::inbound::arrival_stamp();
        if let Some((core, m)) = self.record(arrival, at, stop).await {
            self.hand_on(&core, m, stop).await;
        }
    }

    /// The first half of [`Application::accept`]: records the event in its project's inbox as
    /// arrived at `at` ([`crate::store::inbound::arrival_stamp`]) and tells the platform; the core
    /// and the event to hand on when it is new.
    async fn record(
        &self,
        arrival: impl Into<crate::channel::Arrival>,
        at: i64,
        stop: &CancellationToken,
    ) -> Option<(Arc<Core>, crate::channel::Inbound)> {
        let crate::channel::Arrival {
            inbound: m,
            recorded,
        } = arrival.into();
        let Some(core) = self.projects.core_for(&self.store, &m).await else {
            // A channel bound to no project, and no default_project: not ours to answer.
            tracing::debug!(platform = %m.platform, "a chat event from a channel that serves no project ignored");
            metrics::counter!("chatbridge_inbound_unrouted_total", "platform" => m.platform.clone())
                .increment(1);
            if let Some(r) = recorded {
                let _ = r.send(());
            }
            return None;
        };
        if let Some(users) = self.projects.allowed.get(core.project())
            && !users.contains(&m.user)
        {
            // `[projects.access] allowed_users`: on top of the platform's own allowlist (A1).
            tracing::debug!(platform = %m.platform, project = core.project(), "a chat event from someone this project does not admit ignored");
            crate::metrics::access_refused(&m.platform);
            if let Some(r) = recorded {
                let _ = r.send(());
            }
            return None;
        }
        let new = match self
            .retry_store(stop, &m.platform, || core.record_inbound(&m, at))
            .await
        {
            Some(Ok(new)) => new,
            Some(Err(e)) => {
                // Refused for good (not a transient fault): retrying here would not help. It is not
                // acknowledged either — an event answered as taken but never recorded would be lost
                // without a trace — so the platform sends it again (Slack: three more times).
                tracing::error!(error = %e, platform = %m.platform, event = %m.event_id, "could not record a chat event; not acknowledging it, so the platform sends it again");
                drop(recorded);
                return None;
            }
            None => return None,
        };
        if let Some(r) = recorded {
            let _ = r.send(());
        }
        new.then_some((core, m))
    }

    /// The second half of [`Application::accept`]: gives a recorded event to its conversation.
    async fn hand_on(
        &self,
        core: &Arc<Core>,
        m: crate::channel::Inbound,
        stop: &CancellationToken,
    ) {
        let platform = m.platform.clone();
        if let Some(Err(e)) = self
            .retry_store(stop, &platform, || core.dispatch_inbound(m.clone()))
            .await
        {
            tracing::error!(error = %e, %platform, "could not hand a chat event on; it is taken again at the next start");
        }
    }

    /// Runs a store step for a chat event, retrying while the database is unreachable; `None` when
    /// `stop` came first.
    async fn retry_store<T, F>(
        &self,
        stop: &CancellationToken,
        platform: &str,
        step: impl FnMut() -> F,
    ) -> Option<Result<T, crate::store::StoreError>>
    where
        F: std::future::Future<Output = Result<T, crate::store::StoreError>>,
    {
        let r = crate::store::retry_transient(
            u32::MAX,
            stop,
            |e| tracing::warn!(error = %e, %platform, "the database failed to take a chat event for the moment; holding it until it goes through"),
            step,
        )
        .await;
        if r.is_none() {
            tracing::error!(%platform, "stopping while the database is down: a chat event was not taken");
        }
        r
    }

    /// Hands inbound chat events to the core until `stop` or the sender closes.
    ///
    /// Two stages, in arrival order each: every event is recorded (and the platform told) as it
    /// comes, several at once, while the recorded ones are handed to their conversations behind it. Recorded and
    /// handed on in one go, a burst's later events waited for the earlier ones' conversations to be
    /// opened before they were even recorded — Slack's 3 s for an answer ran out for half of a burst
    /// of 300 new threads (503s and redeliveries). What is recorded but not yet handed on when the
    /// bridge stops stays in the inbox and is taken at the next start.
    ///
    /// # Errors
    /// Another replica took the leader lease.
    pub async fn pump(
        &self,
        rx: &mut tokio::sync::mpsc::Receiver<crate::channel::Arrival>,
        stop: &CancellationToken,
    ) -> anyhow::Result<()> {
        use futures_util::StreamExt;
        let (recorded_tx, mut recorded) = tokio::sync::mpsc::channel(RECORDED_AHEAD);
        let record = async move {
            // Several recorded at once (each a commit of its own), passed on in arrival order; each
            // stamped as it is taken, so the inbox keeps that order for a restart too.
            let mut recording = futures_util::stream::poll_fn(|cx| rx.poll_recv(cx))
                .map(|m| self.record(m, crate::store::inbound::arrival_stamp(), stop))
                .buffered(RECORDING_AT_ONCE);
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = self.lease.lost.cancelled() => anyhow::bail!(LEASE_LOST),
                    reason = self.fatal() => anyhow::bail!(reason),
                    next = recording.next() => match next {
                        Some(Some(next)) => {
                            if recorded_tx.send(next).await.is_err() {
                                break;
                            }
                        }
                        Some(None) => {}
                        None => break,
                    },
                }
            }
            Ok(())
        };
        let hand_on = async {
            while let Some((core, m)) = recorded.recv().await {
                // Stopping, or another replica leads now: the inbox keeps the rest for the next start.
                if stop.is_cancelled() || self.lease.lost.is_cancelled() {
                    break;
                }
                self.hand_on(&core, m, stop).await;
            }
        };
        let (r, ()) = tokio::join!(record, hand_on);
        r
    }

    /// The default project's daemon connection's counters (reconnects, frames).
    #[must_use]
    pub fn client_stats(&self) -> daemon_client::ClientStats {
        self.core.client.stats()
    }

    /// The core of each project served, in configuration order (one in the one-project
    /// configuration).
    #[must_use]
    pub fn cores(&self) -> &[Arc<Core>] {
        &self.projects.cores
    }

    /// The core of the project named `name`, if it is served.
    #[must_use]
    pub fn project(&self, name: &str) -> Option<&Arc<Core>> {
        self.projects.cores.iter().find(|c| c.project() == name)
    }

    /// The tracker every task of this bridge runs on; a platform's listener joins it, so shutdown
    /// waits for it within the same bound.
    #[must_use]
    pub fn tracker(&self) -> &TaskTracker {
        &self.tracker
    }

    /// How long [`Application::shutdown`] waits beyond `service.drain_timeout` before it abandons
    /// tasks that have not ended (default [`SHUTDOWN_GRACE`]).
    pub fn set_shutdown_grace(&mut self, grace: Duration) {
        self.grace = grace;
    }

    /// Stops taking work (`/readyz` says `stopping`), delivers what is due (bounded by
    /// `service.drain_timeout`), closes connections and gives the leader lease up. Every wait is
    /// bounded: whatever has not ended by `service.drain_timeout` plus the grace (a stuck platform
    /// task, a daemon that does not close) is abandoned, and the store is closed anyway.
    ///
    /// The grace is shared out so the whole of it holds even when every step runs to its bound
    /// (the database down: each outbox step waits out a connection attempt): the outbox has
    /// `service.drain_timeout`, the store's closing the last part of the grace (up to 1 s), the
    /// rest what lies between.
    pub async fn shutdown(self) {
        let start = Instant::now();
        let drained_by = start + self.drain_timeout;
        let end = drained_by + self.grace;
        let deadline = end - (self.grace / 3).min(Duration::from_secs(1));
        self.status.set_role(Role::Stopping);
        self.stop.cancel();
        self.tracker.close();
        bounded("delivering the outbox", drained_by, self.outbox).await;
        match bounded(
            "reading the outbox",
            drained_by
                .max(Instant::now() + Duration::from_millis(200))
                .min(deadline),
            outbox_worker::drained(&self.store),
        )
        .await
        {
            Some(Ok(true)) => tracing::info!("outbox drained"),
            Some(Ok(false)) => tracing::warn!(
                "stopping with chat messages not yet delivered; the next active replica delivers them"
            ),
            Some(Err(e)) => tracing::warn!(error = %e, "could not read the outbox while stopping"),
            None => {}
        }
        for router in &self.routers {
            router.abort();
        }
        for client in &self.clients {
            client.close();
        }
        futures_util::future::join_all(self.agents.into_iter().map(|agent| {
            bounded(
                "stopping the built-in shell agent",
                deadline,
                agent.shutdown(),
            )
        }))
        .await;
        bounded("giving the leader lease up", deadline, self.lease.release()).await;
        if let Some(http) = self.http {
            http.stop(deadline).await;
        }
        let stopped =
            futures_util::future::join_all(self.projects.cores.iter().map(|c| c.stopped()));
        if bounded("the conversations", deadline, stopped)
            .await
            .is_none()
        {
            tracing::error!(
                tasks = self
                    .projects
                    .cores
                    .iter()
                    .map(|c| c.tasks().len())
                    .sum::<usize>(),
                "conversation tasks still running after service.drain_timeout and the grace; abandoning them"
            );
        }
        if bounded("the remaining tasks", deadline, self.tracker.wait())
            .await
            .is_none()
        {
            tracing::error!(
                tasks = self.tracker.len(),
                "tasks still running after service.drain_timeout and the grace; abandoning them"
            );
        }
        // The store closes last, whatever was abandoned; a pool that does not close by the end of
        // the grace is dropped.
        bounded(
            "closing the store",
            end.max(Instant::now() + Duration::from_millis(100)),
            self.store.close(),
        )
        .await;
    }
}

impl Shared<'_> {
    /// Connects `project`'s daemon (starting the built-in shell agent when it has no URL or
    /// command) and builds its core. `named`: `[[projects]]` is configured (conversations, metrics
    /// and `/status` carry the project's name; errors name it too).
    async fn start_project(
        &self,
        project: crate::config::ResolvedProject,
        named: bool,
    ) -> anyhow::Result<Started> {
        let cfg = self.cfg;
        let channel = self.channel;
        let daemon = &project.daemon;
        let key = if named {
            format!("projects[{}].daemon", project.name)
        } else {
            "daemon".to_owned()
        };
        let command = match &daemon.command {
            Some(argv) => {
                let mut c =
                    AgentCommand::new(argv.clone()).with_context(|| format!("{key}.command"))?;
                c.env = daemon
                    .env
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                c.cwd.clone_from(&daemon.cwd);
                Some(c)
            }
            None => None,
        };
        let (agent, url, token) = match &daemon.url {
            _ if command.is_some() => (None, String::new(), None),
            Some(url) => (
                None,
                url.clone(),
                daemon.token.as_ref().map(|t| t.expose_secret().to_owned()),
            ),
            None => {
                let agent_cfg = AgentConfig {
                    heartbeat_interval: cfg.shell_agent.heartbeat_interval,
                    default_timeout: cfg.shell_agent.default_timeout,
                    require_approval: cfg.shell_agent.require_approval,
                    ..AgentConfig::default()
                };
                let agent = ShellAgent::start("127.0.0.1:0".parse()?, None, agent_cfg)
                    .await
                    .with_context(|| {
                        if named {
                            format!(
                                "starting the built-in shell agent of project {}",
                                project.name
                            )
                        } else {
                            "starting the built-in shell agent".to_owned()
                        }
                    })?;
                let (url, token) = (agent.url(), agent.token().to_owned());
                (Some(agent), url, Some(token))
            }
        };
        let mut client_cfg = match command {
            Some(c) => ClientConfig::stdio(c),
            None => ClientConfig::new(&url),
        };
        let url = client_cfg.url.clone();
        if let Some(t) = token {
            client_cfg = client_cfg.with_token(t);
            if daemon.token_from_file
                && daemon.url.is_some()
                && let Some(path) = &daemon.token_file
            {
                client_cfg.token_file = Some(path.clone());
            }
        }
        client_cfg.session_mode.clone_from(&daemon.mode);
        client_cfg.project = named.then(|| project.name.clone());
        client_cfg.key.clone_from(&key);
        client_cfg.cwd.clone_from(&daemon.cwd);
        // A daemon of its own URL that cannot be reached yet is waited for: chat is served, its
        // messages are held, and it is connected when it answers (L7). The built-in shell agent
        // and a stdio agent are started here: failing to is an error.
        let wait = agent.is_none() && client_cfg.command.is_none();
        let connected = DaemonClient::connect_or_wait(client_cfg, wait).await;
        let (client, info, events) = match connected {
            Ok(c) => c,
            Err(e) => {
                if let Some(agent) = agent {
                    bounded(
                        "stopping the built-in shell agent",
                        Instant::now() + SHUTDOWN_GRACE,
                        agent.shutdown(),
                    )
                    .await;
                }
                return Err(anyhow::Error::new(e).context(if named {
                    format!("connecting to the agent daemon of project {}", project.name)
                } else {
                    "connecting to the agent daemon".to_owned()
                }));
            }
        };
        let reached = match &info {
            Some(info) => info.session_cwd(daemon.cwd.as_deref()),
            // Unknown until it answers: `daemon.cwd`, else the workspace it reports then.
            None => Ok(daemon.cwd.clone()),
        };
        let cwd = match reached {
            Ok(Some(c)) => c,
            Ok(None) => std::env::current_dir().context("reading the current directory")?,
            Err(e) => {
                client.close();
                return Err(anyhow::anyhow!(e.naming(&key)));
            }
        };
        if info.is_none() {
            tracing::warn!(project = %project.name, url = %daemon_client::mask_url(&url), "the agent daemon cannot be reached; its messages are held until it answers");
        }
        let shell = agent.is_some()
            || info
                .as_ref()
                .is_some_and(|i| i.name.as_deref() == Some(shell_agent::AGENT_NAME));
        if let (crate::worktree::Isolation::Worktree, Some(served)) = (
            cfg.workspace.isolation,
            info.as_ref().and_then(|i| i.workspace.as_ref()),
        ) {
            // It would refuse every thread's `session/new` in its worktree.
            client.close();
            anyhow::bail!(
                "workspace.isolation = \"worktree\" needs an agent that opens sessions in any directory, but the agent daemon serves the one workspace {} and refuses sessions in the threads' worktrees: set workspace.isolation = \"shared\", or use an agent that can (the built-in shell agent, a stdio agent such as daemon.command = [\"qwen\", \"--acp\"], or one served by chat-bridge agent-host)",
                served.display()
            );
        }
        let worktrees = match cfg.workspace.isolation {
            crate::worktree::Isolation::Shared => None,
            crate::worktree::Isolation::Worktree => {
                let found = crate::worktree::Worktrees::detect(&cwd, cfg.workspace.dir.as_deref())
                    .await
                    .context("preparing workspace.dir for the threads' worktrees")?;
                match &found {
                    Some(w) => {
                        tracing::info!(project = %project.name, repository = %w.repo().display(), dir = %w.dir().display(), "each thread works in its own git worktree")
                    }
                    None => {
                        tracing::warn!(project = %project.name, cwd = %cwd.display(), "workspace.isolation is \"worktree\" but the sessions' directory is not in a git repository with a commit (or git is not installed): threads share it")
                    }
                }
                found
            }
        };
        let (liveness, approvals) = (&project.liveness, &project.approvals);
        let core_cfg = CoreConfig {
            liveness: LivenessConfig {
                idle: liveness.idle,
                wall: liveness.wall,
                tool_grace: liveness.tool_grace,
                ..LivenessConfig::default()
            },
            on_stall: liveness.on_stall,
            progress_after: liveness.progress_after,
            progress_every: liveness.progress_every,
            progress_flush: liveness.progress_flush,
            reconnect_grace: liveness.reconnect_grace,
            permission_timeout: approvals.timeout,
            approvers: approvals.approvers.clone(),
            threads: cfg.access.threads,
            require_second_person: approvals.require_second_person,
            redact_store: cfg.redact.store,
            cwd,
            output_cap: channel.capabilities().output_cap,
            buttons: channel.capabilities().has_buttons,
            announce_connection: !channel.capabilities().has_threads,
            api_pointer: cfg.http.listen.is_some() && cfg.http.api_token.is_some(),
            ui_pointer: (cfg.http.listen.is_some() && cfg.http.ui).then(|| {
                cfg.http
                    .ui_url
                    .as_deref()
                    .unwrap_or("")
                    .trim_end_matches('/')
                    .to_owned()
            }),
            actor_idle: cfg.service.conversation_idle,
            files: cfg.attachments.limits(
                info.as_ref().is_some_and(|i| i.images),
                info.as_ref().is_some_and(|i| i.embedded_context),
            ),
            answer_len: channel.capabilities().answer_len,
            upload_over: cfg.render.upload_over,
            // The console prints every edit: it gets the answer whole.
            stream_every: (cfg.render.stream
                && channel.capabilities().can_edit
                && channel.platform() != "console")
                // Never more than ten edits a second, whatever is configured.
                .then_some(cfg.render.stream_every.max(Duration::from_millis(100))),
            no_stream_channels: cfg.render.no_stream_channels.clone(),
            // The built-in shell agent (here, or served on its own) runs the text as a command: a
            // label or a note would break it.
            speaker_prefix: cfg.turns.speaker_prefix && !shell,
            while_busy: cfg.turns.while_busy,
            shell_agent: shell,
            schedules_per_thread: cfg.schedules.per_thread,
            schedule_min_interval: cfg.schedules.min_interval,
            worktrees,
            retain: cfg.workspace.retain,
            require_mention_in_threads: cfg.access.require_mention_in_threads,
            project: named.then(|| project.name.clone()),
            ..CoreConfig::default()
        };
        let core = Core::new(
            self.store.clone(),
            client.clone(),
            core_cfg,
            self.redactor.clone(),
            self.wake.clone(),
            self.stop.clone(),
        );
        core.set_live(self.live.clone());
        if info.is_none() {
            core.start_without_daemon(crate::core::LateCheck {
                configured_cwd: daemon.cwd.clone(),
                worktrees: cfg.workspace.isolation == crate::worktree::Isolation::Worktree,
                key,
            });
        }
        if let Some(fetch) = channel.fetcher() {
            core.set_fetch(fetch);
        }
        core.speakers.attach(channel.clone());
        Ok(Started {
            core,
            client,
            events,
            agent,
            url,
        })
    }
}

/// How many times a start-up step is tried again while the database fails for the moment (a
/// connection cut, a server restarting, a failover): 0.2 s doubling, some 6 s in all. A database
/// that stays away still ends the start, as one that cannot be reached at all does (Kubernetes
/// starts the pod again); one cut connection no longer does.
const STARTUP_RETRIES: u32 = 5;

/// Runs a start-up step, again while the database fails for the moment ([`STARTUP_RETRIES`]).
async fn starting<T, Fut>(
    what: &'static str,
    step: impl FnMut() -> Fut,
) -> Result<T, crate::store::StoreError>
where
    Fut: std::future::Future<Output = Result<T, crate::store::StoreError>>,
{
    let never = CancellationToken::new();
    let told = |e: &crate::store::StoreError| {
        tracing::warn!(error = %e, "{what}: the database failed for the moment; trying again");
    };
    match crate::store::retry_transient(STARTUP_RETRIES, &never, told, step).await {
        Some(r) => r,
        None => Err(crate::store::StoreError::Corrupt(format!(
            "{what}: stopped"
        ))),
    }
}

/// After a restart: turns left open by a project no longer configured are closed as interrupted
/// (the projects served resumed their own).
async fn close_unserved_turns(
    core: &Arc<Core>,
    projects: &Projects,
    store: &Store,
) -> Result<(), crate::store::StoreError> {
    let mut c = store.conn().await?;
    let open = crate::store::turns::open(&mut c).await?;
    for turn in open {
        let Some(conv) = crate::store::conversations::get(&mut c, &turn.conversation_id).await?
        else {
            continue;
        };
        if projects.cores.iter().any(|p| p.serves(&conv.project)) {
            continue;
        }
        core.close_unserved_turn(&turn, &conv).await?;
    }
    Ok(())
}

/// After a restart: events recorded but never acted on are handed to the core of their project,
/// as [`Core::take_unhandled_inbound`] does for one core.
async fn take_unhandled(
    core: &Arc<Core>,
    projects: &Projects,
    store: &Store,
    pending: Vec<(String, String, String)>,
) -> usize {
    let n = pending.len();
    for (platform, event_id, payload) in pending {
        let take = || async {
            match serde_json::from_str::<crate::channel::Inbound>(&payload) {
                Ok(msg) => {
                    // The project the thread belonged to when the message was received: a message
                    // written for one agent never runs on another project's (it is set aside, told).
                    let was = projects.project_of(store, &msg).await;
                    match projects.core_for(store, &msg).await {
                        Some(to) if was.as_deref().is_some_and(|p| !to.serves(p)) => {
                            to.not_run_after_move(&msg, was.as_deref().unwrap_or_default())
                                .await
                        }
                        Some(to) => to.dispatch_inbound(msg).await,
                        None => core.drop_unrouted(&platform, &event_id).await,
                    }
                }
                Err(_) => core.set_aside_unreadable(&platform, &event_id).await,
            }
        };
        // Taken in order: one the database failed for the moment is taken again before the next
        // (left for later, the thread's messages behind it ran before it — D2).
        let r = crate::core::inbox::in_order(core, &platform, &event_id, take).await;
        if let Err(e) = r {
            tracing::error!(%platform, event = %event_id, transient = e.is_transient(), "an inbox event could not be taken at start-up; it stays in the inbox");
        }
    }
    n
}
