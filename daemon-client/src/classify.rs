//! Frame classification: bytes in, one [`Inbound`] out (the F-rules).
//!
//! [`Classifier`] owns the per-session tool-call state that F4 needs (a call that is terminal stays
//! terminal), so it lives as long as the connection's sessions do. It never panics on input and never
//! fails: what it cannot understand becomes [`DaemonEvent::Malformed`], what it does not act on
//! becomes [`DaemonEvent::Other`].

use std::borrow::Cow;
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use serde_json::value::RawValue;

use crate::event::{
    DaemonEvent, Outcome, PermissionRequest, PlanEntry, ShellProgress, StopReason, ToolInfo,
    ToolResult,
};
use crate::fold::{Fold, FoldSlot};
use crate::ids::{RequestId, SessionId, ToolCallId};
use crate::shape::Shape;
use crate::wire::{
    Envelope, FastParams, FastUpdate, Meta, MetaSource, PermissionParams, RawMeta, RpcErrorObject,
    Update, UpdateParams, VendorData, VendorNotify,
};

/// How many settled tool calls a session remembers for F4 before forgetting the oldest. Late frames
/// follow their call's end closely; a replay of a whole session (`session/load`) is filtered again by
/// the bridge's store, which applies a result once. 64 per session, kept as hashes (about 17 bytes
/// each), keeps a long-running bridge's memory flat (the P2 soak found 4,096 ids growing for hours:
/// ~100 bytes per call per session).
const SETTLED_MEMORY: usize = 64;

/// The classified form of one inbound frame.
#[derive(Debug)]
pub enum Inbound {
    /// A notification: exactly one event.
    Event(DaemonEvent),
    /// A request from the daemon that needs an answer carrying `id`.
    Request {
        /// The id the answer must carry.
        id: RequestId,
        /// The method, to answer "method not found" for the ones we do not serve.
        method: String,
        /// The classified request (`PermissionRequested`, or `Other`).
        event: DaemonEvent,
    },
    /// A response to one of our requests.
    Response {
        /// The id of our request.
        id: RequestId,
        /// The `result`, or the `error` object.
        result: Result<Box<RawValue>, RpcErrorObject>,
    },
    /// A vendor "turn complete" notification (qwen's `_qwen/notify` `turn_complete`, shell-agent's
    /// `_shell_agent/turn_complete`, agent-host's `_agent_host/turn_complete`). The bridge sees it as `Other`; the client uses it to close a turn
    /// whose `session/prompt` response was lost with a dropped connection.
    VendorTurnComplete {
        /// The event the bridge sees (`Other`).
        event: DaemonEvent,
        /// The session whose turn ended.
        session: SessionId,
        /// Its stop reason.
        stop_reason: StopReason,
    },
}

/// Counters the classifier keeps; the bridge exports them as metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ClassifierStats {
    /// Frames classified.
    pub frames: u64,
    /// Heartbeats (F1).
    pub heartbeats: u64,
    /// Malformed frames (F2).
    pub malformed: u64,
    /// Late updates ignored (F4).
    pub late: u64,
}

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Open calls are remembered up to this many per session; past it the oldest are forgotten (a daemon
/// that never settles its calls must not grow our memory).
const OPEN_MEMORY: usize = 4096;

/// One session's tool calls: open ids interned (so the hot path allocates nothing for known ids) and
/// the settled ones remembered for F4 — as 64-bit hashes, 8 bytes each instead of the id string, so
/// the memory a long-running bridge settles into stays small. (Two ids of one session colliding
/// within its last 64 settled calls is a 1-in-2^58 event; it would drop one late update.)
#[derive(Debug)]
struct SessionCalls {
    /// The session's id, interned (handed out by clone, never allocated again).
    id: SessionId,
    /// Each open call with where it sits in the classifier's fold, if it was folded lately.
    open: Map<ToolCallId, FoldSlot>,
    settled: HashSet<u64, foldhash::fast::FixedState>,
    order: VecDeque<u64>,
}

/// The settled-set key of a tool-call id (fixed seed: stable for the process).
fn settled_key(call: &str) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0x5e77_1ed0_f4f4_f4f4).hash_one(call)
}

