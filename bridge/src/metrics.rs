//! Prometheus metrics. Names are `chatbridge_*`; labels are fixed vocabularies (event kinds,
//! outcomes, statuses, platforms, methods) — never user text or command output (R4).
//!
//! Every family is declared once in [`FAMILIES`] and registered when the recorder is installed
//! ([`register`]): counters at 0 for each of their known label values, gauges at 0, summaries empty.
//! So `/metrics` lists every family from the first scrape, and `rate()`/`increase()` alerts and
//! dashboards see the step from 0 to 1 instead of a series that appears already at 1. Figures that
//! live in the database or in this replica's state (queue depth, oldest open turn, role, readiness)
//! are read when `/metrics` is scraped ([`refresh`]), so they are never stale.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::replica::{Role, Status};
use crate::store::Store;

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// How often histogram samples are folded into their summaries. Without it the recorder keeps every
/// sample until `/metrics` is scraped — unbounded growth on a bridge nobody scrapes (the P2 soak
/// found it: about 100 bytes per finished tool).
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// What kind of Prometheus family a metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Set to the current figure.
    Gauge,
    /// Exported as a summary (quantiles over the recent window, `_sum`, `_count`).
    Histogram,
}

/// The values a label takes.
#[derive(Debug, Clone, Copy)]
pub enum Values {
    /// A fixed vocabulary: every value is registered at start-up.
    Known(&'static [&'static str]),
    /// The chat platform this process serves (registered with its name).
    Platform,
    /// The `[[projects]]` entry (registered with each configured name; without `[[projects]]` the
    /// label is left out, so the one-project configuration's series keep their shape).
    Project,
}

/// The configured project names, for [`Values::Project`].
static PROJECTS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Names the configured projects (before [`register`]): their families are registered per project.
pub fn set_projects(names: impl IntoIterator<Item = String>) {
    let mut known = PROJECTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for n in names {
        if !known.contains(&n) {
            known.push(n);
        }
    }
}

/// One metric family the bridge exports.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    /// `chatbridge_…`.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: Kind,
    /// The `# HELP` line.
    pub help: &'static str,
    /// Label names and the values each takes; every combination is registered.
    pub labels: &'static [(&'static str, Values)],
}

/// Every [`daemon_client::DaemonEvent`] kind name.
const EVENT_KINDS: &[&str] = daemon_client::DaemonEvent::NAMES;
const TOOL_OUTCOMES: &[&str] = &["completed", "failed", "timed_out", "cancelled"];
const TURN_STATUSES: &[&str] = &["ended", "cancelled", "stalled", "interrupted"];
const DELIVERY_RESULTS: &[&str] = &["ok", "retried", "rate_limited", "dead_lettered", "skipped"];
const API_METHODS: &[&str] = &["post", "edit"];
const API_ERRORS: &[&str] = &["rate_limited", "temporary", "permanent"];
const ROLES: &[&str] = &["starting", "standby", "active", "stopping"];

