//! The ACP / JSON-RPC wire, modelled exactly and leniently, borrowed from the frame's bytes.
//!
//! Decoding is the hot path (a heartbeat every few seconds per running tool), so the envelope is read
//! in one pass into borrowed fields; only the parts a frame's method needs are looked at, and large
//! unknown parts (`_meta.availableSkills`, `configOptions`) are skipped without being built. Unknown
//! fields are ignored everywhere; a field of the wrong type makes the frame malformed, never a panic.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::ids::RequestId;

/// The JSON-RPC 2.0 envelope of any inbound message.
#[derive(Debug, Deserialize)]
pub(crate) struct Envelope<'a> {
    #[serde(default)]
    pub id: Option<RequestId>,
    #[serde(borrow, default)]
    pub method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub params: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub result: Option<&'a RawValue>,
    #[serde(default)]
    pub error: Option<RpcErrorObject>,
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct RpcErrorObject {
    /// The error code (-32601 method not found, …).
    pub code: i64,
    /// The daemon's message.
    #[serde(default)]
    pub message: String,
    /// Extra detail; agent-host puts `{"agentExited": "<how>"}` here when its agent process died
    /// with the call in flight.
    #[serde(default)]
    pub data: Option<serde_json::Value>,
}

/// The single-pass form of a `session/update` notification: plain borrowed strings, params and
/// `_meta` typed in place. Any surprise — an escaped string, a field of another type — fails this
/// decode and the frame takes the lenient path instead, which reaches the same event.
#[derive(Debug, Deserialize)]
pub(crate) struct FastUpdate<'a> {
    #[serde(default)]
    pub id: Option<serde::de::IgnoredAny>,
    #[serde(borrow, default)]
    pub method: Option<&'a str>,
    #[serde(borrow, default)]
    pub params: Option<FastParams<'a>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FastParams<'a> {
    #[serde(borrow, default)]
    pub session_id: Option<&'a str>,
    #[serde(borrow, default)]
    pub update: Option<FastFields<'a>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FastFields<'a> {
    #[serde(borrow, default)]
    session_update: Option<&'a str>,
    #[serde(borrow, default)]
    pub tool_call_id: Option<&'a str>,
    #[serde(borrow, default)]
    status: Option<&'a str>,
    #[serde(borrow, default)]
    kind: Option<&'a str>,
    #[serde(borrow, default)]
    title: Option<&'a str>,
    /// Typed in place: a result's texts are read in this one pass, never parsed again.
    #[serde(borrow, default)]
    content: Option<Box<Content<'a>>>,
    /// Typed in place, as `content`. (Both boxed: a heartbeat has neither, and the decoded struct
    /// stays small to move.)
    #[serde(borrow, default)]
    raw_output: Option<Box<RawOutput<'a>>>,
    #[serde(borrow, default)]
    raw_input: Option<&'a RawValue>,
    #[serde(borrow, default)]
    entries: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "_meta")]
    meta: Option<FastMeta<'a>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FastMeta<'a> {
    #[serde(borrow, default)]
    tool_name: Option<&'a str>,
    #[serde(default)]
    shell_progress: Option<crate::event::ShellProgress>,
    #[serde(default)]
    usage: Option<crate::event::Usage>,
}

impl FastFields<'_> {
    /// The heartbeat's progress when this update is one (F1: a kind-less, title-less `in_progress`
    /// `tool_call_update` without content); `None` for every other update.
    pub(crate) fn heartbeat(&self) -> Option<crate::event::ShellProgress> {
        let bare = self.kind.is_none() && self.title.is_none() && self.content.is_none();
        let is_heartbeat = bare
            && self.session_update == Some("tool_call_update")
            && self.status == Some("in_progress")
            && self.raw_output.is_none();
        is_heartbeat.then(|| {
            self.meta
                .as_ref()
                .and_then(|m| m.shell_progress)
                .unwrap_or_default()
        })
    }
}

impl Update<'_, Option<Meta<'_>>> {
    /// An update with nothing read yet, for the hand-written reader to fill (`crate::scan`): no
    /// `rawInput` read means no timeout.
    pub(crate) fn read_in_place() -> Self {
        Self {
            session_update: None,
            tool_call_id: None,
            status: None,
            kind: None,
            title: None,
            content: None,
            raw_output: None,
            raw_input: None,
            entries: None,
            meta: None,
            content_read: None,
            raw_output_read: None,
            timeout_read: Some(None),
            error_type_read: None,
        }
    }

