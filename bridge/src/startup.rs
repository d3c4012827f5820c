//! The one start path, for every platform the console included: [`Application::build`] checks the
//! configuration, connects the platform chosen by `service.platform` (see [`crate::platform`]) and
//! builds the bridge around its channel (waiting as a standby while another replica is active);
//! [`Application::run_until_stopped`] starts the platform's listener and hands its events to the
//! core until `stop`, until the platform's input ends (the work in hand is finished first), or until
//! something fails for good — then shuts down within a bound.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::app::Application as Bridge;
use crate::channel::several::Several;
use crate::config::{Config, mask_url};
use crate::platform::{Listener, Platform, Running, listen_all};

/// Chat events waiting for the core: a platform waits (back-pressure) when this many are queued.
const INBOUND_QUEUE: usize = 256;

/// A bridge on one platform, built and active.
pub struct Application {
    bridge: Bridge,
    platform: String,
    input_ends: bool,
    listen: Listener,
    inbound: mpsc::Receiver<crate::channel::Arrival>,
    stop: CancellationToken,
    database_url: String,
}

impl std::fmt::Debug for Application {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Application")
            .field("platform", &self.platform)
            .field("bridge", &self.bridge)
            .finish_non_exhaustive()
    }
}

impl Application {
    /// Validates `cfg`, connects its platform and builds the bridge; `None` when `stop` comes
    /// while this replica stands by.
    ///
    /// # Errors
    /// An invalid configuration, a platform refusing its credentials, or anything the bridge
    /// could not start — in words for the operator.
    pub async fn build(cfg: &Config, stop: CancellationToken) -> anyhow::Result<Option<Self>> {
        let platforms = cfg.validate()?;
        Self::build_on_all(cfg, &platforms, stop).await
    }

    /// [`Application::build`] on `platform`, whatever `service.platform` says.
    ///
    /// # Errors
    /// As [`Application::build`].
    pub async fn build_on(
        cfg: &Config,
        platform: &'static dyn Platform,
        stop: CancellationToken,
    ) -> anyhow::Result<Option<Self>> {
        Self::build_on_all(cfg, &[platform], stop).await
    }