/// Every family `/metrics` exports, in the order of `docs/operations.md`.
pub const FAMILIES: &[Family] = &[
    Family {
        name: "chatbridge_replica_active",
        kind: Kind::Gauge,
        help: "1 on the active replica (it holds the leader lease), 0 otherwise",
        labels: &[],
    },
    Family {
        name: "chatbridge_replica_role",
        kind: Kind::Gauge,
        help: "1 for this replica's current role, 0 for the others",
        labels: &[("role", Values::Known(ROLES))],
    },
    Family {
        name: "chatbridge_ready",
        kind: Kind::Gauge,
        help: "1 when /readyz answers 200 on this replica, 0 when it answers 503",
        labels: &[],
    },
    Family {
        name: "chatbridge_daemon_connected",
        kind: Kind::Gauge,
        help: "1 while the daemon WebSocket is up (active replica; 0 on standbys)",
        labels: &[("project", Values::Project)],
    },
    Family {
        name: "chatbridge_daemon_reconnects_total",
        kind: Kind::Counter,
        help: "Daemon connections re-established (open sessions reloaded)",
        labels: &[("project", Values::Project)],
    },
    Family {
        name: "chatbridge_daemon_events_total",
        kind: Kind::Counter,
        help: "Daemon frames by event kind",
        labels: &[
            ("kind", Values::Known(EVENT_KINDS)),
            ("project", Values::Project),
        ],
    },
    Family {
        name: "chatbridge_heartbeats_total",
        kind: Kind::Counter,
        help: "Heartbeats (kind-less in_progress updates): silent commands proven alive",
        labels: &[("project", Values::Project)],
    },
    Family {
        name: "chatbridge_malformed_frames_total",
        kind: Kind::Counter,
        help: "Daemon frames that could not be understood (skipped; the session carries on)",
        labels: &[("project", Values::Project)],
    },
    Family {
        name: "chatbridge_tool_results_total",
        kind: Kind::Counter,
        help: "Tool results by outcome",
        labels: &[
            ("outcome", Values::Known(TOOL_OUTCOMES)),
            ("project", Values::Project),
        ],
    },
    Family {
        name: "chatbridge_tool_duration_seconds",
        kind: Kind::Histogram,
        help: "Tool call duration, start to result, by outcome",
        labels: &[
            ("outcome", Values::Known(TOOL_OUTCOMES)),
            ("project", Values::Project),
        ],
    },
    Family {
        name: "chatbridge_turn_duration_seconds",
        kind: Kind::Histogram,
        help: "Prompt to end of turn, by how the turn ended",
        labels: &[
            ("status", Values::Known(TURN_STATUSES)),
            ("project", Values::Project),
        ],
    },
    Family {
        name: "chatbridge_stalls_total",
        kind: Kind::Counter,
        help: "Turns that went silent past liveness.idle (or ran past liveness.wall)",
        labels: &[("project", Values::Project)],
    },
    Family {
        name: "chatbridge_turn_oldest_open_age_seconds",
        kind: Kind::Gauge,
        help: "Age of the oldest turn still open (0 when none is)",
        labels: &[],
    },
    Family {
        name: "chatbridge_outbox_pending",
        kind: Kind::Gauge,
        help: "Chat actions not yet delivered",
        labels: &[],
    },
    Family {
        name: "chatbridge_outbox_oldest_pending_age_seconds",
        kind: Kind::Gauge,
        help: "Age of the oldest chat action not yet delivered (0 when none is)",
        labels: &[],
    },
    Family {
        name: "chatbridge_outbox_dead_letters",
        kind: Kind::Gauge,
        help: "Chat actions the platform refused for good",
        labels: &[],
    },
    Family {
        name: "chatbridge_deliveries_total",
        kind: Kind::Counter,
        help: "Chat action delivery attempts by result",
        labels: &[("result", Values::Known(DELIVERY_RESULTS))],
    },
    Family {
        name: "chatbridge_chat_api_seconds",
        kind: Kind::Histogram,
        help: "Latency of chat API calls by platform and method",
        labels: &[
            ("platform", Values::Platform),
            ("method", Values::Known(API_METHODS)),
        ],
    },
    Family {
        name: "chatbridge_chat_api_errors_total",
        kind: Kind::Counter,
        help: "Chat API calls that failed, by platform, method and error (rate_limited: 429; temporary: 5xx or network; permanent: refused for good)",
        labels: &[
            ("platform", Values::Platform),
            ("method", Values::Known(API_METHODS)),
            ("error", Values::Known(API_ERRORS)),
        ],
    },
    Family {
        name: "chatbridge_inbound_duplicates_total",
        kind: Kind::Counter,
        help: "Platform events seen twice and ignored",
        labels: &[("platform", Values::Platform)],
    },
    Family {
        name: "chatbridge_inbound_dead_letters_total",
        kind: Kind::Counter,
        help: "Chat events set aside after repeated failed handling",
        labels: &[("platform", Values::Platform)],
    },
    Family {
        name: "chatbridge_inbound_unrouted_total",
        kind: Kind::Counter,
        help: "Chat events from a channel bound to no project, with no default_project (ignored)",
        labels: &[("platform", Values::Platform)],
    },
    Family {
        name: "chatbridge_access_refusals_total",
        kind: Kind::Counter,
        help: "Messages and clicks refused by the access rules (A1, A2)",
        labels: &[("platform", Values::Platform)],
    },
    Family {
        name: "chatbridge_conversations_in_memory",
        kind: Kind::Gauge,
        help: "Conversations held in memory",
        labels: &[("project", Values::Project)],
    },
    Family {
        name: "chatbridge_store_step_retries_total",
        kind: Kind::Counter,
        help: "Conversation steps taken again after the database failed them for the moment",
        labels: &[],
    },
    Family {
        name: "chatbridge_store_steps_given_up_total",
        kind: Kind::Counter,
        help: "Conversation steps given up after the database failed them for longer than their retries last (about 8 minutes)",
        labels: &[],
    },
    Family {
        name: "chatbridge_store_steps_waiting",
        kind: Kind::Gauge,
        help: "Conversation steps waiting for the database to take them after a failure",
        labels: &[],
    },
];

/// Counts a message or click refused by the access rules (A1, A2) on `platform`.
pub fn access_refused(platform: &str) {
    metrics::counter!("chatbridge_access_refusals_total", "platform" => platform.to_owned())
        .increment(1);
}

/// The `error` label of a failed chat API call.
#[must_use]
pub fn delivery_error(e: &crate::channel::DeliveryError) -> &'static str {
    match e {
        crate::channel::DeliveryError::RateLimited(_) => "rate_limited",
        crate::channel::DeliveryError::Temporary(_) => "temporary",
        crate::channel::DeliveryError::Permanent(_) => "permanent",
    }
}

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
                describe();
                Some(h)
            }
            Err(e) => {
                tracing::warn!(error = %e, "metrics recorder not installed");
                None
            }
        })
        .as_ref()
}

fn describe() {
    for f in FAMILIES {
        match f.kind {
            Kind::Counter => metrics::describe_counter!(f.name, f.help),
            Kind::Gauge => metrics::describe_gauge!(f.name, f.help),
            Kind::Histogram => metrics::describe_histogram!(f.name, f.help),
        }
    }
}

