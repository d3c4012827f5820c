//! Wiring: `Application::build` connects the store, the daemon (the built-in shell agent when no URL is
//! configured), the core and a channel; the console runs on top of it.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use daemon_client::{ClientConfig, DaemonClient, LivenessConfig};
use shell_agent::{AgentConfig, ShellAgent};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::channel::{Channel, console};
use crate::config::{Config, Secret, SlackMode};
use crate::core::redact::Redactor;
use crate::core::{Core, CoreConfig};
use crate::outbox_worker;
use crate::replica::{self, Role, Status, Watch};
use crate::store::Store;
use crate::store::outbox::RetryPolicy;

const LEASE_LOST: &str = "another replica took the leader lease while this one could not reach the database; stopped acting (restart it to stand by)";

/// A running bridge.
pub struct Application {
    /// The core.
    pub core: Arc<Core>,
    /// The store.
    pub store: Store,
    /// This replica's role and readiness.
    pub status: Arc<Status>,
    agent: Option<ShellAgent>,
    client: DaemonClient,
    stop: CancellationToken,
    outbox: JoinHandle<()>,
    router: JoinHandle<()>,
    http: Option<Http>,
    lease: Watch,
    /// Where the daemon is (for the banner).
    pub daemon_url: String,
    /// Where the HTTP server listens, when `http.listen` is set.
    pub http_addr: Option<std::net::SocketAddr>,
}

/// How long handled inbound event ids are kept for deduplication: platforms retry within minutes
/// (Slack) or replay within a gateway session (Discord).
const INBOX_KEEP: Duration = Duration::from_secs(24 * 3600);

/// Forgets handled inbox entries older than [`INBOX_KEEP`], hourly, until `stop`.
async fn prune_inbox(store: Store, stop: CancellationToken) {
    loop {
        let before = crate::store::now_ms() - INBOX_KEEP.as_millis() as i64;
        match store.conn().await {
            Ok(mut c) => match crate::store::inbound::prune(&mut c, before).await {
                Ok(n) if n > 0 => tracing::debug!(n, "pruned handled inbound events"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "could not prune handled inbound events"),
            },
            Err(e) => tracing::warn!(error = %e, "could not prune handled inbound events"),
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(Duration::from_secs(3600)) => {}
        }
    }
}

impl std::fmt::Debug for Application {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Application")
            .field("daemon_url", &self.daemon_url)
            .finish_non_exhaustive()
    }
}

