//! Issue 15 item 7: metrics exist before the first event. The real `chat-bridge` binary, freshly
//! started on its embedded default with `http.listen` set, is scraped once before anything happened:
//! `/metrics` lists every family `docs/operations.md` and `docs/configuration.md` document, each
//! counter already at 0 for its known label values (so `rate()` and `increase()` alerts see the first
//! event), and no family the docs do not describe.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

#[allow(dead_code)] // `piped` serves the other binary tests
mod binary;

/// Stops the bridge however the test ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn scrape(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to /metrics");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("request");
    let mut body = String::new();
    s.read_to_string(&mut body).expect("response");
    assert!(
        body.starts_with("HTTP/1.0 200") || body.starts_with("HTTP/1.1 200"),
        "{body}"
    );
    body.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default()
}

/// Every `chatbridge_*` name the two documents mention.
fn documented() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for doc in ["operations.md", "configuration.md"] {
        let path = format!("{}/../docs/{doc}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).expect("docs");
        for (i, _) in text.match_indices("chatbridge_") {
            let name: String = text[i..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            names.insert(name.trim_end_matches('_').to_owned());
        }
    }
    names
}

#[test]
fn a_fresh_bridge_exports_every_documented_family_with_counters_at_zero() {
    let dir = tempfile::tempdir().expect("tmp");
    let child = binary::command(
        dir.path(),
        &[
            ("CHAT_BRIDGE_HTTP__LISTEN", "127.0.0.1:0"),
            ("CHAT_BRIDGE_SERVICE__PLATFORM", "console"),
            ("CHAT_BRIDGE_LOG", "info"),
        ],
    )
    // The console reads stdin: a pipe held open keeps the bridge serving.
    .stdin(Stdio::piped())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .expect("start chat-bridge");
    let mut bridge = Running(child);
    let stderr = bridge.0.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("HTTP listening") {
                let _ = tx.send(line);
            }
        }
    });
    let line = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the bridge says where HTTP listens");
    let start = line.find("127.0.0.1:").expect("address in the log line");
    let addr: String = line[start..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
        .collect();

    let text = scrape(&addr);
    // family -> (type, samples)
    let mut families: BTreeMap<String, (String, Vec<(String, f64)>)> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE line");
            families.insert(name.to_owned(), (kind.to_owned(), Vec::new()));
        } else if !line.starts_with('#') && !line.is_empty() {
            let (series, value) = line.rsplit_once(' ').expect("sample line");
            let name = series.split('{').next().unwrap_or(series);
            let family = name
                .strip_suffix("_sum")
                .or_else(|| name.strip_suffix("_count"))
                .filter(|f| families.contains_key(*f))
                .unwrap_or(name);
            let value: f64 = value.parse().expect("a number");
            families
                .get_mut(family)
                .unwrap_or_else(|| panic!("{name} has no # TYPE line"))
                .1
                .push((series.to_owned(), value));
        }
    }

    let docs = documented();
    let exported: BTreeSet<String> = families.keys().cloned().collect();
    let missing: Vec<_> = docs.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "documented but not exported at start-up: {missing:?}\n{text}"
    );
    let undocumented: Vec<_> = exported.difference(&docs).collect();
    assert!(
        undocumented.is_empty(),
        "exported but not documented: {undocumented:?}"
    );

    for (name, (kind, samples)) in &families {
        assert!(!samples.is_empty(), "{name} has no series at start-up");
        if kind == "counter" {
            assert!(
                samples.iter().all(|(_, v)| *v == 0.0),
                "{name} is not at 0 before any event: {samples:?}"
            );
        }
    }
    // Counters with a vocabulary have every value registered, not just the first one seen.
    let series = |family: &str| -> Vec<String> {
        families[family].1.iter().map(|(s, _)| s.clone()).collect()
    };
    for outcome in ["completed", "failed", "timed_out", "cancelled"] {
        let want = format!("chatbridge_tool_results_total{{outcome=\"{outcome}\"}}");
        assert!(
            series("chatbridge_tool_results_total").contains(&want),
            "{want}"
        );
    }
    for result in ["ok", "retried", "rate_limited", "dead_lettered", "skipped"] {
        let want = format!("chatbridge_deliveries_total{{result=\"{result}\"}}");
        assert!(
            series("chatbridge_deliveries_total").contains(&want),
            "{want}"
        );
    }
    assert!(
        series("chatbridge_inbound_dead_letters_total")
            .contains(&"chatbridge_inbound_dead_letters_total{platform=\"console\"}".to_owned()),
        "platform labels carry the platform served"
    );
    assert!(
        series("chatbridge_replica_role")
            .iter()
            .any(|s| s.contains("role=\"active\"")),
        "the replica's role is exported"
    );
    assert!(
        text.contains("# HELP chatbridge_stalls_total "),
        "families carry their help text"
    );
}
