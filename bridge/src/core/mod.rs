//! The bridge core: routes inbound chat to conversations, runs one turn per conversation at a time,
//! turns daemon events into chat actions, and keeps every turn honest about liveness.
//!
//! One runner per conversation (an ordered queue): adapters only convert
//! and enqueue. Every chat action is written to the outbox in the same transaction as the state change
//! that caused it (D1); the outbox worker delivers it. Heartbeats feed liveness and the progress line,
//! never a message of their own (F1, L5).
//!
//! # Layout
//! - [`access`]: A2, A3, who may act in a thread.
//! - [`keys`]: message keys and button values, typed.
//! - [`live`]: the open turns as this replica holds them, for the live "running now" view.
//! - [`redact`]: R7, secrets out of chat-bound text.
//! - [`render`]: R1–R6 as platform-neutral messages.
//! - `inbox`: D2 and S4 — recording, handing on and setting aside inbound events.
//! - `progress`: heartbeat counts written in batches, off the conversations' path.
//!
//! Each conversation is a [`crate::conversation`]: a state machine and its runner.

pub mod access;
pub(crate) mod inbox;
pub mod keys;
pub mod live;
mod progress;
pub mod redact;
pub mod render;

pub(crate) use progress::{ProgressWrite, write_progress};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use daemon_client::{DaemonClient, DaemonEvent, EventStream, LivenessConfig, SessionId};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::channel::{Inbound, Target};
use crate::store::{self, Store, conversations};
use redact::Redactor;

/// What to do when a turn stalls (L3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnStall {
    /// Tell the thread and keep waiting.
    Notify,
    /// Tell the thread and send `session/cancel`.
    Cancel,
}

/// Core settings.
#[derive(Debug, Clone)]
pub struct CoreConfig {
    /// Idle and wall limits per turn (L1, L2).
    pub liveness: LivenessConfig,
    /// L3 policy.
    pub on_stall: OnStall,
    /// A tool running longer than this shows a progress line (L5).
    pub progress_after: Duration,
    /// The progress line is edited at most this often (L5).
    pub progress_every: Duration,
    /// Heartbeat counts and progress are written to the store at most this often.
    pub progress_flush: Duration,
    /// Prompts that may wait behind a running turn.
    pub queue_cap: usize,
    /// Unanswered permission requests expire (as rejected) after this.
    pub permission_timeout: Duration,
    /// Working directory for new daemon sessions.
    pub cwd: PathBuf,
    /// Users who may answer anyone's permission requests (and act in every thread).
    pub approvers: Vec<String>,
    /// A2: who may act in a thread.
    pub threads: crate::config::ThreadAccess,
    /// A3: the requester may not approve their own tool call.
    pub require_second_person: bool,
    /// Store redacted text in the history too (`redact.store`).
    pub redact_store: bool,
    /// How much tool output a result message shows (from the channel's capabilities).
    pub output_cap: usize,
    /// The channel shows approvals as buttons; without them a person answers with a number, and
    /// other text while one waits gets a hint instead of becoming a prompt.
    pub buttons: bool,
    /// The HTTP API answers (`http.listen` and `http.api_token` set): the full-output pointer names
    /// its address too.
    pub api_pointer: bool,
    /// The history pages answer (`http.ui`): the pointer leads to the tool call's page, at this
    /// base address (`http.ui_url`; empty: the path alone).
    pub ui_pointer: Option<String>,
    /// How long the daemon has to end a turn after `/cancel` before the bridge ends it itself.
    pub cancel_grace: Duration,
    /// An idle conversation's runner is let go after this (see `service.conversation_idle`).
    pub actor_idle: Duration,
    /// An inbound event that failed (or was interrupted by a crash) this many times is set aside
    /// as a dead letter (S4).
    pub inbound_attempts: i64,
    /// Prompts held while the agent is unreachable are tried again this often even when no
    /// reconnect is reported (L7).
    pub hold_retry: Duration,
    /// Say the daemon connection's loss and recovery in the conversation (the console, which has no
    /// threads and no other way to show it than chat lines).
    pub announce_connection: bool,
    /// After a reconnect, an open turn whose session sends no live frame within this is ended as
    /// interrupted (the daemon restarted and no longer runs it).
    pub reconnect_grace: Duration,
    /// How much of an answer one message carries (from the channel's capabilities).
    pub answer_len: usize,
    /// An answer longer than this (bytes) is uploaded as a file with a short preview
    /// (`render.upload_over`).
    pub upload_over: usize,
    /// The answer streams into a draft edited at most this often (`render.stream_every`); `None`:
    /// posted whole when the turn ends.
    pub stream_every: Option<Duration>,
    /// Channels whose answers are not streamed (`render.no_stream_channels`).
    pub no_stream_channels: Vec<String>,
    /// What becomes of files people attach (`[attachments]`, and whether the agent takes images).
    pub files: crate::conversation::files::Limits,
    /// Each prompt reaches the agent as `[name] text` (`turns.speaker_prefix`; never for the
    /// built-in shell agent, which runs the text as a command).
    pub speaker_prefix: bool,
    /// What a prompt that arrives while a turn runs does (`turns.while_busy`).
    pub while_busy: crate::conversation::busy::WhileBusy,
    /// The agent is the built-in shell agent: prompts go as typed (no notes; merged messages are
    /// lines of one script).
    pub shell_agent: bool,
    /// Schedules one thread may have.
    pub schedules_per_thread: usize,
    /// The shortest `/every` interval.
    pub schedule_min_interval: Duration,
    /// Each conversation's own worktree (`workspace.isolation = "worktree"` with `cwd` in a git
    /// repository); `None`: every session works in `cwd`.
    pub worktrees: Option<crate::worktree::Worktrees>,
    /// A conversation idle this long has its worktree removed (`workspace.retain`).
    pub retain: Duration,
    /// In a thread only messages that mention the bot are prompts; the others are context for the
    /// next one (`access.require_mention_in_threads`).
    pub require_mention_in_threads: bool,
    /// The `[[projects]]` entry this core serves; `None` in the one-project configuration (its
    /// conversations are [`conversations::DEFAULT_PROJECT`]'s, it takes every conversation, and
    /// metrics carry no `project` label).
    pub project: Option<String>,
}