/// The HTTP server of a replica (it runs from start-up to exit, standby or active).
#[derive(Debug)]
struct Http {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Http {
    async fn start(
        cfg: &Config,
        store: &Store,
        status: &Arc<Status>,
    ) -> anyhow::Result<Option<(Self, std::net::SocketAddr)>> {
        let Some(listen) = &cfg.http.listen else {
            return Ok(None);
        };
        let listener = tokio::net::TcpListener::bind(listen.as_str())
            .await
            .with_context(|| format!("http.listen {listen}"))?;
        let addr = listener.local_addr()?;
        let router = crate::http::router(crate::http::HttpState::new(
            store.clone(),
            status.clone(),
            cfg.http.api_token.as_ref().map(|t| t.expose().to_owned()),
        ));
        let stop = CancellationToken::new();
        let stop_http = stop.clone();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async move { stop_http.cancelled().await })
                .await;
        });
        tracing::info!(%addr, "HTTP listening: /healthz /readyz /metrics /api/v1");
        Ok(Some((Self { stop, task }, addr)))
    }

    async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
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
        crate::metrics::register(channel.platform());
        let store = Store::open(&cfg.database.url).await?;
        let status = Arc::new(Status::default());
        let (http, http_addr) = match Http::start(cfg, &store, &status).await? {
            Some((h, a)) => (Some(h), Some(a)),
            None => (None, None),
        };
        let lease =
            match replica::acquire(&store, &status, cfg.service.leader_retry, stop_waiting).await {
                Ok(Some(lease)) => lease,
                other => {
                    if let Some(http) = http {
                        http.stop().await;
                    }
                    store.close().await;
                    return match other {
                        Ok(_) => Ok(None),
                        Err(e) => Err(e.into()),
                    };
                }
            };
        let lease = Watch::start(store.clone(), lease, cfg.service.leader_check);
        match Self::activate(cfg, channel, store.clone(), status.clone(), lease).await {
            Ok(mut app) => {
                app.http = http;
                app.http_addr = http_addr;
                Ok(Some(app))
            }
            Err(e) => {
                if let Some(http) = http {
                    http.stop().await;
                }
                store.close().await;
                Err(e)
            }
        }
    }

    async fn activate(
        cfg: &Config,
        channel: Arc<dyn Channel>,
        store: Store,
        status: Arc<Status>,
        lease: Watch,
    ) -> anyhow::Result<Self> {
        {
            // This process is the one active replica: claims left by a previous run are void.
            let mut c = store.conn().await?;
            let released = crate::store::outbox::release_claims(&mut c).await?;
            if released > 0 {
                tracing::info!(released, "released outbox claims left by a previous run");
            }
        }
        let (agent, url, token) = match &cfg.daemon.url {
            Some(url) => (
                None,
                url.clone(),
                cfg.daemon.token.as_ref().map(|t| t.expose().to_owned()),
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
                    .context("starting the built-in shell agent")?;
                let (url, token) = (agent.url(), agent.token().to_owned());
                (Some(agent), url, Some(token))
            }
        };
        let mut client_cfg = ClientConfig::new(&url);
        if let Some(t) = token {
            client_cfg = client_cfg.with_token(t);
        }
        client_cfg.session_mode.clone_from(&cfg.daemon.mode);
        let (client, info, events) = DaemonClient::connect(client_cfg)
            .await
            .context("connecting to the agent daemon")?;
        let cwd = match info.session_cwd(cfg.daemon.cwd.as_deref())? {
            Some(c) => c,
            None => std::env::current_dir().context("reading the current directory")?,
        };
        let core_cfg = CoreConfig {
            liveness: LivenessConfig {
                idle: cfg.liveness.idle,
                wall: cfg.liveness.wall,
                tool_grace: cfg.liveness.tool_grace,
                ..LivenessConfig::default()
            },
            on_stall: cfg.liveness.on_stall,
            progress_after: cfg.liveness.progress_after,
            progress_every: cfg.liveness.progress_every,
            progress_flush: cfg.liveness.progress_flush,
            permission_timeout: cfg.approvals.timeout,
            approvers: cfg.approvals.approvers.clone(),
            threads: cfg.access.threads,
            require_second_person: cfg.approvals.require_second_person,
            redact_store: cfg.redact.store,
            cwd,
            mode: cfg.daemon.mode.clone(),
            output_cap: channel.capabilities().output_cap,
            actor_idle: cfg.service.conversation_idle,
            ..CoreConfig::default()
        };
        let redactor = Redactor::new(&cfg.redact.patterns).context("redact.patterns")?;
        let stop = CancellationToken::new();
        let wake = Arc::new(Notify::new());
        let core = Core::new(
            store.clone(),
            client.clone(),
            core_cfg,
            redactor,
            wake.clone(),
            stop.clone(),
        );
        let router = tokio::spawn(core.clone().route_events(events));
        let outbox = tokio::spawn(outbox_worker::run(
            store.clone(),
            channel.clone(),
            wake,
            stop.clone(),
            cfg.service.drain_timeout,
            RetryPolicy::default(),
            cfg.service.outbox_workers,
        ));
        status.attach(core.clone(), channel);
        status.set_role(Role::Active);
        let resumed = core.resume_open_turns().await?;
        if resumed > 0 {
            tracing::info!(resumed, "resuming open turns from the previous run");
        }
        let taken = core.take_unhandled_inbound().await?;
        if taken > 0 {
            tracing::info!(
                taken,
                "taking chat events the previous run recorded but did not act on"
            );
        }
        tokio::spawn(prune_inbox(store.clone(), stop.clone()));
        Ok(Self {
            core,
            store,
            status,
            agent,
            client,
            stop,
            outbox,
            router,
            http: None,
            lease,
            daemon_url: url,
            http_addr: None,
        })
    }

    /// Resolves when this replica must stop acting because another took the leader lease.
    pub async fn lease_lost(&self) {
        self.lease.lost.cancelled().await;
    }

    /// Feeds console lines until `input` ends (or `stop`), then waits for the last turn to finish and
    /// its messages to be delivered.
    ///
    /// # Errors
    /// Reading input or the store failing.
    pub async fn run_console<R: AsyncBufRead + Unpin>(
        &self,
        input: R,
        stop: CancellationToken,
    ) -> anyhow::Result<()> {
        let mut input = input;
        let mut raw = Vec::new();
        loop {
            raw.clear();
            let n = tokio::select! {
                () = stop.cancelled() => return Ok(()),
                () = self.lease.lost.cancelled() => anyhow::bail!(LEASE_LOST),
                n = input.read_until(b'\n', &mut raw) => n.context("reading the console")?,
            };
            if n == 0 {
                break;
            }
            // Bytes that are not UTF-8 become U+FFFD: a line is never lost for them (S4).
            let line = String::from_utf8_lossy(&raw);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.trim().is_empty() {
                continue;
            }
            self.accept(console::inbound(line), &stop).await;
        }
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            () = self.lease.lost.cancelled() => anyhow::bail!(LEASE_LOST),
            () = self.core.wait_idle() => {}
        }
        while !outbox_worker::drained(&self.store).await? {
            tokio::select! {
                () = stop.cancelled() => return Ok(()),
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
        let crate::channel::Arrival {
            inbound: m,
            recorded,
        } = arrival.into();
        let new = match self
            .retry_store(stop, &m.platform, || self.core.record_inbound(&m))
            .await
        {
            Some(Ok(new)) => new,
            Some(Err(e)) => {
                // Refused for good (not a transient fault): retrying would not help either.
                tracing::error!(error = %e, platform = %m.platform, "could not take a chat event");
                if let Some(r) = recorded {
                    let _ = r.send(());
                }
                return;
            }
            None => return,
        };
        if let Some(r) = recorded {
            let _ = r.send(());
        }
        if !new {
            return;
        }
        let platform = m.platform.clone();
        if let Some(Err(e)) = self
            .retry_store(stop, &platform, || self.core.dispatch_inbound(m.clone()))
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
            |e| tracing::warn!(error = %e, %platform, "database unavailable; holding a chat event until it answers"),
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
    /// # Errors
    /// Another replica took the leader lease.
    async fn pump(
        &self,
        rx: &mut tokio::sync::mpsc::Receiver<crate::channel::Arrival>,
        stop: &CancellationToken,
    ) -> anyhow::Result<()> {
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                () = self.lease.lost.cancelled() => anyhow::bail!(LEASE_LOST),
                m = rx.recv() => match m {
                    Some(m) => self.accept(m, stop).await,
                    None => break,
                },
            }
        }
        Ok(())
    }

    /// The daemon connection's counters (reconnects, frames).
    #[must_use]
    pub fn client_stats(&self) -> daemon_client::ClientStats {
        self.client.stats()
    }

    /// Stops taking work (`/readyz` says `stopping`), delivers what is due (bounded by
    /// `service.drain_timeout`), closes connections and gives the leader lease up.
    pub async fn shutdown(self) {
        self.status.set_role(Role::Stopping);
        self.stop.cancel();
        let _ = self.outbox.await;
        match outbox_worker::drained(&self.store).await {
            Ok(true) => tracing::info!("outbox drained"),
            Ok(false) => tracing::warn!(
                "stopping with chat messages not yet delivered; the next active replica delivers them"
            ),
            Err(e) => tracing::warn!(error = %e, "could not read the outbox while stopping"),
        }
        self.router.abort();
        self.client.close();
        if let Some(agent) = self.agent {
            agent.shutdown().await;
        }
        self.lease.release().await;
        if let Some(http) = self.http {
            http.stop().await;
        }
        self.store.close().await;
    }
}