impl SessionCalls {
    fn new(id: SessionId) -> Self {
        Self {
            id,
            open: Map::default(),
            settled: HashSet::default(),
            order: VecDeque::new(),
        }
    }

    fn is_settled(&self, call: &str) -> bool {
        self.settled.contains(&settled_key(call))
    }

    /// The interned id for `call` and whether it is already terminal; `None` for an invalid id.
    fn intern(&mut self, call: &str) -> Option<(ToolCallId, bool)> {
        if let Some((id, _)) = self.open.get_key_value(call) {
            return Some((id.clone(), false));
        }
        if self.is_settled(call) {
            // A late frame (rare): its id is parsed again rather than kept.
            return ToolCallId::parse(call).ok().map(|id| (id, true));
        }
        let id = ToolCallId::parse(call).ok()?;
        if self.open.len() >= OPEN_MEMORY {
            self.open.clear();
        }
        self.open.insert(id.clone(), FoldSlot::default());
        Some((id, false))
    }

    fn settle(&mut self, call: &ToolCallId) {
        self.open.remove(call.as_str());
        let key = settled_key(call.as_str());
        if self.settled.insert(key) {
            self.order.push_back(key);
            if self.order.len() > SETTLED_MEMORY
                && let Some(old) = self.order.pop_front()
            {
                self.settled.remove(&old);
            }
        }
    }
}

/// Turns frames into events, keeping the F4 state per session.
#[derive(Debug, Default)]
pub struct Classifier {
    sessions: Map<SessionId, SessionCalls>,
    stats: ClassifierStats,
    /// The last heartbeat's shape, which the next heartbeats are checked against before the reader
    /// reads them (`crate::shape`).
    shape: Option<Shape>,
    /// Heartbeats the reader read since the shape was learned (they missed it): past
    /// [`RELEARN_AFTER`], the next one's shape is learned instead.
    shape_misses: u32,
    /// Heartbeats folded for the connection that reads with [`Self::classify_folding`] (F1).
    fold: Fold,
}

/// Heartbeats of another shape before the classifier learns theirs: a daemon that changed its
/// heartbeat is followed soon, one that alternates two costs a learning every so many frames.
const RELEARN_AFTER: u32 = 32;

/// A frame that failed to decode: the reason carries no frame content (R4).
fn json_error(e: &serde_json::Error) -> String {
    format!(
        "{:?} error at line {} column {}",
        e.classify(),
        e.line(),
        e.column()
    )
}

impl Classifier {
    /// A classifier with no sessions.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Counters so far.
    #[must_use]
    pub fn stats(&self) -> ClassifierStats {
        self.stats
    }

    /// Forgets a session's tool-call state (after `/new`, or when its conversation is closed).
    pub fn forget_session(&mut self, session: &str) {
        self.sessions.remove(session);
    }

    /// Whether `call` of `session` is already terminal.
    #[must_use]
    pub fn is_settled(&self, session: &str, call: &str) -> bool {
        self.sessions
            .get(session)
            .is_some_and(|s| s.is_settled(call))
    }

    /// Classifies one text frame. Never panics, never fails.
    pub fn classify(&mut self, bytes: &[u8]) -> Inbound {
        // UTF-8 is checked once here; the decodes below read a `&str` and do not check it again in
        // every string they meet.
        match std::str::from_utf8(bytes) {
            Ok(text) => self.classify_text(text),
            // Not UTF-8: serde_json reads the bytes and says where they fail.
            Err(_) => {
                self.stats.frames += 1;
                let inbound = self.classify_serde_bytes(bytes);
                self.count(&inbound);
                inbound
            }
        }
    }