impl Default for CoreConfig {
    fn default() -> Self {
        Self {
            liveness: LivenessConfig::default(),
            on_stall: OnStall::Notify,
            progress_after: Duration::from_secs(15),
            progress_every: Duration::from_secs(30),
            progress_flush: Duration::from_secs(10),
            queue_cap: 5,
            permission_timeout: Duration::from_secs(600),
            cwd: PathBuf::from("."),
            approvers: Vec::new(),
            threads: crate::config::ThreadAccess::Owner,
            require_second_person: false,
            redact_store: false,
            output_cap: render::CHAT_OUTPUT_CAP,
            buttons: true,
            api_pointer: true,
            ui_pointer: None,
            cancel_grace: Duration::from_secs(10),
            actor_idle: Duration::from_secs(600),
            inbound_attempts: 3,
            hold_retry: Duration::from_secs(5),
            announce_connection: false,
            reconnect_grace: Duration::from_secs(30),
            files: crate::conversation::files::Limits::default(),
            answer_len: 40_000,
            stream_every: None,
            no_stream_channels: Vec::new(),
            upload_over: 20_000,
            speaker_prefix: false,
            while_busy: crate::conversation::busy::WhileBusy::Queue,
            shell_agent: false,
            schedules_per_thread: 10,
            schedule_min_interval: Duration::from_secs(60),
            worktrees: None,
            retain: Duration::from_secs(7 * 86_400),
            require_mention_in_threads: false,
            project: None,
        }
    }
}

/// How many events the router takes from the daemon client at once.
const ROUTE_BATCH: usize = 256;

/// The router's counters, their labels built once rather than per event.
struct EventCounters {
    by_kind: HashMap<&'static str, metrics::Counter>,
    heartbeats: metrics::Counter,
    malformed: metrics::Counter,
}