/// A secret `validate` guarantees is set for this platform.
fn required<'a>(secret: Option<&'a Secret>, var: &str) -> anyhow::Result<&'a str> {
    Ok(secret.context(format!("{var} is not set"))?.expose())
}

/// Runs the bridge on Slack (Socket Mode in, Web API out) until `stop`.
///
/// # Errors
/// An invalid configuration ([`Config::validate`]: missing or empty tokens, no allowlist without
/// `access.open`, …), Slack refusing the bot token, or anything `Application::build` reports.
pub async fn run_slack(cfg: &Config, stop: CancellationToken) -> anyhow::Result<()> {
    use crate::channel::slack::api::{SlackToken, WebApi};
    use crate::channel::slack::{Slack, events::Access, socket};
    cfg.validate()?;
    let bot = required(cfg.slack.bot_token.as_ref(), "CHAT_BRIDGE_SLACK__BOT_TOKEN")?;
    let app_token = match cfg.slack.mode {
        SlackMode::Http => None,
        SlackMode::Socket => Some(required(
            cfg.slack.app_token.as_ref(),
            "CHAT_BRIDGE_SLACK__APP_TOKEN",
        )?),
    };
    let api = WebApi::new(&cfg.slack.api_base_url, SlackToken::new(bot))?;
    let me = api
        .auth_test()
        .await
        .context("Slack auth.test failed; check CHAT_BRIDGE_SLACK__BOT_TOKEN")?;
    tracing::info!(user = %me.user_id, team = %me.team_id, "connected to Slack as the bot user");
    let slack = Slack::new(api.clone());
    let connected = slack.connection_flag();
    let Some(app) = Application::build_until(cfg, Arc::new(slack), &stop).await? else {
        return Ok(());
    };
    let access = Access {
        channels: cfg.slack.allowed_channels.clone(),
        users: cfg.slack.allowed_users.clone(),
        allow_dms: cfg.slack.allow_dms,
    };
    let (tx, mut rx) = tokio::sync::mpsc::channel(256);
    let inbound: tokio::task::JoinHandle<()> = match app_token {
        Some(app_token) => tokio::spawn(socket::run(
            api,
            SlackToken::new(app_token),
            me.user_id,
            access,
            tx,
            stop.clone(),
            connected,
        )),
        None => {
            let secret = required(
                cfg.slack.signing_secret.as_ref(),
                "CHAT_BRIDGE_SLACK__SIGNING_SECRET",
            )?;
            let listen = cfg
                .slack
                .listen
                .parse()
                .with_context(|| format!("slack.listen {:?}", cfg.slack.listen))?;
            let (_, task) = crate::channel::slack::http_mode::serve(
                listen,
                secret,
                me.user_id,
                access,
                tx,
                stop.clone(),
            )
            .await
            .with_context(|| format!("listening on {}", cfg.slack.listen))?;
            task
        }
    };
    let result = app.pump(&mut rx, &stop).await;
    stop.cancel();
    let _ = inbound.await;
    app.shutdown().await;
    result
}