    /// [`Self::classify`] of a frame already known to be UTF-8 (a WebSocket text frame, which the
    /// transport checked): the same classification, without checking its bytes a second time.
    pub fn classify_text(&mut self, text: &str) -> Inbound {
        self.stats.frames += 1;
        // A heartbeat shaped as the last one: its ids and numbers are all there is to read.
        if let Some(event) = self
            .shape
            .as_ref()
            .and_then(|s| s.read(text))
            .and_then(|b| self.heartbeat(b.session, b.call, b.progress))
            .map(Inbound::Event)
        {
            self.count(&event);
            return event;
        }
        // The hot path: a `session/update` read by hand in one validating pass.
        let mut p = UpdateParams {
            session_id: None,
            update: None,
        };
        let inbound = match crate::scan::session_update(text, &mut p) {
            Some(()) => {
                self.learn(text, &p);
                Inbound::Event(self.scanned_update(&mut p))
            }
            None => self.classify_serde_text(text),
        };
        self.count(&inbound);
        inbound
    }

    /// [`Self::classify_text`] for the connection's reader, which hands heartbeats on folded (F1):
    /// a heartbeat of a known session's open call is folded here, into [`Self::fold`], and `None`
    /// returned; every other frame is classified as by [`Self::classify_text`]. A heartbeat shaped
    /// as the last one is folded in place — no event made, no id cloned, one lookup of each id, the
    /// fold's place kept with the call (issue 20, item 4).
    pub(crate) fn classify_folding(&mut self, text: &str) -> Option<Inbound> {
        if let Some(beat) = self.shape.as_ref().and_then(|s| s.read(text))
            && self.fold_open(beat.session, beat.call, beat.progress, 1)
        {
            self.stats.frames += 1;
            self.stats.heartbeats += 1;
            return None;
        }
        match self.classify_text(text) {
            // Read by the reader (the first of a call, or of another shape): folded the same way,
            // so a call's heartbeats make one event however each was read.
            Inbound::Event(DaemonEvent::ToolProgress {
                session,
                call,
                progress,
                beats,
            }) => {
                if self.fold_open(session.as_str(), call.as_str(), progress, beats) {
                    return None;
                }
                Some(Inbound::Event(DaemonEvent::ToolProgress {
                    session,
                    call,
                    progress,
                    beats,
                }))
            }
            other => Some(other),
        }
    }

    /// Folds `beats` heartbeats of `call` in `session` into the call's event when the call is open
    /// (its place kept with it); `false` when it is not, and nothing was folded.
    fn fold_open(
        &mut self,
        session: &str,
        call: &str,
        progress: ShellProgress,
        beats: u32,
    ) -> bool {
        let Some(calls) = self.sessions.get(session) else {
            return false;
        };
        let Some((id, slot)) = calls.open.get_key_value(call) else {
            return false;
        };
        self.fold.beat(&calls.id, id, slot, progress, beats);
        true
    }

    /// The heartbeats folded for the connection's reader.
    pub(crate) fn fold(&mut self) -> &mut Fold {
        &mut self.fold
    }

    /// [`Self::classify`] without the hand-written reader: what every frame it is unsure of takes
    /// (and, in tests, the reference it must agree with).
    #[cfg(test)]
    fn classify_serde(&mut self, bytes: &[u8]) -> Inbound {
        self.stats.frames += 1;
        let inbound = match std::str::from_utf8(bytes) {
            Ok(text) => self.classify_serde_text(text),
            Err(_) => self.classify_serde_bytes(bytes),
        };
        self.count(&inbound);
        inbound
    }

    fn count(&mut self, inbound: &Inbound) {
        match inbound {
            Inbound::Event(DaemonEvent::Malformed { .. }) => self.stats.malformed += 1,
            Inbound::Event(DaemonEvent::ToolProgress { .. }) => self.stats.heartbeats += 1,
            Inbound::Event(DaemonEvent::LateUpdate { .. }) => self.stats.late += 1,
            _ => {}
        }
    }