impl EventCounters {
    fn new(core: &Core) -> Self {
        Self {
            by_kind: DaemonEvent::NAMES
                .iter()
                .map(|&kind| {
                    let labels = core.labels(&[("kind", kind)]);
                    (
                        kind,
                        metrics::counter!("chatbridge_daemon_events_total", labels),
                    )
                })
                .collect(),
            heartbeats: metrics::counter!("chatbridge_heartbeats_total", core.labels(&[])),
            malformed: metrics::counter!("chatbridge_malformed_frames_total", core.labels(&[])),
        }
    }

    fn count(&self, event: &DaemonEvent) {
        // Frames, not events: heartbeats read in one burst come as one event (F1).
        let frames = match event {
            DaemonEvent::ToolProgress { beats, .. } => u64::from(*beats),
            _ => 1,
        };
        if let Some(c) = self.by_kind.get(event.name()) {
            c.increment(frames);
        }
        match event {
            // Heartbeats (kind-less `in_progress` updates): proof a silent command is alive.
            DaemonEvent::ToolProgress { .. } => self.heartbeats.increment(frames),
            DaemonEvent::Malformed { .. } => self.malformed.increment(1),
            _ => {}
        }
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A message for a conversation's runner. Small (16 bytes, the large ones boxed): every
/// conversation's mailbox allocates its first block of 32 slots when it is made and keeps it while
/// the conversation lives, so at 248 bytes a message 10,000 conversations held 80 MB of empty
/// mailbox slots, 160 MB once a second block was in use (P2 at 10,000 sessions).
#[derive(Debug)]
pub(crate) enum ConvMsg {
    Inbound(Box<Inbound>),
    Daemon(Box<DaemonEvent>),
    /// Prompt `seq` was answered.
    PromptDone(Box<(u64, Result<daemon_client::StopReason, daemon_client::Error>)>),
    /// The files of prompt `seq` were downloaded: its blocks, and the files left out with why.
    FilesReady(Box<FilesReady>),
    Resume(Box<store::turns::Turn>),
    /// The daemon connection went down (`false`) or came back (`true`) (L7).
    Connection(bool),
    /// A failed load of a resumed turn's session is due to be tried again (D3).
    LoadAgain,
    /// The chat's input ended (the console's stdin closed): nobody can answer an approval any more.
    InputEnded,
    /// The conversation has been idle since before this (Unix ms): its worktree is removed, as
    /// `/done` does, unless something happened since ([`crate::checkouts`]).
    Expire(i64),
}

/// The files of prompt `seq` downloaded: its blocks, and the files left out with why.
#[derive(Debug)]
pub(crate) struct FilesReady {
    pub seq: u64,
    pub blocks: Vec<daemon_client::PromptBlock>,
    pub refused: Vec<(String, String)>,
}

/// What becomes of an inbound event whose handling failed (not a transient fault).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterFailure {
    /// Try again (the failure is recorded; the next attempt must be counted first).
    Again,
    /// It failed too often and was set aside as a dead letter, with a notice in its thread.
    SetAside,
    /// It was handled or set aside meanwhile; nothing to do.
    Gone,
}

/// The core, shared by the router, the conversations and the application.
#[derive(Debug)]
pub struct Core {
    pub(crate) store: Store,
    pub(crate) client: DaemonClient,
    pub(crate) cfg: CoreConfig,
    pub(crate) redactor: Redactor,
    pub(crate) wake_outbox: Arc<Notify>,
    actors: Mutex<HashMap<String, mpsc::Sender<ConvMsg>>>,
    pub(crate) sessions: Mutex<HashMap<SessionId, String>>,
    /// Conversations the idle sweep handed on whose runner has not answered yet (not handed again
    /// until it has).
    pub(crate) expiring: Mutex<std::collections::HashSet<String>>,
    /// Turns open or queued, across conversations (the console waits for zero before exiting).
    pub(crate) busy: AtomicUsize,
    pub(crate) idle: Notify,
    pub(crate) shutdown: CancellationToken,
    /// Every task the core spawns: conversations, prompt calls, the progress writer.
    pub(crate) tasks: TaskTracker,
    progress: mpsc::Sender<ProgressWrite>,
    progress_pending: Arc<AtomicUsize>,
    /// Whether the daemon connection is up (for `/readyz`).
    pub daemon_connected: std::sync::atomic::AtomicBool,
    /// The chat's input ended (the console's stdin closed): approvals are closed as asked.
    pub input_ended: std::sync::atomic::AtomicBool,
    /// Downloads attached files from the platform (none: files are explained, not used).
    fetch: std::sync::OnceLock<Arc<dyn crate::channel::Fetch>>,
    /// Speakers' display names, asked of the platform once per user.
    pub speakers: crate::conversation::speaker::Speakers,
    /// Where conversations publish their open turns (the live view reads it).
    live: std::sync::OnceLock<Arc<live::Board>>,
    /// Set when the daemon could not be reached at start-up: what is checked when it first is.
    late: Mutex<Option<LateCheck>>,
    /// What the daemon, first reached after a start without it, told about itself.
    reached: std::sync::OnceLock<Reached>,
    /// Cancelled when the bridge cannot go on (a daemon first reached late turned out to be
    /// configured wrongly); [`Core::fatal_reason`] says why.
    pub fatal: CancellationToken,
    fatal_reason: Mutex<Option<String>>,
}

/// What a project started without its daemon checks once it reaches it: what start-up checks
/// when the daemon answers at once (L7).
#[derive(Debug, Clone)]
pub struct LateCheck {
    /// `daemon.cwd` (or the project's): the daemon must serve it when it serves one workspace.
    pub configured_cwd: Option<PathBuf>,
    /// `workspace.isolation = "worktree"`: the daemon must open sessions in any directory.
    pub worktrees: bool,
    /// The configuration key of this daemon (`daemon`, `projects[name].daemon`), for the error.
    pub key: String,
}

/// What a daemon reached after start-up told about itself.
#[derive(Debug, Clone)]
struct Reached {
    /// The directory new sessions open in (`daemon.cwd`, else the workspace it serves).
    cwd: Option<PathBuf>,
    /// It is the built-in shell agent (served on its own): text runs as typed.
    shell: bool,
}

impl Core {
    /// A core over `store` and `client`.
    #[must_use]
    pub fn new(
        store: Store,
        client: DaemonClient,
        cfg: CoreConfig,
        redactor: Redactor,
        wake_outbox: Arc<Notify>,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let (progress, rx) = mpsc::channel(progress::PROGRESS_QUEUE);
        let progress_pending = Arc::new(AtomicUsize::new(0));
        let tasks = TaskTracker::new();
        tasks.spawn(progress::progress_writer(
            store.clone(),
            rx,
            progress_pending.clone(),
            shutdown.clone(),
        ));
        Arc::new(Self {
            store,
            client,
            cfg,
            redactor,
            wake_outbox,
            actors: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            expiring: Mutex::new(std::collections::HashSet::new()),
            busy: AtomicUsize::new(0),
            idle: Notify::new(),
            shutdown,
            tasks,
            progress,
            progress_pending,
            daemon_connected: std::sync::atomic::AtomicBool::new(true),
            input_ended: std::sync::atomic::AtomicBool::new(false),
            fetch: std::sync::OnceLock::new(),
            speakers: crate::conversation::speaker::Speakers::default(),
            live: std::sync::OnceLock::new(),
            late: Mutex::new(None),
            reached: std::sync::OnceLock::new(),
            fatal: CancellationToken::new(),
            fatal_reason: Mutex::new(None),
        })
    }

