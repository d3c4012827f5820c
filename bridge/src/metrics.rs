//! Prometheus metrics. Names are `chatbridge_*`; labels are fixed vocabularies (event kinds,
//! outcomes, statuses, platforms, methods) — never user text or command output (R4).

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process-wide recorder (once) and returns the handle that renders `/metrics`.
pub fn handle() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| match PrometheusBuilder::new().install_recorder() {
            Ok(h) => Some(h),
            Err(e) => {
                tracing::warn!(error = %e, "metrics recorder not installed");
                None
            }
        })
        .as_ref()
}