    /// The serde path of a UTF-8 frame: lone surrogate escapes repaired (S4), a borrowed typed
    /// decode of `session/update`, and the lenient path for every other frame.
    fn classify_serde_text(&mut self, text: &str) -> Inbound {
        let repaired = without_lone_surrogates(text);
        let text = repaired.as_deref().unwrap_or(text);
        match serde_json::from_str::<FastUpdate<'_>>(text) {
            // One pass, `_meta` typed in place.
            Ok(FastUpdate {
                id: None,
                method: Some("session/update"),
                params: Some(p),
            }) => Inbound::Event(self.fast_update(p)),
            _ => self.classify_lenient_text(text),
        }
    }

    /// The serde path of a frame that is not UTF-8.
    fn classify_serde_bytes(&mut self, bytes: &[u8]) -> Inbound {
        match serde_json::from_slice::<FastUpdate<'_>>(bytes) {
            Ok(FastUpdate {
                id: None,
                method: Some("session/update"),
                params: Some(p),
            }) => Inbound::Event(self.fast_update(p)),
            _ => self.classify_lenient(bytes),
        }
    }

    /// Every other frame, and hot-path frames whose shape surprised the fast decode.
    fn classify_lenient(&mut self, bytes: &[u8]) -> Inbound {
        self.lenient(serde_json::from_slice::<Envelope<'_>>(bytes))
    }

    /// [`Self::classify_lenient`] of a frame already known to be UTF-8.
    fn classify_lenient_text(&mut self, text: &str) -> Inbound {
        self.lenient(serde_json::from_str::<Envelope<'_>>(text))
    }

    fn lenient(&mut self, env: Result<Envelope<'_>, serde_json::Error>) -> Inbound {
        match env {
            Ok(env) => self.classify_envelope(env),
            Err(e) => Inbound::Event(malformed(
                None,
                format!("frame is not a JSON-RPC object: {}", json_error(&e)),
            )),
        }
    }

    fn classify_envelope(&mut self, env: Envelope<'_>) -> Inbound {
        let Envelope {
            id,
            method,
            params,
            result,
            error,
        } = env;
        match (id, method) {
            (Some(id), None) => Inbound::Response {
                id,
                result: match error {
                    Some(e) => Err(e),
                    None => Ok(result.map_or_else(null_raw, ToOwned::to_owned)),
                },
            },
            (None, Some(method)) => self.notification(&method, params),
            (Some(id), Some(method)) => {
                let event = if method == "session/request_permission" {
                    permission(id.clone(), params)
                } else {
                    DaemonEvent::Other {
                        session: None,
                        method: method.clone().into_owned(),
                        kind: None,
                        stop_reason: None,
                    }
                };
                if let DaemonEvent::Malformed { .. } = event {
                    self.stats.malformed += 1;
                }
                Inbound::Request {
                    id,
                    method: method.into_owned(),
                    event,
                }
            }
            (None, None) => Inbound::Event(malformed(
                None,
                "frame has neither a method nor an id".into(),
            )),
        }
    }

    fn notification(&mut self, method: &str, params: Option<&RawValue>) -> Inbound {
        match method {
            "session/update" => Inbound::Event(self.session_update(params)),
            "_qwen/notify" | "_shell_agent/turn_complete" | "_agent_host/turn_complete" => {
                vendor_notify(method, params)
            }
            other => Inbound::Event(DaemonEvent::Other {
                session: None,
                method: other.to_owned(),
                kind: None,
                stop_reason: None,
            }),
        }
    }

    fn session_update(&mut self, params: Option<&RawValue>) -> DaemonEvent {
        let Some(params) = params else {
            return malformed(None, "session/update without params".into());
        };
        match serde_json::from_str::<UpdateParams<'_, RawMeta<'_>>>(params.get()) {
            Ok(mut p) => self.update_params(&mut p),
            Err(e) => malformed(
                session_named(params.get()),
                format!("session/update params: {}", json_error(&e)),
            ),
        }
    }

    /// Taken by reference: the decoded update is large, and moving it costs more than reading it.
    fn update_params<'a, M: MetaSource<'a>>(&mut self, p: &mut UpdateParams<'a, M>) -> DaemonEvent {
        let Some(session) = p.session_id.as_deref().and_then(|s| self.intern_session(s)) else {
            return malformed(None, "session/update without a valid sessionId".into());
        };
        let Some(update) = p.update.as_mut() else {
            return malformed(Some(session), "session/update without an update".into());
        };
        let Some(kind) = update.session_update.as_deref() else {
            return malformed(Some(session), "update without sessionUpdate".into());
        };
        match kind {
            "agent_message_chunk" => chunk(session, update, false),
            "agent_thought_chunk" => chunk(session, update, true),
            "user_message_chunk" => match chunk(session, update, false) {
                DaemonEvent::AgentText { session, text } => DaemonEvent::UserText { session, text },
                other => other,
            },
            "tool_call" | "tool_call_update" => {
                self.tool_update(session, kind == "tool_call", update)
            }
            "plan" => plan(session, update),
            other => DaemonEvent::Other {
                session: Some(session),
                method: "session/update".into(),
                kind: Some(other.to_owned()),
                stop_reason: None,
            },
        }
    }

    /// The single-pass path: heartbeats are classified straight from the borrowed fields (the most
    /// frequent frame); every other update goes through the common update logic.
    fn fast_update(&mut self, p: FastParams<'_>) -> DaemonEvent {
        if let (Some(sid), Some(u)) = (p.session_id, &p.update)
            && let (Some(progress), Some(call)) = (u.heartbeat(), u.tool_call_id)
            && let Some(event) = self.heartbeat(sid, call, progress)
        {
            return event;
        }
        self.update_params(&mut p.into())
    }

    /// A `session/update` the hand-written reader read: heartbeats straight from its fields, as
    /// [`Self::fast_update`] does; every other update through the common update logic.
    fn scanned_update<'a>(&mut self, p: &mut UpdateParams<'a, Option<Meta<'a>>>) -> DaemonEvent {
        if let (Some(sid), Some(u)) = (p.session_id.as_deref(), &p.update)
            && let (Some(progress), Some(call)) = (u.heartbeat(), u.tool_call_id.as_deref())
            && let Some(event) = self.heartbeat(sid, call, progress)
        {
            return event;
        }
        self.update_params(p)
    }

    /// The event of a heartbeat (F1) of session `sid`'s call `call`; `None` when `sid` is no valid
    /// session id (the frame then takes the general path, which says so).
    fn heartbeat(&mut self, sid: &str, call: &str, progress: ShellProgress) -> Option<DaemonEvent> {
        let calls = match self.sessions.get_mut(sid) {
            Some(calls) => calls,
            None => {
                self.intern_session(sid)?;
                self.sessions.get_mut(sid)?
            }
        };
        let session = calls.id.clone();
        Some(match calls.intern(call) {
            Some((call, true)) => DaemonEvent::LateUpdate { session, call },
            Some((call, false)) => DaemonEvent::ToolProgress {
                session,
                call,
                progress,
                beats: 1,
            },
            None => malformed(
                Some(session),
                "tool_call_update without a valid toolCallId".into(),
            ),
        })
    }

    /// Learns the shape of `text`, which the reader read into `p`, when it is a heartbeat and no
    /// shape is held, or the held one has missed [`RELEARN_AFTER`] heartbeats.
    fn learn<'a>(&mut self, text: &'a str, p: &UpdateParams<'a, Option<Meta<'a>>>) {
        let (Some(Cow::Borrowed(sid)), Some(u)) = (&p.session_id, &p.update) else {
            return;
        };
        let (Some(progress), Some(Cow::Borrowed(call))) = (u.heartbeat(), &u.tool_call_id) else {
            return;
        };
        if self.shape.is_some() {
            self.shape_misses += 1;
            if self.shape_misses < RELEARN_AFTER {
                return;
            }
        }
        self.shape_misses = 0;
        if let Some(shape) = Shape::learn(text, sid, call, progress) {
            self.shape = Some(shape);
        }
    }

    /// The tool calls of an interned session.
    fn calls(&mut self, session: &SessionId) -> &mut SessionCalls {
        self.sessions
            .entry(session.clone())
            .or_insert_with(|| SessionCalls::new(session.clone()))
    }

    /// The interned id of a session (allocated once per session, not per frame).
    fn intern_session(&mut self, id: &str) -> Option<SessionId> {
        if let Some(known) = self.sessions.get(id) {
            return Some(known.id.clone());
        }
        let session = SessionId::parse(id).ok()?;
        self.sessions
            .insert(session.clone(), SessionCalls::new(session.clone()));
        Some(session)
    }

    fn tool_update<'a, M: MetaSource<'a>>(
        &mut self,
        session: SessionId,
        start: bool,
        u: &mut Update<'a, M>,
    ) -> DaemonEvent {
        let calls = self.calls(&session);
        let Some((call, settled)) = u.tool_call_id.as_deref().and_then(|c| calls.intern(c)) else {
            let what = if start {
                "tool_call"
            } else {
                "tool_call_update"
            };
            return malformed(Some(session), format!("{what} without a valid toolCallId"));
        };
        if settled {
            return DaemonEvent::LateUpdate { session, call };
        }
        if is_terminal(u.status.as_deref()) {
            calls.settle(&call);
            return finish(session, call, u);
        }
        if start {
            let mut info = info(u, &meta(u));
            info.title = Some(
                info.title
                    .take()
                    .or_else(|| info.tool_name.clone())
                    .unwrap_or_else(|| "tool".to_owned()),
            );
            return DaemonEvent::ToolStarted {
                session,
                call,
                info,
            };
        }
        if u.kind.is_none() && u.title.is_none() {
            let text: String = u.take_texts().collect();
            if !text.is_empty() {
                return DaemonEvent::ToolOutput {
                    session,
                    call,
                    text,
                };
            }
            if u.status.as_deref() == Some("in_progress") {
                let progress = meta(u).shell_progress.unwrap_or_default();
                return DaemonEvent::ToolProgress {
                    session,
                    call,
                    progress,
                    beats: 1,
                };
            }
        }
        DaemonEvent::ToolUpdated {
            session,
            call,
            info: info(u, &meta(u)),
        }
    }
}

