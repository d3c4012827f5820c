//! Prometheus metrics. Names are `chatbridge_*`; labels are fixed vocabularies (event kinds,
//! outcomes, statuses, platforms, methods) — never user text or command output (R4).

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// How often histogram samples are folded into their summaries. Without it the recorder keeps every
/// sample until `/metrics` is scraped — unbounded growth on a bridge nobody scrapes (the P2 soak
/// found it: about 100 bytes per finished tool).
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Installs the process-wide recorder (once), starts its upkeep, and returns the handle that
/// renders `/metrics`.
pub fn handle() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| match PrometheusBuilder::new().install_recorder() {
            Ok(h) => {
                let upkeep = h.clone();
                // A plain thread: the recorder may be installed before (or without) a runtime.
                if let Err(e) = std::thread::Builder::new()
                    .name("metrics-upkeep".into())
                    .spawn(move || {
                        loop {
                            std::thread::sleep(UPKEEP_EVERY);
                            upkeep.run_upkeep();
                        }
                    })
                {
                    tracing::warn!(error = %e, "metrics upkeep not started");
                }
                Some(h)
            }
            Err(e) => {
                tracing::warn!(error = %e, "metrics recorder not installed");
                None
            }
        })
        .as_ref()
}