/// Runs the bridge on Discord (serenity's gateway in, its REST client out) until `stop`.
///
/// # Errors
/// An invalid configuration ([`Config::validate`]: a missing or empty token, no allowlist without
/// `access.open`, …), a refused token, the gateway giving up, or anything `Application::build`
/// reports.
pub async fn run_discord(cfg: &Config, stop: CancellationToken) -> anyhow::Result<()> {
    use crate::channel::discord::{self, Gateway, events::Access};
    cfg.validate()?;
    let token = required(cfg.discord.token.as_ref(), "CHAT_BRIDGE_DISCORD__TOKEN")?;
    let http = discord::http(token, &cfg.discord.api_base_url);
    let me = http.get_current_user().await.map_err(|e| {
        anyhow::anyhow!("Discord refused the bot token or could not be reached ({e}); check CHAT_BRIDGE_DISCORD__TOKEN and discord.api_base_url")
    })?;
    tracing::info!(user = %me.id, "Discord accepted the bot token");
    let access = Access {
        channels: cfg.discord.allowed_channels.clone(),
        users: cfg.discord.allowed_users.clone(),
        roles: cfg.discord.allowed_roles.clone(),
        allow_dms: cfg.discord.allow_dms,
    };
    let (tx, mut rx) = tokio::sync::mpsc::channel(256);
    let redactor = Redactor::new(&cfg.redact.patterns).context("redact.patterns")?;
    let gateway = Gateway::build(http, access, redactor, tx)
        .await
        .context("starting the Discord gateway client")?;
    let Some(app) = Application::build_until(cfg, Arc::new(gateway.channel.clone()), &stop).await?
    else {
        return Ok(());
    };
    let gateway_stop = stop.child_token();
    let mut gateway_task = tokio::spawn(gateway.run(gateway_stop.clone()));
    let result = tokio::select! {
        r = app.pump(&mut rx, &stop) => r,
        r = &mut gateway_task => match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e),
            Err(e) => Err(anyhow::anyhow!("the Discord gateway task failed: {e}")),
        },
    };
    gateway_stop.cancel();
    if !gateway_task.is_finished() {
        let _ = gateway_task.await;
    }
    app.shutdown().await;
    result
}