fn finish<M>(session: SessionId, call: ToolCallId, u: &mut Update<'_, M>) -> DaemonEvent {
    let raw = u.take_raw_output();
    let mut texts = u.take_texts();
    let outcome = if u.status.as_deref() == Some("completed") {
        Outcome::Completed
    } else {
        let error_type = u.take_error_type(&raw);
        match raw.outcome.as_deref() {
            Some("timed_out") => Outcome::TimedOut,
            Some("cancelled") => Outcome::Cancelled,
            _ if error_type.as_deref() == Some("execution_timeout") => Outcome::TimedOut,
            _ => Outcome::Failed,
        }
    };
    // The summary is the first non-empty text, moved out (not copied) when it had to be
    // unescaped; the texts are collected only when the output falls back to them.
    let (output, summary) = match raw.output {
        Some(o) => (
            o.into_owned(),
            texts.find(|t| !t.is_empty()).map(Cow::into_owned),
        ),
        None => {
            let texts: Vec<_> = texts.collect();
            let output = texts.join("\n");
            let summary = texts
                .into_iter()
                .find(|t| !t.is_empty())
                .map(Cow::into_owned);
            (output, summary)
        }
    };
    let result = ToolResult {
        outcome,
        summary,
        output,
        exit_code: raw.exit_code,
        signal: raw.signal,
    };
    DaemonEvent::ToolFinished {
        session,
        call,
        result,
    }
}