    /// The daemon could not be reached at start-up: messages are held until it is (L7), and
    /// `check` is applied when it first is.
    pub fn start_without_daemon(&self, check: LateCheck) {
        self.daemon_connected.store(false, Ordering::SeqCst);
        *lock(&self.late) = Some(check);
    }

    /// Why the bridge must stop, once [`Core::fatal`] is cancelled.
    #[must_use]
    pub fn fatal_reason(&self) -> Option<String> {
        lock(&self.fatal_reason).clone()
    }

    fn stop_fatally(&self, reason: String) {
        tracing::error!(project = self.project(), error = %reason, "the agent daemon, first reached after start-up, cannot be used as configured; stopping");
        *lock(&self.fatal_reason) = Some(reason);
        self.fatal.cancel();
    }

    /// The directory a new session opens in: `daemon.cwd`, else the workspace the daemon serves,
    /// else the bridge's own (for a daemon first reached after start-up, what it said then).
    #[must_use]
    pub(crate) fn session_dir(&self) -> PathBuf {
        self.reached
            .get()
            .and_then(|r| r.cwd.clone())
            .unwrap_or_else(|| self.cfg.cwd.clone())
    }

    /// Whether the agent is the built-in shell agent (text runs as typed, no speaker names).
    #[must_use]
    pub(crate) fn shell_agent(&self) -> bool {
        self.cfg.shell_agent || self.reached.get().is_some_and(|r| r.shell)
    }