/// Installs the recorder and registers every family of [`FAMILIES`] with each of its known label
/// values, `platform` labels with `platform`. Safe to call again: counters and gauges keep their
/// values (registering adds 0).
pub fn register(platform: &str) {
    if handle().is_none() {
        return;
    }
    for f in FAMILIES {
        for labels in combinations(f, platform) {
            match f.kind {
                Kind::Counter => metrics::counter!(f.name, labels.clone()).increment(0),
                Kind::Gauge => metrics::gauge!(f.name, labels.clone()).increment(0.0),
                Kind::Histogram => {
                    let _ = metrics::histogram!(f.name, labels.clone());
                }
            }
        }
    }
}

/// Every label set of `family`: the cartesian product of its labels' values.
fn combinations(family: &Family, platform: &str) -> Vec<Vec<metrics::Label>> {
    let mut sets: Vec<Vec<metrics::Label>> = vec![Vec::new()];
    for (name, values) in family.labels {
        let values: Vec<String> = match values {
            Values::Known(v) => v.iter().map(|s| (*s).to_owned()).collect(),
            Values::Platform => vec![platform.to_owned()],
            Values::Project => {
                let known = PROJECTS
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .clone();
                if known.is_empty() {
                    continue;
                }
                known
            }
        };
        sets = sets
            .into_iter()
            .flat_map(|set| {
                values.iter().map(move |v| {
                    let mut set = set.clone();
                    set.push(metrics::Label::new(*name, v.clone()));
                    set
                })
            })
            .collect();
    }
    sets
}

/// Sets the figures read at scrape time: this replica's role and readiness, the daemon link, the
/// outbox queue and the oldest open turn (the last two from the database, shared by all replicas).
pub async fn refresh(store: &Store, status: &Status, now: i64) {
    let role = status.role();
    for r in [Role::Starting, Role::Standby, Role::Active, Role::Stopping] {
        metrics::gauge!("chatbridge_replica_role", "role" => r.name()).set(if r == role {
            1.0
        } else {
            0.0
        });
    }
    let (ready, _) = status.readiness(store).await;
    metrics::gauge!("chatbridge_ready").set(if ready { 1.0 } else { 0.0 });
    let projects = status.project_daemons();
    if projects.is_empty() {
        metrics::gauge!("chatbridge_daemon_connected").set(
            if status.daemon_connected() == Some(true) {
                1.0
            } else {
                0.0
            },
        );
    }
    for (project, up) in projects {
        metrics::gauge!("chatbridge_daemon_connected", "project" => project).set(if up {
            1.0
        } else {
            0.0
        });
    }
    if let Ok(mut c) = store.read_conn().await {
        if let Ok(stats) = crate::store::outbox::stats(&mut c, now).await {
            metrics::gauge!("chatbridge_outbox_pending").set(stats.pending as f64);
            metrics::gauge!("chatbridge_outbox_oldest_pending_age_seconds")
                .set(stats.oldest_pending_age_ms as f64 / 1000.0);
            metrics::gauge!("chatbridge_outbox_dead_letters").set(stats.dead as f64);
        }
        if let Ok(oldest) = crate::store::turns::oldest_open_started_at(&mut c).await {
            let age = oldest.map_or(0, |t| (now - t).max(0));
            metrics::gauge!("chatbridge_turn_oldest_open_age_seconds").set(age as f64 / 1000.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_named_chatbridge_and_counters_end_in_total() {
        for f in FAMILIES {
            assert!(f.name.starts_with("chatbridge_"), "{}", f.name);
            assert_eq!(
                f.kind == Kind::Counter,
                f.name.ends_with("_total"),
                "{}: counters and only counters end in _total",
                f.name
            );
        }
    }

    #[test]
    fn label_combinations_are_the_product_of_the_values() {
        let api = FAMILIES
            .iter()
            .find(|f| f.name == "chatbridge_chat_api_seconds")
            .expect("family");
        let sets = combinations(api, "slack");
        assert_eq!(sets.len(), API_METHODS.len());
        assert!(
            sets.iter()
                .all(|s| s.len() == 2 && s[0].key() == "platform" && s[0].value() == "slack")
        );
        let plain = FAMILIES
            .iter()
            .find(|f| f.name == "chatbridge_stalls_total")
            .expect("family");
        assert_eq!(combinations(plain, "slack"), vec![Vec::new()]);
    }

    /// Issue 15 item 7: the documentation and the code name the same families (the binary test
    /// `metrics_at_start` checks what a fresh process actually exports).
    #[test]
    fn every_documented_family_is_declared_and_every_declared_one_documented() {
        let docs = include_str!("../../docs/operations.md");
        let table: std::collections::BTreeSet<&str> = docs
            .lines()
            .filter_map(|l| l.strip_prefix("| `chatbridge_"))
            .filter_map(|rest| rest.split(['`', '{']).next())
            .collect();
        let declared: std::collections::BTreeSet<&str> = FAMILIES
            .iter()
            .map(|f| f.name.trim_start_matches("chatbridge_"))
            .collect();
        assert_eq!(
            table, declared,
            "docs/operations.md's metric table vs FAMILIES"
        );
    }
}