fn null_raw() -> Box<RawValue> {
    Box::<RawValue>::default()
}

/// The value of four hex digits, if they are.
fn hex4(digits: Option<&[u8]>) -> Option<u32> {
    let digits = std::str::from_utf8(digits?).ok()?;
    if digits.len() != 4 {
        return None;
    }
    u32::from_str_radix(digits, 16).ok()
}

/// The frame with each lone surrogate escape (`\ud83d` without its other half) replaced by `\ufffd`;
/// `None` when there is none (nearly always: only a frame holding `\ud…`/`\uD…` is scanned in
/// detail; finding out costs a UTF-8 check and a substring search or three). A
/// daemon written in JavaScript writes one when it cuts a string inside a surrogate pair, and
/// `serde_json` refuses it, which used to drop the whole output of a result silently (S4).
fn without_lone_surrogates(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    if !text.contains("\\u") || (!text.contains("\\ud") && !text.contains("\\uD")) {
        return None;
    }
    let mut lone = Vec::new();
    let mut i = 0;
    while let Some(rest) = bytes.get(i..) {
        let Some(at) = rest.iter().position(|b| *b == b'\\') else {
            break;
        };
        i += at;
        if bytes.get(i + 1) != Some(&b'u') {
            // Any other escape, `\\` included: skip it whole.
            i += 2;
            continue;
        }
        match hex4(bytes.get(i + 2..i + 6)) {
            Some(0xD800..=0xDBFF) => {
                let low = bytes.get(i + 6..i + 8) == Some(b"\\u".as_slice())
                    && matches!(hex4(bytes.get(i + 8..i + 12)), Some(0xDC00..=0xDFFF));
                if low {
                    i += 12;
                } else {
                    lone.push(i);
                    i += 6;
                }
            }
            Some(0xDC00..=0xDFFF) => {
                lone.push(i);
                i += 6;
            }
            _ => i += 2,
        }
    }
    if lone.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut from = 0;
    for at in lone {
        out.extend_from_slice(bytes.get(from..at).unwrap_or_default());
        out.extend_from_slice(b"\\ufffd");
        from = at + 6;
    }
    out.extend_from_slice(bytes.get(from..).unwrap_or_default());
    // Only ASCII escapes were replaced by ASCII: still UTF-8.
    String::from_utf8(out).ok()
}