    /// The daemon, first reached after a start without it: what start-up checks when it answers
    /// at once is checked now; a daemon that cannot be used as configured stops the bridge (a
    /// configuration error, as at start-up). `false` when it stopped.
    fn check_late(&self) -> bool {
        let Some(check) = lock(&self.late).take() else {
            return true;
        };
        let Some(info) = self.client.agent_info() else {
            return true;
        };
        let cwd = match info.session_cwd(check.configured_cwd.as_deref()) {
            Ok(cwd) => cwd,
            Err(e) => {
                self.stop_fatally(e.naming(&check.key));
                return false;
            }
        };
        if check.worktrees
            && let Some(served) = &info.workspace
        {
            self.stop_fatally(format!("workspace.isolation = \"worktree\" needs an agent that opens sessions in any directory, but the agent daemon ({}) serves the one workspace {} and refuses sessions in the threads' worktrees: set workspace.isolation = \"shared\", or use an agent that can", check.key, served.display()));
            return false;
        }
        let shell = info.name.as_deref() == Some(shell_agent::AGENT_NAME);
        let _ = self.reached.set(Reached { cwd, shell });
        tracing::info!(
            project = self.project(),
            "the agent daemon is reached; held messages run now"
        );
        true
    }

    /// What the daemon said at its latest `initialize`, also one that was then not used (another
    /// workspace than `cwd`); `None` before it was ever reached.
    #[must_use]
    pub fn daemon_agent(&self) -> Option<daemon_client::AgentInfo> {
        self.client.agent_info()
    }

    /// The daemon connection closed for good before it was ever reached (a URL it cannot use): a
    /// configuration error, as at start-up. (A refused token or another workspace is retried.)
    fn closed_before_reached(&self, reason: &str) {
        if self.shutdown.is_cancelled() {
            return;
        }
        if let Some(check) = lock(&self.late).take() {
            self.stop_fatally(format!("{}: {reason}", check.key));
        }
    }

    /// Publishes the open turns on `board` (set once, before the first conversation runs; unset:
    /// a board of the core's own).
    pub fn set_live(&self, board: Arc<live::Board>) {
        let _ = self.live.set(board);
    }

    /// The board conversations publish their open turns on.
    #[must_use]
    pub fn live(&self) -> &Arc<live::Board> {
        self.live.get_or_init(live::Board::shared)
    }

    /// The project this core's conversations belong to.
    #[must_use]
    pub fn project(&self) -> &str {
        self.cfg
            .project
            .as_deref()
            .unwrap_or(conversations::DEFAULT_PROJECT)
    }

    /// Whether a conversation of `project` is this core's: those of its own project (in the
    /// one-project configuration, the implicit `default`). A conversation of a project no longer
    /// configured is nobody's — no schedule of it fires, no late update wakes it — until a message
    /// in its thread moves it to the project its channel goes to now (in the one-project
    /// configuration, `default`): its old daemon session is never loaded on another project's
    /// daemon.
    #[must_use]
    pub fn serves(&self, project: &str) -> bool {
        self.project() == project
    }