    /// The heartbeat's progress when this update is one (as [`FastFields::heartbeat`]).
    pub(crate) fn heartbeat(&self) -> Option<crate::event::ShellProgress> {
        let bare = self.kind.is_none()
            && self.title.is_none()
            && self.content.is_none()
            && self.content_read.is_none();
        let is_heartbeat = bare
            && self.session_update.as_deref() == Some("tool_call_update")
            && self.status.as_deref() == Some("in_progress")
            && self.raw_output.is_none()
            && self.raw_output_read.is_none();
        is_heartbeat.then(|| {
            self.meta
                .as_ref()
                .and_then(|m| m.shell_progress)
                .unwrap_or_default()
        })
    }
}

impl<'a> From<FastParams<'a>> for UpdateParams<'a, Option<Meta<'a>>> {
    fn from(p: FastParams<'a>) -> Self {
        let update = p.update.map(|u| Update {
            session_update: u.session_update.map(Cow::Borrowed),
            tool_call_id: u.tool_call_id.map(Cow::Borrowed),
            status: u.status.map(Cow::Borrowed),
            kind: u.kind.map(Cow::Borrowed),
            title: u.title.map(Cow::Borrowed),
            content: None,
            content_read: u.content.map(|c| *c),
            raw_output: None,
            raw_output_read: u.raw_output.map(|r| *r),
            raw_input: u.raw_input,
            timeout_read: None,
            error_type_read: None,
            entries: u.entries,
            meta: u.meta.map(|m| Meta {
                tool_name: m.tool_name.map(Cow::Borrowed),
                shell_progress: m.shell_progress,
                usage: m.usage,
            }),
        });
        Self {
            session_id: p.session_id.map(Cow::Borrowed),
            update,
        }
    }
}

/// `session/update` params; `M` is how `_meta` is held (typed, or raw for the lenient path).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UpdateParams<'a, M> {
    #[serde(borrow, default)]
    pub session_id: Option<Cow<'a, str>>,
    #[serde(borrow, default = "none")]
    #[serde(bound(deserialize = "M: Deserialize<'de> + Default"))]
    pub update: Option<Update<'a, M>>,
}

fn none<T>() -> Option<T> {
    None
}

/// `_meta` held raw: parsed on demand, and a bad `_meta` is treated as absent.
pub(crate) type RawMeta<'a> = Option<&'a RawValue>;

/// One `SessionUpdate`, flattened: every variant's fields are optional here and the classifier
/// decides what the combination means.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
#[serde(bound(deserialize = "M: Deserialize<'de> + Default"))]
pub(crate) struct Update<'a, M = RawMeta<'a>> {
    #[serde(borrow, default)]
    pub session_update: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub tool_call_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub status: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub title: Option<Cow<'a, str>>,
    /// An object (`ContentBlock`) on chunks, an array (`ToolCallContent[]`) on tool calls.
    #[serde(borrow, default)]
    pub content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub raw_output: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub raw_input: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub entries: Option<&'a RawValue>,
    #[serde(default, rename = "_meta")]
    pub meta: M,
    /// `content` as the single-pass decode read it (then `content` is `None`). Not boxed: the
    /// hand-written reader fills the update in place and it is never moved on that path, so a
    /// result costs no allocation for it.
    #[serde(skip)]
    pub content_read: Option<Content<'a>>,
    /// `rawOutput` as the single-pass decode read it (then `raw_output` is `None`); not boxed, as
    /// `content_read`.
    #[serde(skip)]
    pub raw_output_read: Option<RawOutput<'a>>,
    /// `rawInput.timeout` as the hand-written reader read it (`crate::scan`; then `raw_input` is
    /// `None`). `None`: not read in place.
    #[serde(skip)]
    pub timeout_read: Option<Option<u64>>,
    /// The `type` of `rawOutput.error` as the hand-written reader read it. `None`: not read in
    /// place.
    #[serde(skip)]
    pub error_type_read: Option<Option<String>>,
}