/// The session params that do not decode still name, when `sessionId` itself reads (F2: the
/// warning names it — e.g. a duplicate key further in).
fn session_named(params: &str) -> Option<SessionId> {
    #[derive(serde::Deserialize)]
    struct Named<'a> {
        #[serde(rename = "sessionId", borrow)]
        session_id: Option<std::borrow::Cow<'a, str>>,
    }
    let named: Named<'_> = serde_json::from_str(params).ok()?;
    SessionId::parse(&named.session_id?).ok()
}

fn malformed(session: Option<SessionId>, reason: String) -> DaemonEvent {
    DaemonEvent::Malformed { session, reason }
}

fn is_terminal(status: Option<&str>) -> bool {
    matches!(status, Some("completed" | "failed"))
}

fn call_id<M>(u: &Update<'_, M>) -> Option<ToolCallId> {
    u.tool_call_id
        .as_deref()
        .and_then(|c| ToolCallId::parse(c).ok())
}

fn meta<'a, M: MetaSource<'a>>(u: &Update<'a, M>) -> Meta<'a> {
    u.meta.meta()
}

fn info<M>(u: &Update<'_, M>, meta: &Meta<'_>) -> ToolInfo {
    let tool_name = meta.tool_name.as_deref().map(str::to_owned);
    // Only an explicit title: the `_meta.toolName` fallback is for announcing a call (F2), not for
    // updates, which would otherwise rename a call to its tool's name.
    let title = u
        .title
        .as_deref()
        .filter(|t| !t.is_empty())
        .map(str::to_owned);
    let timeout = u.timeout().map(Duration::from_millis);
    ToolInfo {
        title,
        kind: u.kind.as_deref().map(str::to_owned),
        tool_name,
        timeout,
    }
}

fn chunk<'a, M: MetaSource<'a>>(
    session: SessionId,
    u: &mut Update<'a, M>,
    thought: bool,
) -> DaemonEvent {
    let block = u.take_block();
    let text = block.as_ref().and_then(|b| b.text.as_deref()).unwrap_or("");
    if text.is_empty()
        && let Some(usage) = meta(u).usage
    {
        return DaemonEvent::Usage { session, usage };
    }
    let is_text = block
        .as_ref()
        .is_some_and(|b| b.kind.as_deref().is_none_or(|k| k == "text"));
    if !is_text || text.is_empty() {
        return DaemonEvent::Other {
            session: Some(session),
            method: "session/update".into(),
            kind: u.session_update.as_deref().map(str::to_owned),
            stop_reason: None,
        };
    }
    let text = block
        .and_then(|b| b.text)
        .map(Cow::into_owned)
        .unwrap_or_default();
    if thought {
        DaemonEvent::Thought { session, text }
    } else {
        DaemonEvent::AgentText { session, text }
    }
}

fn plan<M>(session: SessionId, u: &Update<'_, M>) -> DaemonEvent {
    match u
        .entries
        .map(|e| serde_json::from_str::<Vec<PlanEntry>>(e.get()))
    {
        Some(Ok(entries)) => DaemonEvent::Plan { session, entries },
        Some(Err(e)) => malformed(Some(session), format!("plan entries: {}", json_error(&e))),
        None => DaemonEvent::Plan {
            session,
            entries: Vec::new(),
        },
    }
}

fn permission(id: RequestId, params: Option<&RawValue>) -> DaemonEvent {
    let Some(params) = params else {
        return malformed(None, "session/request_permission without params".into());
    };
    let p: PermissionParams<'_> = match serde_json::from_str(params.get()) {
        Ok(p) => p,
        Err(e) => {
            return malformed(
                session_named(params.get()),
                format!("session/request_permission params: {}", json_error(&e)),
            );
        }
    };
    let Some(session) = p
        .session_id
        .as_deref()
        .and_then(|s| SessionId::parse(s).ok())
    else {
        return malformed(
            None,
            "session/request_permission without a valid sessionId".into(),
        );
    };
    let input = p
        .tool_call
        .as_ref()
        .and_then(|tc| tc.raw_input)
        .and_then(|raw| serde_json::from_str(raw.get()).ok());
    let (call, info) = match &p.tool_call {
        Some(tc) => {
            let mut info = info(tc, &meta(tc));
            info.title = info.title.or_else(|| info.tool_name.clone());
            (call_id(tc), info)
        }
        None => (None, ToolInfo::default()),
    };
    DaemonEvent::PermissionRequested(PermissionRequest {
        request_id: id,
        session,
        call,
        info,
        options: p.options,
        input,
    })
}