    /// `labels` plus `project` when projects are configured (in the one-project configuration the
    /// series keep the shape they always had). Project names come from the configuration only, so
    /// the label's values are bounded.
    #[must_use]
    pub fn labels(&self, labels: &[(&'static str, &str)]) -> Vec<metrics::Label> {
        let mut out: Vec<metrics::Label> = labels
            .iter()
            .map(|(k, v)| metrics::Label::new(*k, (*v).to_owned()))
            .collect();
        if let Some(p) = &self.cfg.project {
            out.push(metrics::Label::new("project", p.clone()));
        }
        out
    }

    /// Lets conversations download the files people attach (set once, by the channel's wiring).
    pub fn set_fetch(&self, fetch: Arc<dyn crate::channel::Fetch>) {
        let _ = self.fetch.set(fetch);
    }

    pub(crate) fn fetcher(&self) -> Option<Arc<dyn crate::channel::Fetch>> {
        self.fetch.get().cloned()
    }

    /// The file limits for a prompt now: `[attachments]`, with whether the agent takes images and
    /// embedded context from the latest `initialize` (a daemon that came back after a reconnect may
    /// say otherwise than at start-up).
    pub(crate) fn file_limits(&self) -> crate::conversation::files::Limits {
        let mut limits = self.cfg.files;
        if let Some(info) = self.client.agent_info() {
            limits.agent_images = info.images;
            limits.agent_embedded = info.embedded_context;
        }
        limits
    }

    /// Hands a progress write to the writer; `false` when its queue is full (keep the counts).
    pub(crate) fn queue_progress(&self, w: ProgressWrite) -> bool {
        self.progress_pending.fetch_add(1, Ordering::SeqCst);
        if self.progress.try_send(w).is_ok() {
            true
        } else {
            self.progress_pending.fetch_sub(1, Ordering::SeqCst);
            false
        }
    }

    /// Heartbeat-count writes queued and not yet written.
    #[must_use]
    pub fn progress_writes_pending(&self) -> usize {
        self.progress_pending.load(Ordering::SeqCst)
    }

    /// The tasks the core spawned (conversations, prompt calls, the progress writer). Each ends
    /// once the shutdown token given to [`Core::new`] is cancelled — a conversation between two
    /// steps, a prompt call at once (its turn stays open for the next start, D3), the progress
    /// writer after writing what is queued.
    #[must_use]
    pub fn tasks(&self) -> &TaskTracker {
        &self.tasks
    }

    /// Waits until every task the core spawned has ended: call it after cancelling the shutdown
    /// token, before closing the store.
    pub async fn stopped(&self) {
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// Conversations held in memory (a runner each) right now.
    #[must_use]
    pub fn conversations_in_memory(&self) -> usize {
        lock(&self.actors).len()
    }

    /// Sends `msg` to the conversation's runner, starting one when there is none — also when the
    /// one looked up was letting go at that moment (its channel closed between lookup and send).
    pub(crate) async fn send_to(
        self: &Arc<Self>,
        conv: &conversations::Conversation,
        mut msg: ConvMsg,
    ) -> bool {
        for _ in 0..3 {
            match self.actor(conv).send(msg).await {
                Ok(()) => return true,
                Err(mpsc::error::SendError(m)) => msg = m,
            }
        }
        tracing::error!(conversation = %conv.id, "no conversation runner would take a message");
        false
    }

    /// An idle runner lets go: it is forgotten (unless a newer runner already replaced it), so the
    /// next message starts a fresh one from the store.
    pub(crate) fn retire(
        &self,
        conv: &str,
        session: Option<&SessionId>,
        tx: &mpsc::Sender<ConvMsg>,
    ) {
        let mut actors = lock(&self.actors);
        if actors.get(conv).is_some_and(|t| t.same_channel(tx)) {
            actors.remove(conv);
            if let Some(s) = session {
                let mut sessions = lock(&self.sessions);
                if sessions.get(s).is_some_and(|c| c == conv) {
                    sessions.remove(s);
                }
            }
        }
        metrics::gauge!("chatbridge_conversations_in_memory", self.labels(&[]))
            .set(actors.len() as f64);
    }

    /// Turns open or queued right now.
    #[must_use]
    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::SeqCst)
    }

    /// Waits until no turn is open or queued.
    pub async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.busy() == 0 {
                return;
            }
            notified.await;
        }
    }

