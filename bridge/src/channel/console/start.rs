//! The console as a platform: start-up, and stdin's lines as messages.

use std::path::PathBuf;
use std::sync::Arc;

use super::{Console, Pointer, banner, inbound, log_path};
use crate::channel::BoxFuture;

/// The console as a [`Platform`](crate::platform::Platform): no credentials, always allowed; each
/// line of stdin is one message, and the end of stdin ends the bridge once the last turn is done.
#[derive(Debug, Clone, Copy)]
pub struct ConsolePlatform;

impl crate::platform::Platform for ConsolePlatform {
    fn name(&self) -> &'static str {
        "console"
    }

    fn section(&self) -> Option<crate::platform::SectionSpec> {
        Some(crate::platform::SectionSpec::of::<
            super::config::ConsoleConfig,
        >("console"))
    }

    /// Next to other platforms only with `console.enabled`; alone whenever none is configured.
    fn configured(&self, cfg: &crate::config::Config) -> bool {
        cfg.console().enabled
    }

    fn credentials(&self) -> &'static str {
        "console.enabled"
    }

    fn check(&self, _cfg: &crate::config::Config, _problems: &mut Vec<String>) {}

    fn access(&self, _cfg: &crate::config::Config) -> String {
        "local console".to_owned()
    }

    fn input_ends(&self) -> bool {
        true
    }

    fn connect<'a>(
        &'a self,
        cfg: &'a crate::config::Config,
        inbound: tokio::sync::mpsc::Sender<crate::channel::Arrival>,
    ) -> BoxFuture<'a, anyhow::Result<crate::platform::Connected>> {
        Box::pin(async move {
            let built_in_agent = cfg.daemon.url.is_none();
            Ok(crate::platform::Connected {
                channel: Arc::new(Console::stdout().with_pointer(Pointer::for_config(cfg))),
                listen: Box::new(move |run| Box::pin(read_stdin(run, inbound, built_in_agent))),
            })
        })
    }
}

/// Feeds stdin's lines to the bridge until it ends (or `stop`), with a banner on a terminal.
async fn read_stdin(
    run: crate::platform::Running,
    sink: tokio::sync::mpsc::Sender<crate::channel::Arrival>,
    built_in_agent: bool,
) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    if std::io::stdin().is_terminal() {
        println!(
            "{}",
            banner(
                &run.daemon_url,
                &run.database_url,
                built_in_agent,
                log_path().get().map(PathBuf::as_path),
            )
        );
    }
    read_lines(
        tokio::io::BufReader::new(tokio::io::stdin()),
        sink,
        run.stop,
    )
    .await
}

/// Each non-blank line of `input` becomes one console message, in order, until `input` ends or
/// `stop`. Bytes that are not UTF-8 become U+FFFD: a line is never lost for them (S4).
///
/// # Errors
/// Reading `input` failed.
pub async fn read_lines<R: tokio::io::AsyncBufRead + Unpin>(
    mut input: R,
    sink: tokio::sync::mpsc::Sender<crate::channel::Arrival>,
    stop: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    use anyhow::Context;
    use tokio::io::AsyncBufReadExt;
    let mut raw = Vec::new();
    loop {
        raw.clear();
        let n = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            n = input.read_until(b'\n', &mut raw) => n.context("reading the console")?,
        };
        if n == 0 {
            return Ok(());
        }
        let line = String::from_utf8_lossy(&raw);
        let line = line.trim_end_matches(['\n', '\r']);
        if line.trim().is_empty() {
            continue;
        }
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            sent = sink.send(inbound(line).into()) => if sent.is_err() { return Ok(()) },
        }
    }
}