fn vendor_parts<'a>(method: &str, raw: &'a RawValue) -> Option<(Option<String>, VendorData<'a>)> {
    if method == "_shell_agent/turn_complete" || method == "_agent_host/turn_complete" {
        serde_json::from_str::<VendorData<'a>>(raw.get())
            .ok()
            .map(|d| (Some("turn_complete".to_owned()), d))
    } else {
        let n = serde_json::from_str::<VendorNotify<'a>>(raw.get()).ok()?;
        Some((n.kind.map(Cow::into_owned), n.data?))
    }
}

fn vendor_notify(method: &str, params: Option<&RawValue>) -> Inbound {
    let parsed = params.and_then(|raw| vendor_parts(method, raw));
    let kind = parsed.as_ref().and_then(|(k, _)| k.clone());
    let session = parsed
        .as_ref()
        .and_then(|(_, d)| d.session_id.as_deref())
        .and_then(|s| SessionId::parse(s).ok());
    let stop = parsed
        .as_ref()
        .filter(|_| kind.as_deref() == Some("turn_complete"))
        .and_then(|(_, d)| d.stop_reason.as_deref())
        .map(StopReason::from_wire);
    let event = DaemonEvent::Other {
        session: session.clone(),
        method: method.to_owned(),
        kind: kind.clone(),
        stop_reason: stop.clone(),
    };
    match (kind.as_deref(), session, stop) {
        (Some("turn_complete"), Some(session), Some(stop_reason)) => Inbound::VendorTurnComplete {
            event,
            session,
            stop_reason,
        },
        _ => Inbound::Event(event),
    }
}

/// Parses a `session/prompt` result into its stop reason.
///
/// # Errors
/// A description of what was wrong (no frame content) when the result has no `stopReason`.
pub fn parse_stop_reason(result: &RawValue) -> Result<StopReason, String> {
    serde_json::from_str::<crate::wire::PromptResult<'_>>(result.get())
        .map(|r| StopReason::from_wire(&r.stop_reason))
        .map_err(|e| format!("session/prompt result: {}", json_error(&e)))
}

/// Convenience for tests and tools: the event of a notification frame, or `None` for responses
/// and requests.
#[must_use]
pub fn event_of(inbound: Inbound) -> Option<DaemonEvent> {
    match inbound {
        Inbound::Event(e)
        | Inbound::VendorTurnComplete { event: e, .. }
        | Inbound::Request { event: e, .. } => Some(e),
        Inbound::Response { .. } => None,
    }
}

#[cfg(test)]
mod tests;