impl<'a, M> Update<'a, M> {
    /// The texts of `content`, in order: of each entry of a tool call's array, or of a single block
    /// (read in place, or parsed from the raw value; an unreadable `content` has none). An
    /// iterator, not a `Vec`: a result's one text costs no allocation of its own.
    pub(crate) fn take_texts(&mut self) -> Texts<'a> {
        match self.content_read.take() {
            Some(Content::Items(items)) => Texts::entries(None, items),
            Some(Content::One(item)) => {
                Texts::entries(item.content.and_then(|b| b.text), Vec::new())
            }
            Some(Content::Block(b)) => Texts::entries(b.text, Vec::new()),
            None => self.content.map(raw_texts).unwrap_or_default(),
        }
    }

    /// `content` as one block (a chunk's). An array is no block (the lenient parse of one reaches
    /// no text either).
    pub(crate) fn take_block(&mut self) -> Option<ContentBlock<'a>> {
        match self.content_read.take() {
            Some(Content::Block(b)) => Some(b),
            Some(Content::Items(_) | Content::One(_)) => None,
            None => self
                .content
                .and_then(|c| serde_json::from_str::<ContentBlock<'a>>(c.get()).ok()),
        }
    }

    /// `rawInput.timeout` in ms (read in place, or parsed from the raw value; none when unreadable
    /// or not a non-negative integer).
    pub(crate) fn timeout(&self) -> Option<u64> {
        match self.timeout_read {
            Some(t) => t,
            None => self
                .raw_input
                .and_then(|r| serde_json::from_str::<RawInput>(r.get()).ok())
                .and_then(|r| r.timeout)
                .and_then(|n| n.as_u64()),
        }
    }

    /// The `type` of `rawOutput.error` when it is an object that has one (read in place, or
    /// parsed from `error`, the raw value of `raw`).
    pub(crate) fn take_error_type(&mut self, raw: &RawOutput<'_>) -> Option<String> {
        match self.error_type_read.take() {
            Some(t) => t,
            None => raw
                .error
                .and_then(|e| serde_json::from_str::<RawError<'_>>(e.get()).ok())
                .and_then(|e| e.kind.map(Cow::into_owned)),
        }
    }

    /// `rawOutput` (read in place, or parsed from the raw value; empty when unreadable).
    pub(crate) fn take_raw_output(&mut self) -> RawOutput<'a> {
        self.raw_output_read
            .take()
            .or_else(|| {
                self.raw_output
                    .and_then(|r| serde_json::from_str(r.get()).ok())
            })
            .unwrap_or_default()
    }
}

/// The texts of a raw `content`: a tool call's array, else a single block.
fn raw_texts(raw: &RawValue) -> Texts<'_> {
    if let Ok(items) = serde_json::from_str::<Vec<ToolCallContent<'_>>>(raw.get()) {
        return Texts::entries(None, items);
    }
    let text = serde_json::from_str::<ContentBlock<'_>>(raw.get())
        .ok()
        .and_then(|b| b.text);
    Texts::entries(text, Vec::new())
}

/// The texts of a `content` in order ([`Update::take_texts`]): a first text, then those of the
/// entries that follow it.
#[derive(Debug, Default)]
pub(crate) struct Texts<'a> {
    first: Option<Cow<'a, str>>,
    rest: std::vec::IntoIter<ToolCallContent<'a>>,
}

impl<'a> Texts<'a> {
    fn entries(first: Option<Cow<'a, str>>, rest: Vec<ToolCallContent<'a>>) -> Self {
        Self {
            first,
            rest: rest.into_iter(),
        }
    }
}

impl<'a> Iterator for Texts<'a> {
    type Item = Cow<'a, str>;

    fn next(&mut self) -> Option<Cow<'a, str>> {
        self.first.take().or_else(|| {
            self.rest
                .by_ref()
                .find_map(|c| c.content.and_then(|b| b.text))
        })
    }
}

