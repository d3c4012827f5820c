//! The real qwen-code captures: one JSON-RPC message per line with its direction and connection.

use serde_json::Value;

/// One captured message.
#[derive(Debug, Clone)]
pub struct Line {
    /// Recorder connection (1 or 2).
    pub conn: u64,
    /// `true` for daemon → client.
    pub inbound: bool,
    /// The JSON-RPC message.
    pub msg: Value,
}

/// Reads `shared/fixtures/acp-qwen-0.24.4/<name>`.
///
/// # Panics
/// When the capture is missing or not JSON lines: the tests cannot run without it.
#[must_use]
pub fn load(name: &str) -> Vec<Line> {
    let path = crate::shared_dir()
        .join("fixtures/acp-qwen-0.24.4")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("capture {}: {e}", path.display()));
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{name}: {e}"));
            Line {
                conn: v["conn"].as_u64().unwrap_or(1),
                inbound: v["dir"] == "in",
                msg: v["msg"].clone(),
            }
        })
        .collect()
}