    pub(crate) fn busy_add(&self, n: isize) {
        if n >= 0 {
            self.busy.fetch_add(n.unsigned_abs(), Ordering::SeqCst);
        } else {
            self.busy.fetch_sub(n.unsigned_abs(), Ordering::SeqCst);
        }
        self.idle.notify_waiters();
    }

    fn actor(self: &Arc<Self>, conv: &conversations::Conversation) -> mpsc::Sender<ConvMsg> {
        let mut actors = lock(&self.actors);
        if let Some(tx) = actors.get(&conv.id)
            && !tx.is_closed()
        {
            return tx.clone();
        }
        let (tx, rx) = mpsc::channel(1024);
        actors.insert(conv.id.clone(), tx.clone());
        metrics::gauge!("chatbridge_conversations_in_memory", self.labels(&[]))
            .set(actors.len() as f64);
        if let Some(s) = conv
            .daemon_session
            .as_deref()
            .and_then(|s| SessionId::parse(s).ok())
        {
            lock(&self.sessions).insert(s, conv.id.clone());
        }
        self.tasks.spawn(crate::conversation::runner::run(
            self.clone(),
            conv.clone(),
            tx.clone(),
            rx,
        ));
        tx
    }

    /// Routes daemon events to the conversation that owns their session, until the stream ends.
    pub async fn route_events(self: Arc<Self>, mut events: EventStream) {
        let counters = EventCounters::new(&self);
        let mut batch = Vec::with_capacity(ROUTE_BATCH);
        loop {
            // Everything the client has classified meanwhile, in order: one wake-up per batch, not
            // per frame.
            tokio::select! {
                () = self.shutdown.cancelled() => return,
                n = events.recv_many(&mut batch, ROUTE_BATCH) => if n == 0 { return },
            }
            for event in batch.drain(..) {
                counters.count(&event);
                self.route(event).await;
            }
        }
    }

    /// Hands one daemon event to the conversation that owns its session.
    async fn route(self: &Arc<Self>, event: DaemonEvent) {
        match &event {
            DaemonEvent::Disconnected { reason } => {
                self.daemon_connected.store(false, Ordering::SeqCst);
                // The client logged it at warn, once per loss (with its backoff).
                tracing::debug!(%reason, "daemon connection lost; reconnecting");
                self.tell_conversations(false).await;
                return;
            }
            DaemonEvent::Reconnected { resumed, lost } => {
                if !self.check_late() {
                    return;
                }
                self.daemon_connected.store(true, Ordering::SeqCst);
                metrics::counter!("chatbridge_daemon_reconnects_total", self.labels(&[]))
                    .increment(1);
                // The client reloads the sessions of the prompts it sent itself; turns taken back
                // after a restart reload their own (each logs "open turn resumed after restart").
                tracing::info!(
                    prompts_resumed = resumed.len(),
                    prompts_lost = lost.len(),
                    "daemon reconnected; sessions with a prompt of this process in flight loaded again (turns taken back at start-up load their own)"
                );
                self.tell_conversations(true).await;
                return;
            }
            DaemonEvent::Closed { reason } => {
                self.daemon_connected.store(false, Ordering::SeqCst);
                tracing::error!(%reason, "daemon connection closed");
                self.closed_before_reached(reason);
                return;
            }
            _ => {}
        }
        let Some(session) = event.session() else {
            return;
        };
        let conv = lock(&self.sessions).get(session).cloned();
        let Some(conv) = conv else {
            if crate::conversation::late::worth_waking(&event) {
                // Work that arrives later for a conversation let go from memory: it is loaded
                // again to post it.
                self.wake_for_late(event).await;
                return;
            }
            tracing::debug!(session = %session, kind = event.name(), "event for a session no conversation owns");
            return;
        };
        let tx = lock(&self.actors).get(&conv).cloned();
        if let Some(tx) = tx {
            let _ = tx.send(ConvMsg::Daemon(Box::new(event))).await;
        }
    }