/// `content` read in place: an object is a block (chunks), an array is a tool call's entries.
/// Anything else fails the single-pass decode, and the frame takes the lenient path.
#[derive(Debug)]
pub(crate) enum Content<'a> {
    /// `{type, text}`.
    Block(ContentBlock<'a>),
    /// `[{type:"content", content:{…}}, …]`.
    Items(Vec<ToolCallContent<'a>>),
    /// An array of exactly one entry (a result's usual `content`), which the hand-written reader
    /// keeps without a `Vec`.
    One(ToolCallContent<'a>),
}

impl<'de: 'a, 'a> Deserialize<'de> for Content<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = Content<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a content block or an array of tool-call content")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                ContentBlock::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(Content::Block)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                seq: A,
            ) -> Result<Self::Value, A::Error> {
                Vec::<ToolCallContent<'a>>::deserialize(
                    serde::de::value::SeqAccessDeserializer::new(seq),
                )
                .map(Content::Items)
            }
        }
        d.deserialize_any(Visit(std::marker::PhantomData))
    }
}

/// How a decoded update hands out its `_meta`.
pub(crate) trait MetaSource<'a> {
    /// The parts of `_meta` the bridge reads; empty when absent or unreadable.
    fn meta(&self) -> Meta<'a>;
}

impl<'a> MetaSource<'a> for RawMeta<'a> {
    fn meta(&self) -> Meta<'a> {
        self.and_then(|m| serde_json::from_str(m.get()).ok())
            .unwrap_or_default()
    }
}

impl<'a> MetaSource<'a> for Option<Meta<'a>> {
    fn meta(&self) -> Meta<'a> {
        self.clone().unwrap_or_default()
    }
}

/// The parts of `_meta` the bridge reads; everything else in it is skipped.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Meta<'a> {
    #[serde(borrow, default)]
    pub tool_name: Option<Cow<'a, str>>,
    #[serde(default)]
    pub shell_progress: Option<crate::event::ShellProgress>,
    #[serde(default)]
    pub usage: Option<crate::event::Usage>,
}

/// A content block (`{type:"text", text}`), lenient about its type.
#[derive(Debug, Deserialize)]
pub(crate) struct ContentBlock<'a> {
    #[serde(borrow, default, rename = "type")]
    pub kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub text: Option<Cow<'a, str>>,
}

/// One entry of a tool call's `content` array (`{type:"content", content:{…}}`, diffs, terminals).
#[derive(Debug, Deserialize)]
pub(crate) struct ToolCallContent<'a> {
    #[serde(borrow, default)]
    pub content: Option<ContentBlock<'a>>,
}

/// `rawOutput` of a shell tool (qwen's `shell_result` shape, which shell-agent shares).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawOutput<'a> {
    #[serde(borrow, default)]
    pub output: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub outcome: Option<Cow<'a, str>>,
    #[serde(default)]
    pub exit_code: Option<i64>,
    #[serde(default)]
    pub signal: Option<i64>,
    #[serde(borrow, default)]
    pub error: Option<&'a RawValue>,
}

/// `rawOutput.error` when it is an object (`{type:"execution_timeout", message}`).
#[derive(Debug, Deserialize)]
pub(crate) struct RawError<'a> {
    #[serde(borrow, default, rename = "type")]
    pub kind: Option<Cow<'a, str>>,
}

/// `rawInput` of a tool call: the one field that matters to liveness.
#[derive(Debug, Deserialize)]
pub(crate) struct RawInput {
    #[serde(default)]
    pub timeout: Option<serde_json::Number>,
}

/// `session/request_permission` params.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PermissionParams<'a> {
    #[serde(borrow, default)]
    pub session_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub tool_call: Option<Update<'a>>,
    #[serde(default)]
    pub options: Vec<crate::event::PermissionOption>,
}

/// Vendor notifications such as `_qwen/notify` (`{kind, data:{sessionId, stopReason}}`).
#[derive(Debug, Deserialize)]
pub(crate) struct VendorNotify<'a> {
    #[serde(borrow, default)]
    pub kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub data: Option<VendorData<'a>>,
}

/// The `data` of a vendor notification, and the params of `_shell_agent/turn_complete`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VendorData<'a> {
    #[serde(borrow, default)]
    pub session_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub stop_reason: Option<Cow<'a, str>>,
}

/// `{stopReason}`, the `session/prompt` result.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PromptResult<'a> {
    #[serde(borrow)]
    pub stop_reason: Cow<'a, str>,
}