    /// [`Application::build`] on `platforms` at once: each is connected (its credentials checked)
    /// before the bridge is built around their channels; their events share one queue.
    ///
    /// # Errors
    /// As [`Application::build`].
    pub async fn build_on_all(
        cfg: &Config,
        platforms: &[&'static dyn Platform],
        stop: CancellationToken,
    ) -> anyhow::Result<Option<Self>> {
        let (tx, inbound) = mpsc::channel(INBOUND_QUEUE);
        let mut channels = Vec::new();
        let mut listeners = Vec::new();
        for platform in platforms {
            let connected = platform.connect(cfg, tx.clone()).await?;
            channels.push(connected.channel);
            listeners.push((platform.name(), platform.input_ends(), connected.listen));
        }
        drop(tx);
        let channel = Several::join(channels)?;
        let Some(bridge) = Bridge::build_until(cfg, channel, &stop).await? else {
            return Ok(None);
        };
        let (platform, input_ends, listen) = if listeners.len() == 1 {
            let (name, input_ends, listen) = listeners.remove(0);
            (name.to_owned(), input_ends, listen)
        } else {
            let names: Vec<&str> = listeners.iter().map(|(n, _, _)| *n).collect();
            let input_ends = listeners.iter().all(|(_, ends, _)| *ends);
            (names.join(", "), input_ends, listen_all(listeners))
        };
        Ok(Some(Self {
            bridge,
            platform,
            input_ends,
            listen,
            inbound,
            stop,
            database_url: mask_url(&cfg.database.url),
        }))
    }

    /// The bridge under it (the HTTP address, the core).
    #[must_use]
    pub fn bridge(&self) -> &Bridge {
        &self.bridge
    }

    /// How long shutdown waits beyond `service.drain_timeout` before it abandons tasks that have not
    /// ended (a platform task that ignores its stop).
    #[must_use]
    pub fn with_shutdown_grace(mut self, grace: Duration) -> Self {
        self.bridge.set_shutdown_grace(grace);
        self
    }

    /// Runs until `stop`, the end of the platform's input, or a fatal error; then shuts down
    /// (bounded by `service.drain_timeout` plus a grace, whatever the platform does).
    ///
    /// # Errors
    /// The platform failing for good (its listener's error), another replica taking the leader
    /// lease, or the store failing while finishing the work in hand.
    pub async fn run_until_stopped(self) -> anyhow::Result<()> {
        let Self {
            bridge,
            platform,
            input_ends,
            listen,
            mut inbound,
            stop,
            database_url,
        } = self;
        let listen_stop = stop.child_token();
        let mut listener = bridge.tracker().spawn(listen(Running {
            stop: listen_stop.clone(),
            daemon_url: mask_url(&bridge.daemon_url),
            database_url,
        }));
        // The pump ends on `stop`, on a lost lease, or when every sender is gone — the listener
        // ended and dropped its sender, after the pump took everything it sent. The pump is never
        // raced against a listener that ended well (that could cut an event's hand-over short); a
        // listener that failed ends the pump at once (an event cut short stays in the inbox and is
        // taken at the next start).
        let mut heard = None;
        let pumped = {
            let watch = async {
                let r = (&mut listener).await;
                let fine = matches!(r, Ok(Ok(())));
                heard = Some(r);
                if fine {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                biased;
                () = watch => None,
                r = bridge.pump(&mut inbound, &stop) => Some(r),
            }
        };
        if pumped.as_ref().is_some_and(Result::is_ok) && heard.is_none() && !stop.is_cancelled() {
            // Every sender is gone: the listener has ended, or is ending — hear how.
            heard = tokio::time::timeout(Duration::from_secs(1), &mut listener)
                .await
                .ok();
        }
        let result = match (pumped, heard) {
            (Some(Err(e)), _) => Err(e),
            (Some(Ok(())), _) if stop.is_cancelled() => Ok(()),
            // The platform's input ended (the console's stdin closed): finish the work in hand.
            (Some(Ok(())), None | Some(Ok(Ok(())))) if input_ends => bridge.finish(&stop).await,
            // A listener that should run until its stop returned on its own.
            (Some(Ok(())), None | Some(Ok(Ok(())))) => Err(anyhow::anyhow!(
                "{platform} stopped taking events on its own; exiting so that it is restarted"
            )),
            (_, Some(Ok(Err(e)))) => Err(e.context(format!("{platform} stopped"))),
            (_, Some(Err(e))) => Err(anyhow::anyhow!("the {platform} listener failed: {e}")),
            (None, Some(Ok(Ok(()))) | None) => Ok(()),
        };
        if let Err(e) = &result {
            tracing::error!(error = error_text(e), %platform, "stopping");
        }
        listen_stop.cancel();
        // A listener that ignores its stop is abandoned by the bounded shutdown.
        drop(listener);
        bridge.shutdown().await;
        result
    }
}

/// [`Application::build`] then [`Application::run_until_stopped`]: the whole life of the bridge.
///
/// # Errors
/// As those two.
pub async fn run(cfg: &Config, stop: CancellationToken) -> anyhow::Result<()> {
    match Application::build(cfg, stop).await? {
        Some(app) => app.run_until_stopped().await,
        None => Ok(()),
    }
}

/// An error and its causes on one line, for the operator: each cause whose words the line already
/// holds is left out (a database error wrapped twice otherwise reads three times over).
#[must_use]
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let words = cause.to_string();
        if text.contains(&words) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&words);
    }
    text
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tokio::time::Instant;

    use super::*;
    use crate::channel::console::Console;
    use crate::platform::Connected;

    /// How each test platform's listener behaves.
    #[derive(Debug, Clone, Copy)]
    enum Behaviour {
        /// Ignores its stop and never returns, spinning (as serenity's shard runner does once the
        /// gateway closed without a status code).
        Stuck,
        /// Fails for good at once (a listener that cannot bind).
        Fails,
        /// Sends one console line, then its input ends.
        OneLine,
        /// Returns at once although its input cannot end (a gateway loop that gave up silently).
        Quits,
    }

    #[derive(Debug)]
    struct TestPlatform(Behaviour);

    static STUCK: TestPlatform = TestPlatform(Behaviour::Stuck);
    static FAILS: TestPlatform = TestPlatform(Behaviour::Fails);
    static ONE_LINE: TestPlatform = TestPlatform(Behaviour::OneLine);
    static QUITS: TestPlatform = TestPlatform(Behaviour::Quits);

    #[derive(Clone, Default)]
    struct Screen(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Screen {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("screen").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    static SCREEN: std::sync::LazyLock<Screen> = std::sync::LazyLock::new(Screen::default);

    impl Platform for TestPlatform {
        fn name(&self) -> &'static str {
            "console"
        }
        fn configured(&self, _cfg: &Config) -> bool {
            true
        }
        fn credentials(&self) -> &'static str {
            "nothing"
        }
        fn check(&self, _cfg: &Config, _problems: &mut Vec<String>) {}
        fn access(&self, _cfg: &Config) -> String {
            "test".into()
        }
        fn input_ends(&self) -> bool {
            matches!(self.0, Behaviour::OneLine)
        }
        fn connect<'a>(
            &'a self,
            _cfg: &'a Config,
            inbound: mpsc::Sender<crate::channel::Arrival>,
        ) -> crate::channel::BoxFuture<'a, anyhow::Result<Connected>> {
            let behaviour = self.0;
            Box::pin(async move {
                let screen: crate::channel::console::Sink =
                    Arc::new(Mutex::new(Box::new(SCREEN.clone())));
                let listen: Listener = Box::new(move |_run: Running| {
                    Box::pin(async move {
                        match behaviour {
                            Behaviour::Stuck => loop {
                                tokio::task::yield_now().await;
                            },
                            Behaviour::Fails => {
                                anyhow::bail!("cannot listen on 127.0.0.1:1: address in use")
                            }
                            Behaviour::Quits => Ok(()),
                            Behaviour::OneLine => {
                                let line = crate::channel::console::inbound("echo one-line-done");
                                inbound.send(line.into()).await.ok();
                                Ok(())
                            }
                        }
                    })
                });
                Ok(Connected {
                    channel: Arc::new(Console::new(screen)),
                    listen,
                })
            })
        }
    }

    fn config(dir: &std::path::Path, drain: Duration) -> Config {
        let mut cfg = Config::default();
        cfg.database.url = format!("sqlite://{}", dir.join("bridge.db").display());
        cfg.daemon.cwd = Some(dir.to_owned());
        cfg.shell_agent.heartbeat_interval = Duration::from_millis(200);
        cfg.service.drain_timeout = drain;
        cfg
    }

    async fn build(
        cfg: &Config,
        on: &'static TestPlatform,
        stop: &CancellationToken,
    ) -> Application {
        Application::build_on(cfg, on, stop.clone())
            .await
            .expect("build")
            .expect("active")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stuck_platform_task_cannot_hold_shutdown_past_drain_timeout_and_grace() {
        let dir = tempfile::tempdir().expect("tmp");
        let drain = Duration::from_millis(200);
        let grace = Duration::from_millis(300);
        let cfg = config(dir.path(), drain);
        let stop = CancellationToken::new();
        let app = build(&cfg, &STUCK, &stop).await.with_shutdown_grace(grace);
        let run = tokio::spawn(app.run_until_stopped());
        stop.cancel();
        let started = Instant::now();
        let result = tokio::time::timeout(Duration::from_secs(20), run)
            .await
            .expect("the stuck listener was abandoned, not waited for")
            .expect("join");
        result.expect("a stop is not an error");
        let took = started.elapsed();
        assert!(
            took < drain + grace + Duration::from_secs(2),
            "bounded by drain_timeout + grace: {took:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_platform_failing_after_start_ends_the_run_at_once_with_its_error() {
        let dir = tempfile::tempdir().expect("tmp");
        let cfg = config(dir.path(), Duration::from_secs(30));
        let stop = CancellationToken::new();
        let app = build(&cfg, &FAILS, &stop).await;
        let started = Instant::now();
        let err = tokio::time::timeout(Duration::from_secs(20), app.run_until_stopped())
            .await
            .expect("ends without a stop")
            .expect_err("the listener's error");
        let text = format!("{err:#}");
        assert!(text.contains("address in use"), "{text}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "nothing waits for the 30 s drain when nothing is due: {:?}",
            started.elapsed()
        );
        assert!(!stop.is_cancelled(), "the caller's token is the caller's");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn when_the_input_ends_the_work_in_hand_is_finished_before_the_run_ends() {
        let dir = tempfile::tempdir().expect("tmp");
        let cfg = config(dir.path(), Duration::from_secs(5));
        let stop = CancellationToken::new();
        let app = build(&cfg, &ONE_LINE, &stop).await;
        tokio::time::timeout(Duration::from_secs(30), app.run_until_stopped())
            .await
            .expect("ends once the turn is done")
            .expect("ok");
        let screen = String::from_utf8_lossy(&SCREEN.0.lock().expect("screen")).into_owned();
        assert!(
            screen.contains("│ one-line-done"),
            "the command ran and its output was delivered: {screen}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_listener_returning_on_its_own_is_an_error_unless_its_input_can_end() {
        let dir = tempfile::tempdir().expect("tmp");
        let cfg = config(dir.path(), Duration::from_secs(30));
        let stop = CancellationToken::new();
        let app = build(&cfg, &QUITS, &stop).await;
        let err = tokio::time::timeout(Duration::from_secs(20), app.run_until_stopped())
            .await
            .expect("ends without a stop")
            .expect_err("exits 1 so that it is restarted");
        assert!(format!("{err:#}").contains("on its own"), "{err:#}");
    }

    /// A database error wrapped by the migrator and by the store is said once, its context kept.
    #[test]
    fn an_error_wrapped_twice_reads_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("terminating connection due to administrator command")]
        struct Db;
        #[derive(Debug, thiserror::Error)]
        #[error("while executing migrations: {0}")]
        struct Migrator(#[source] Db);
        #[derive(Debug, thiserror::Error)]
        #[error("migrating the database at postgres://db failed: {source}")]
        struct Store {
            source: Migrator,
        }
        let e = anyhow::Error::new(Store {
            source: Migrator(Db),
        })
        .context("starting");
        assert_eq!(
            error_text(&e),
            "starting: migrating the database at postgres://db failed: while executing migrations: terminating connection due to administrator command"
        );
        assert_eq!(format!("{e:#}").matches("terminating").count(), 3, "{e:#}");
    }
}