    /// The chat's input ended (the console's stdin closed): every conversation in memory closes the
    /// approvals it waits on — nobody is left to click — so its turn ends instead of waiting out
    /// `approvals.timeout`.
    pub async fn input_ended(&self) {
        self.input_ended.store(true, Ordering::SeqCst);
        let actors: Vec<mpsc::Sender<ConvMsg>> = lock(&self.actors).values().cloned().collect();
        for tx in actors {
            let _ = tx.send(ConvMsg::InputEnded).await;
        }
    }

    /// Tells every conversation in memory that the daemon connection went down or came back: held
    /// prompts run once it is back (L7). A conversation not in memory holds nothing.
    async fn tell_conversations(&self, up: bool) {
        let actors: Vec<mpsc::Sender<ConvMsg>> = lock(&self.actors).values().cloned().collect();
        for tx in actors {
            let _ = tx.send(ConvMsg::Connection(up)).await;
        }
    }

    /// A late update for a session whose conversation is not in memory: its runner is started from
    /// the store and handed the event (a session the store does not know is ignored).
    async fn wake_for_late(self: &Arc<Self>, event: DaemonEvent) {
        let Some(session) = event.session().map(ToString::to_string) else {
            return;
        };
        let found = match self.store.conn().await {
            Ok(mut c) => conversations::by_session(&mut c, &session).await,
            Err(e) => Err(e),
        };
        match found {
            Ok(Some(conv)) if self.serves(&conv.project) => {
                self.send_to(&conv, ConvMsg::Daemon(Box::new(event))).await;
            }
            Ok(Some(_)) => {
                tracing::debug!(session = %session, project = self.project(), "late update for a session of another project ignored");
            }
            Ok(None) => {
                tracing::debug!(session = %session, "late update for a session no conversation owns");
            }
            Err(e) => {
                tracing::warn!(session = %session, error = %e, "could not look up the conversation of a late update");
            }
        }
    }

    /// After a restart: every open turn of [`Core::open_turns`] is handed to its conversation,
    /// resumed with `session/load` or closed with a visible "interrupted" notice (D3). Returns how
    /// many.
    pub async fn resume_open_turns(
        self: &Arc<Self>,
        open: Vec<(store::turns::Turn, conversations::Conversation)>,
    ) -> usize {
        let mut n = 0;
        for (turn, conv) in open {
            n += 1;
            // Busy from now on, so nobody sees "idle" before the actor has taken the turn back.
            self.busy_add(1);
            if !self.send_to(&conv, ConvMsg::Resume(Box::new(turn))).await {
                self.busy_add(-1);
            }
        }
        n
    }

    /// The turns the previous run left open in this core's projects, with their conversations
    /// (only read: taken again whole when the database fails on the way).
    ///
    /// # Errors
    /// Store errors.
    pub async fn open_turns(
        &self,
    ) -> Result<Vec<(store::turns::Turn, conversations::Conversation)>, store::StoreError> {
        let mut c = self.store.conn().await?;
        let mut found = Vec::new();
        for turn in store::turns::open(&mut c).await? {
            let Some(conv) = conversations::get(&mut c, &turn.conversation_id).await? else {
                continue;
            };
            if self.serves(&conv.project) {
                found.push((turn, conv));
            }
        }
        Ok(found)
    }

    pub(crate) fn target(conv: &conversations::Conversation) -> Target {
        Target {
            workspace: conv.workspace.clone(),
            channel: conv.channel.clone(),
            thread: conv.thread.clone(),
        }
    }
}
