//! One conversation's event loop: inbound chat, daemon events, the prompt's completion, and timers
//! (liveness, permission expiry, progress line), all in order.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use daemon_client::liveness::human_duration;
use daemon_client::{
    DaemonEvent, EndCause, Liveness, PermissionOutcome, PermissionRequest, RequestId, SessionId,
    ShellProgress, StallKind, StopReason, ToolCallId, ToolInfo, ToolResult,
};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::access::{self, Act, Refusal};
use super::keys::{ButtonValue, MessageKey};
use super::{ConvMsg, Core, OnStall, render};
use crate::channel::{ChatAction, Inbound, InboundKind, Message, Target, Tone};
use crate::store::conversations::{self, Conversation};
use crate::store::outbox::{self, Kind, NewAction};
use crate::store::transcript::{self, NewEntry};
use crate::store::turns::{self, Ending, Turn};
use crate::store::{Result, StoreError, Tx, inbound, members, now_ms, permissions, tool_calls};

#[derive(Debug)]
struct ToolState {
    title: String,
    started: Instant,
    last_output: Option<Instant>,
    progress_shown: Option<Instant>,
    unflushed: i64,
    progress: Option<ShellProgress>,
    flushed: Instant,
}

impl ToolState {
    /// The latest progress, as stored.
    fn progress_json(&self) -> Option<String> {
        self.progress.and_then(|p| serde_json::to_string(&p).ok())
    }
}

#[derive(Debug)]
struct TurnState {
    row: Turn,
    liveness: Liveness,
    tools: HashMap<ToolCallId, ToolState>,
    answer: String,
    resumed: bool,
    prompt_seq: u64,
    /// The person's message that asked for this turn (for the outcome reaction).
    user_message: Option<String>,
}

#[derive(Debug)]
struct PendingPermission {
    db_id: String,
    request_id: RequestId,
    title: String,
    options: Vec<daemon_client::PermissionOption>,
    requester: String,
    expires: Instant,
}

/// An inbound event's inbox key: (platform, event id).
type EventKey = (String, String);

/// A prompt waiting behind the running turn; its inbox entry is marked when its turn starts.
struct Queued {
    user: String,
    text: String,
    message_id: Option<String>,
    event: Option<EventKey>,
}

struct Actor {
    core: Arc<Core>,
    conv: Conversation,
    target: Target,
    session: Option<SessionId>,
    session_ready: bool,
    turn: Option<TurnState>,
    queue: VecDeque<Queued>,
    /// Inbox entries (platform, event id) the next committed transaction marks handled: the event
    /// being handled, or queued messages dropped by `/cancel`.
    unmarked: std::sync::Mutex<Vec<EventKey>>,
    permissions: HashMap<String, PendingPermission>,
    /// The people the owner invited (A2), read from the store on first use.
    members: Option<Vec<String>>,
    notices: u64,
    prompt_seq: u64,
    tx: mpsc::Sender<ConvMsg>,
}

/// Runs the actor until its channel closes.
pub(crate) async fn run(
    core: Arc<Core>,
    conv: Conversation,
    tx: mpsc::Sender<ConvMsg>,
    mut rx: mpsc::Receiver<ConvMsg>,
) {
    let session = conv
        .daemon_session
        .as_deref()
        .and_then(|s| SessionId::parse(s).ok());
    let target = Core::target(&conv);
    let mut actor = Actor {
        core,
        conv,
        target,
        session,
        session_ready: false,
        turn: None,
        queue: VecDeque::new(),
        unmarked: std::sync::Mutex::new(Vec::new()),
        permissions: HashMap::new(),
        members: None,
        notices: 0,
        prompt_seq: 0,
        tx,
    };
    let mut active = Instant::now();
    loop {
        let deadline = actor.next_deadline();
        let idle = actor.is_idle();
        let msg = tokio::select! {
            m = rx.recv() => m,
            () = sleep_until(deadline) => {
                if let Err(e) = actor.on_timer().await {
                    tracing::error!(conversation = %actor.conv.id, error = %e, "timer handling failed");
                }
                active = Instant::now();
                continue;
            }
            () = tokio::time::sleep_until(active + actor.core.cfg.actor_idle), if idle => {
                actor.retire(rx).await;
                return;
            }
        };
        active = Instant::now();
        let Some(msg) = msg else { break };
        // A step that fails because the database is unreachable is taken again once it answers, so
        // an outage delays messages and results instead of losing them (each step commits in one
        // transaction, and applying a result twice is refused by the store).
        macro_rules! retrying {
            ($step:expr) => {{
                let mut attempt = 0u32;
                loop {
                    match $step.await {
                        Err(e) if e.is_transient() && attempt < STORE_RETRIES => {
                            attempt += 1;
                            if attempt == 1 {
                                tracing::warn!(conversation = %actor.conv.id, error = %e, "database unavailable; retrying this step until it answers");
                            }
                            tokio::time::sleep(daemon_client::client::backoff_delay(
                                Duration::from_millis(100),
                                Duration::from_secs(5),
                                attempt,
                            ))
                            .await;
                        }
                        r => break r,
                    }
                }
            }};
        }
        let result = match msg {
            ConvMsg::Inbound(m) => {
                let event = (m.platform.clone(), m.event_id.clone());
                let mut again = false;
                let r = loop {
                    // S4: every attempt is counted before it starts; one that keeps failing is
                    // set aside with a notice instead of being tried forever.
                    if again {
                        match retrying!(actor.core.count_attempt(&m)) {
                            Ok(true) => {}
                            Ok(false) => break Ok(()),
                            Err(e) => break Err(e),
                        }
                    }
                    let r = retrying!(actor.on_inbound_event(m.clone(), event.clone()));
                    let left = actor.take_unmarked(&event);
                    match r {
                        Err(e) if left && !e.is_transient() => {
                            tracing::error!(conversation = %actor.conv.id, error = %e, "an inbound event failed");
                            match retrying!(actor.core.inbound_failed(&m, &e, false)) {
                                Ok(super::AfterFailure::Again) => again = true,
                                Ok(_) => break Ok(()),
                                Err(e) => break Err(e),
                            }
                        }
                        // Handled without a transaction of its own (nothing to do, or only a reply
                        // that failed): marked now. After a step that never reached the database it
                        // stays in the inbox and is taken again at the next start.
                        r => {
                            if left && r.is_ok() {
                                let _ = retrying!(actor.mark_alone(&event));
                            }
                            break r;
                        }
                    }
                };
                actor.core.busy_add(-1);
                r
            }
            ConvMsg::Daemon(e) => retrying!(actor.on_event(e.clone())),
            ConvMsg::PromptDone(seq, r) => actor.on_prompt_done(seq, r).await,
            ConvMsg::Resume(turn) => retrying!(actor.on_resume(turn.clone())),
        };
        if let Err(e) = result {
            tracing::error!(conversation = %actor.conv.id, error = %e, "conversation step failed");
        }
    }
}

/// How many times a step is retried while the database is unreachable (100 ms doubling to 5 s:
/// about ten minutes).
const STORE_RETRIES: u32 = 130;

/// Whether a frame replayed by `session/load` tells the open turn something it has not seen (L6):
/// how a tool it still waits on went on while the connection was down, or — for a turn resumed after
/// a restart, which knows none of its tools yet — any tool frame (F4 and the message map make the
/// already-seen ones harmless). Text is always history: an answer is never glued to an old one.
fn replay_is_news(turn: &TurnState, event: &DaemonEvent) -> bool {
    match event {
        DaemonEvent::AgentText { .. }
        | DaemonEvent::Thought { .. }
        | DaemonEvent::Usage { .. }
        | DaemonEvent::Plan { .. }
        | DaemonEvent::PermissionRequested(_) => false,
        DaemonEvent::ToolUpdated { call, .. }
        | DaemonEvent::ToolProgress { call, .. }
        | DaemonEvent::ToolOutput { call, .. }
        | DaemonEvent::ToolFinished { call, .. } => turn.resumed || turn.tools.contains_key(call),
        _ => turn.resumed,
    }
}

/// A tool call's id scoped by its daemon session (see `Actor::scoped`).
fn scoped_id(session: Option<&SessionId>, call: &ToolCallId) -> String {
    match session {
        Some(s) => format!("{s}/{call}"),
        None => call.as_str().to_owned(),
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn stop_str(s: &StopReason) -> &str {
    s.as_str()
}

impl Actor {
    /// Nothing running, queued, awaiting approval or waiting to be marked: the actor holds no state
    /// the store does not.
    fn is_idle(&self) -> bool {
        self.turn.is_none()
            && self.queue.is_empty()
            && self.permissions.is_empty()
            && super::lock(&self.unmarked).is_empty()
    }

    /// Lets go of an idle conversation: forgotten by the core, its channel closed, and anything
    /// that slipped in meanwhile handed to the actor that takes the conversation next.
    async fn retire(mut self, mut rx: mpsc::Receiver<ConvMsg>) {
        self.conv.daemon_session = self.session.as_ref().map(ToString::to_string);
        self.core
            .retire(&self.conv.id, self.session.as_ref(), &self.tx);
        rx.close();
        let mut left = Vec::new();
        while let Ok(m) = rx.try_recv() {
            left.push(m);
        }
        tracing::debug!(conversation = %self.conv.id, handed_on = left.len(), "idle conversation let go from memory");
        let (core, conv) = (self.core.clone(), self.conv.clone());
        drop(self);
        for m in left {
            core.send_to(&conv, m).await;
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut consider = |t: Instant| next = Some(next.map_or(t, |n: Instant| n.min(t)));
        if let Some(turn) = &self.turn {
            if let Some(d) = turn.liveness.deadline() {
                consider(d);
            }
            for tool in turn.tools.values() {
                let due = match tool.progress_shown {
                    Some(shown) => shown + self.core.cfg.progress_every,
                    None => tool.started + self.core.cfg.progress_after,
                };
                consider(due);
            }
        }
        for p in self.permissions.values() {
            consider(p.expires);
        }
        next
    }

    // ---- writing: state change + outbox in one transaction (D1) ----

    /// A tool call's id as stored and as its message key: scoped by the daemon session, because a
    /// daemon that lost its sessions (a restart) numbers calls from the start again.
    fn scoped(&self, call: &ToolCallId) -> String {
        scoped_id(self.session.as_ref(), call)
    }

    async fn begin(&self) -> Result<Tx> {
        self.core.store.begin().await
    }

    async fn enqueue(&self, tx: &mut Tx, action: &ChatAction) -> Result<()> {
        let json = serde_json::to_string(action).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let (kind, coalesce) = match action {
            ChatAction::Post { key, .. } => (Kind::Post, Some(key.as_str())),
            ChatAction::Edit { key, .. } => (Kind::Edit, Some(key.as_str())),
            ChatAction::Ephemeral { .. } | ChatAction::React { .. } => (Kind::Other, None),
        };
        let a = NewAction {
            conversation_id: &self.conv.id,
            kind,
            coalesce_key: coalesce,
            action: &json,
        };
        outbox::enqueue(tx.conn(), &a, now_ms()).await?;
        Ok(())
    }

    /// Appends to the conversation's transcript inside `tx`.
    async fn record(
        &self,
        tx: &mut Tx,
        turn_id: Option<&str>,
        kind: &str,
        actor: &str,
        body: &str,
        tool_call_id: Option<&str>,
    ) -> Result<()> {
        let entry = NewEntry {
            turn_id,
            kind,
            actor: Some(actor),
            body,
            tool_call_id,
        };
        transcript::append(tx.conn(), &self.conv.id, &entry, now_ms()).await?;
        Ok(())
    }

    /// Commits `tx`, marking the inbox entries this step handled inside it.
    async fn commit(&self, mut tx: Tx) -> Result<()> {
        let marks = super::lock(&self.unmarked).clone();
        for (platform, event) in &marks {
            inbound::mark_handled(tx.conn(), platform, event, now_ms()).await?;
        }
        tx.commit().await?;
        if !marks.is_empty() {
            super::lock(&self.unmarked).retain(|m| !marks.contains(m));
        }
        self.core.wake_outbox.notify_one();
        Ok(())
    }

    /// Adds an inbox entry for the next commit to mark.
    fn mark_on_commit(&self, event: Option<EventKey>) {
        if let Some(event) = event {
            let mut unmarked = super::lock(&self.unmarked);
            if !unmarked.contains(&event) {
                unmarked.push(event);
            }
        }
    }

    /// Removes `event` from the entries to mark; whether it was there.
    fn take_unmarked(&self, event: &EventKey) -> bool {
        let mut unmarked = super::lock(&self.unmarked);
        let before = unmarked.len();
        unmarked.retain(|m| m != event);
        unmarked.len() != before
    }

    /// Marks one inbox entry handled on its own.
    async fn mark_alone(&self, (platform, event): &EventKey) -> Result<()> {
        let mut c = self.core.store.conn().await?;
        inbound::mark_handled(&mut c, platform, event, now_ms()).await
    }

    fn post(&self, key: MessageKey, message: Message) -> ChatAction {
        ChatAction::Post {
            target: self.target.clone(),
            key: key.to_string(),
            message,
        }
    }

    fn react(&self, message_id: &str, name: &str, add: bool) -> ChatAction {
        ChatAction::React {
            target: self.target.clone(),
            message_id: message_id.to_owned(),
            name: name.to_owned(),
            add,
        }
    }

    fn edit(&self, key: MessageKey, message: Message, progress: bool) -> ChatAction {
        ChatAction::Edit {
            target: self.target.clone(),
            key: key.to_string(),
            message,
            progress,
        }
    }

    /// Posts a notice from the bridge (and records it in the transcript).
    async fn notice(&mut self, tone: Tone, text: &str) -> Result<()> {
        self.notices += 1;
        let key = MessageKey::Notice(now_ms(), self.notices);
        let msg = render::notice(&self.core.redactor, tone, text);
        let mut tx = self.begin().await?;
        let turn_id = self.turn.as_ref().map(|t| t.row.id.clone());
        self.record(
            &mut tx,
            turn_id.as_deref(),
            "notice",
            "bridge",
            &self.kept(text),
            None,
        )
        .await?;
        self.enqueue(&mut tx, &self.post(key, msg)).await?;
        self.commit(tx).await
    }

    // ---- inbound ----

    /// One inbound event; the first transaction that acts on it marks it handled (a prompt: the one
    /// that starts its turn).
    async fn on_inbound_event(&mut self, m: Inbound, event: EventKey) -> Result<()> {
        self.mark_on_commit(Some(event));
        self.on_inbound(m).await
    }

    async fn on_inbound(&mut self, m: Inbound) -> Result<()> {
        let event = Some((m.platform.clone(), m.event_id.clone()));
        match &m.kind {
            InboundKind::Action(value) => self.on_button(&m.user, value).await,
            InboundKind::Message(text) => {
                let text = text.trim().to_owned();
                if text.is_empty() {
                    return Ok(());
                }
                if self.permissions.len() == 1
                    && let Ok(n) = text.parse::<usize>()
                {
                    // A numbered answer to the one pending approval (channels without buttons).
                    let found = self.permissions.iter().next().and_then(|(id, p)| {
                        p.options
                            .get(n.wrapping_sub(1))
                            .map(|o| (id.clone(), o.option_id.clone()))
                    });
                    if let Some((id, option)) = found {
                        return self.decide(&m.user, &id, &option).await;
                    }
                    // A number while an approval waits is an answer, never a command (A3).
                    return self.refuse(&m, &Refusal::UnknownOption).await;
                }
                let command = text.strip_prefix('/').map(|cmd| {
                    let word = cmd.split_whitespace().next().unwrap_or("");
                    (word, cmd[word.len()..].trim())
                });
                let act = match command {
                    Some(("status" | "history" | "help", _)) => Act::Read,
                    Some(("new", _)) => Act::New,
                    Some(("cancel", _)) => Act::Cancel,
                    Some(("invite" | "uninvite", _)) => Act::Invite,
                    _ => Act::Prompt,
                };
                if let Err(refusal) = self.may(&m.user, act).await? {
                    return self.refuse(&m, &refusal).await;
                }
                match command {
                    Some(("new", _)) => return self.cmd_new().await,
                    Some(("cancel", _)) => return self.cmd_cancel().await,
                    Some(("status", _)) => return self.cmd_status().await,
                    Some(("history", _)) => return self.cmd_history().await,
                    Some(("help", _)) => return self.cmd_help().await,
                    Some(("invite", who)) => return self.cmd_invite(&m.user, who, true).await,
                    Some(("uninvite", who)) => return self.cmd_invite(&m.user, who, false).await,
                    _ => {}
                }
                self.prompt(m.user.clone(), text, m.message_id.clone(), event)
                    .await
            }
        }
    }

    async fn prompt(
        &mut self,
        user: String,
        text: String,
        message_id: Option<String>,
        event: Option<EventKey>,
    ) -> Result<()> {
        // A prompt is handled when its turn starts (or when it is refused), not by the 👀.
        if let Some(e) = &event {
            self.take_unmarked(e);
        }
        if let Some(id) = &message_id {
            // 👀: the message was taken (it may wait in the queue).
            let mut tx = self.begin().await?;
            self.enqueue(&mut tx, &self.react(id, "eyes", true)).await?;
            self.commit(tx).await?;
        }
        if self.turn.is_some() {
            if self.queue.len() >= self.core.cfg.queue_cap {
                let n = self.queue.len();
                self.mark_on_commit(event);
                return self
                    .notice(Tone::Warning, &format!("The queue is full ({n} messages waiting for the running turn). Wait for it to finish, or `/cancel` it."))
                    .await;
            }
            if let Some((platform, id)) = &event {
                // Waiting behind a turn is not failing: restarts meanwhile do not count (S4).
                // Best effort: if this is lost, the attempt simply stays counted.
                if let Ok(mut c) = self.core.store.conn().await {
                    let _ = inbound::taken(&mut c, platform, id).await;
                }
            }
            self.queue.push_back(Queued {
                user,
                text,
                message_id,
                event,
            });
            self.core.busy_add(1);
            return Ok(());
        }
        self.core.busy_add(1);
        self.start_turn(user, text, message_id, event).await
    }

    /// Starts a turn for a prompt; `event`, its inbox entry, is marked in the transaction that
    /// records the turn (or in the notice that says it could not start).
    async fn start_turn(
        &mut self,
        user: String,
        text: String,
        message_id: Option<String>,
        event: Option<EventKey>,
    ) -> Result<()> {
        let session = match self.ensure_session().await {
            Ok(s) => s,
            Err(e) => {
                self.core.busy_add(-1);
                self.mark_on_commit(event);
                return self
                    .notice(
                        Tone::Error,
                        &format!(
                            "Cannot reach the agent: {e}. Your message was not sent; try again."
                        ),
                    )
                    .await;
            }
        };
        self.mark_on_commit(event);
        let row = match self.record_turn(&text, &user).await {
            Ok(row) => row,
            Err(e) => {
                // Not started: no longer busy (a retry counts itself again).
                self.core.busy_add(-1);
                return Err(e);
            }
        };
        tracing::info!(conversation = %self.conv.id, turn = %row.id, session = %session, "turn started");
        self.prompt_seq += 1;
        let seq = self.prompt_seq;
        self.turn = Some(TurnState::new(row, &self.core, false, seq));
        if let Some(t) = self.turn.as_mut() {
            t.user_message = message_id;
        }
        let (client, tx) = (self.core.client.clone(), self.tx.clone());
        tokio::spawn(async move {
            let r = client.prompt(&session, &text).await;
            let _ = tx.send(ConvMsg::PromptDone(seq, r)).await;
        });
        Ok(())
    }

    /// Records a new turn and its prompt, marking the inbox entries of this step.
    async fn record_turn(&self, text: &str, user: &str) -> Result<Turn> {
        let mut tx = self.begin().await?;
        let kept = self.kept(text);
        let row = turns::start(tx.conn(), &self.conv.id, &kept, user, now_ms()).await?;
        self.record(&mut tx, Some(&row.id), "prompt", user, &kept, None)
            .await?;
        self.commit(tx).await?;
        Ok(row)
    }

    async fn ensure_session(&mut self) -> std::result::Result<SessionId, daemon_client::Error> {
        if let Some(s) = self.session.clone() {
            // A session belongs to the connection that created or loaded it (L6): after a reconnect
            // it is loaded again before its next prompt.
            if self.session_ready && self.core.client.is_bound(&s) {
                return Ok(s);
            }
            super::lock(&self.core.sessions).insert(s.clone(), self.conv.id.clone());
            match self.core.client.load_session(&s, &self.conv.cwd).await {
                Ok(()) => {
                    self.session_ready = true;
                    return Ok(s);
                }
                Err(daemon_client::Error::Rpc { message, .. }) => {
                    tracing::warn!(conversation = %self.conv.id, session = %s, "the daemon no longer knows this session; starting a new one");
                    let _ = self.notice(Tone::Warning, &format!("The agent no longer knows this thread's session ({message}); starting a new one.")).await;
                    super::lock(&self.core.sessions).remove(&s);
                    self.session = None;
                }
                Err(e) => return Err(e),
            }
        }
        let new = self.core.client.new_session(&self.core.cfg.cwd).await?;
        super::lock(&self.core.sessions).insert(new.session.clone(), self.conv.id.clone());
        let cwd = self.core.cfg.cwd.display().to_string();
        if let Ok(mut c) = self.core.store.conn().await {
            let _ = conversations::set_session(
                &mut c,
                &self.conv.id,
                new.session.as_str(),
                &cwd,
                now_ms(),
            )
            .await;
        }
        self.conv.daemon_session = Some(new.session.to_string());
        self.conv.cwd = cwd;
        self.session = Some(new.session.clone());
        self.session_ready = true;
        Ok(new.session)
    }

    // ---- access (A2, A3) ----

    /// The people the owner invited, read once from the store.
    async fn members(&mut self) -> Result<Vec<String>> {
        if let Some(m) = &self.members {
            return Ok(m.clone());
        }
        let mut c = self.core.store.conn().await?;
        let m = members::of(&mut c, &self.conv.id).await?;
        self.members = Some(m.clone());
        Ok(m)
    }

    fn roles<'a>(&'a self, members: &'a [String]) -> access::Roles<'a> {
        access::Roles {
            mode: self.core.cfg.threads,
            owner: &self.conv.started_by,
            members,
            approvers: &self.core.cfg.approvers,
        }
    }

    /// A2: whether `user` may do `act` in this thread (the outer `Result` is the store's).
    async fn may(&mut self, user: &str, act: Act) -> Result<std::result::Result<(), Refusal>> {
        if act == Act::Read {
            return Ok(Ok(()));
        }
        let members = self.members().await?;
        Ok(self.roles(&members).may(user, act))
    }

    /// How a person is named in chat: a mention where the platform has them.
    fn person(&self, user: &str) -> String {
        match self.conv.platform.as_str() {
            // A typed mention: the Slack renderer escapes all other text (R8).
            "slack" => crate::channel::text::mention(user),
            "discord" => format!("<@{user}>"),
            _ => user.to_owned(),
        }
    }

    /// Refuses what `m` asked: only its author hears why (an ephemeral reply where the platform has
    /// one), their message gets a ⛔ reaction, and nothing runs. The inbox entry is marked in the
    /// same transaction.
    async fn refuse(&mut self, m: &Inbound, refusal: &Refusal) -> Result<()> {
        tracing::info!(conversation = %self.conv.id, refusal = ?refusal, "refused a person who may not act in this thread");
        metrics::counter!("chatbridge_access_refusals_total", "platform" => self.conv.platform.clone()).increment(1);
        let text = refusal.text(&self.person(&self.conv.started_by));
        let mut tx = self.begin().await?;
        let action = ChatAction::Ephemeral {
            target: self.target.clone(),
            user: m.user.clone(),
            text: self.core.redactor.redact(&text),
        };
        self.enqueue(&mut tx, &action).await?;
        if let Some(id) = &m.message_id {
            self.enqueue(&mut tx, &self.react(id, "no_entry_sign", true))
                .await?;
        }
        self.commit(tx).await
    }

    /// Text as the history keeps it: redacted too when `redact.store` says so.
    fn kept<'t>(&self, text: &'t str) -> std::borrow::Cow<'t, str> {
        if self.core.cfg.redact_store {
            std::borrow::Cow::Owned(self.core.redactor.redact(text))
        } else {
            std::borrow::Cow::Borrowed(text)
        }
    }

    // ---- commands ----

    /// `/invite @a @b` and `/uninvite @a`: the owner (or an approver) lets people act here, or stops
    /// letting them.
    async fn cmd_invite(&mut self, by: &str, who: &str, add: bool) -> Result<()> {
        let people = access::mentioned_users(who);
        let verb = if add { "invite" } else { "uninvite" };
        if people.is_empty() {
            return self
                .notice(
                    Tone::Neutral,
                    &format!("Usage: `/{verb} @person …` — name the people by mentioning them."),
                )
                .await;
        }
        let mut members = self.members().await?;
        let mut changed = Vec::new();
        let mut tx = self.begin().await?;
        for user in &people {
            if *user == self.conv.started_by {
                continue;
            }
            let did = if add {
                members::add(tx.conn(), &self.conv.id, user, by, now_ms()).await?
            } else {
                members::remove(tx.conn(), &self.conv.id, user).await?
            };
            if did {
                changed.push(self.person(user));
                if add {
                    members.push(user.clone());
                } else {
                    members.retain(|m| m != user);
                }
            }
        }
        let text = match (add, changed.is_empty()) {
            (true, false) => format!(
                "{} invited {}: they may now prompt, answer approvals and `/cancel` in this thread.",
                self.person(by),
                changed.join(", ")
            ),
            (false, false) => format!(
                "{} removed {} from this thread.",
                self.person(by),
                changed.join(", ")
            ),
            (true, true) => "Nobody new to invite: they can already act in this thread.".to_owned(),
            (false, true) => "Nobody to remove: they were not invited to this thread.".to_owned(),
        };
        let turn_id = self.turn.as_ref().map(|t| t.row.id.clone());
        self.record(&mut tx, turn_id.as_deref(), "access", by, &text, None)
            .await?;
        self.notices += 1;
        let key = MessageKey::Notice(now_ms(), self.notices);
        let msg = render::notice(&self.core.redactor, Tone::Neutral, &text);
        self.enqueue(&mut tx, &self.post(key, msg)).await?;
        self.commit(tx).await?;
        self.members = Some(members);
        tracing::info!(conversation = %self.conv.id, changed = changed.len(), add, "thread members changed");
        Ok(())
    }

    async fn cmd_new(&mut self) -> Result<()> {
        if let (Some(s), Some(_)) = (&self.session, &self.turn) {
            let _ = self.core.client.cancel(s).await;
        }
        if let Some(s) = self.session.take() {
            super::lock(&self.core.sessions).remove(&s);
        }
        self.session_ready = false;
        self.notice(
            Tone::Neutral,
            "Started over: the next message opens a new agent session.",
        )
        .await
    }

    async fn cmd_cancel(&mut self) -> Result<()> {
        let dropped = self.queue.len();
        for q in std::mem::take(&mut self.queue) {
            self.mark_on_commit(q.event);
        }
        self.core.busy_add(-(dropped as isize));
        match (&self.session, self.turn.as_mut()) {
            (Some(s), Some(turn)) => {
                turn.liveness.record_cancel();
                let s = s.clone();
                if let Err(e) = self.core.client.cancel(&s).await {
                    return self
                        .notice(
                            Tone::Error,
                            &format!("Could not reach the agent to cancel: {e}"),
                        )
                        .await;
                }
                let extra = if dropped > 0 {
                    format!(" ({dropped} queued messages dropped)")
                } else {
                    String::new()
                };
                self.notice(
                    Tone::Neutral,
                    &format!("Cancelling the running turn{extra}…"),
                )
                .await
            }
            _ => self.notice(Tone::Neutral, "Nothing is running.").await,
        }
    }

    async fn cmd_status(&mut self) -> Result<()> {
        let text = match &self.turn {
            None => format!(
                "Idle. Session: {}.",
                self.session
                    .as_ref()
                    .map_or("none yet".to_owned(), ToString::to_string)
            ),
            Some(t) => {
                let mut s = format!(
                    "A turn is running ({} so far).",
                    human_duration(t.liveness_elapsed())
                );
                for tool in t.tools.values() {
                    let age = tool.last_output.map_or("no output yet".to_owned(), |o| {
                        format!("last output {} ago", human_duration(o.elapsed()))
                    });
                    s.push_str(&format!(
                        "\n• {} — running for {}, {age}",
                        tool.title,
                        human_duration(tool.started.elapsed())
                    ));
                }
                if !self.queue.is_empty() {
                    s.push_str(&format!("\n{} messages queued.", self.queue.len()));
                }
                s
            }
        };
        self.notice(Tone::Neutral, &text).await
    }

    async fn cmd_history(&mut self) -> Result<()> {
        let mut c = self.core.store.conn().await?;
        let turns = turns::of_conversation(&mut c, &self.conv.id).await?;
        drop(c);
        let mut text = format!(
            "This thread: {} turns (conversation {}).",
            turns.len(),
            self.conv.id
        );
        for t in turns.iter().rev().take(5).rev() {
            // Redacted first, then cut: a cut never leaves half a secret behind (S2).
            let prompt: String = self
                .core
                .redactor
                .redact(&t.prompt)
                .chars()
                .take(60)
                .collect();
            text.push_str(&format!("\n{}. {} — {}", t.seq, prompt, t.status));
        }
        text.push_str(&format!(
            "\nFull history: `chat-bridge history show {}`",
            self.conv.id
        ));
        self.notice(Tone::Neutral, &text).await
    }

    async fn cmd_help(&mut self) -> Result<()> {
        self.notice(
            Tone::Neutral,
            "Each message is a prompt for the agent in this thread's session.\n/cancel — stop the running turn\n/status — what is running\n/new — start a new agent session\n/history — this thread's turns\n/invite @person — let someone prompt and approve here (the thread's owner)\n/uninvite @person — stop letting them\n/help — this text",
        )
        .await
    }

    // ---- daemon events ----

    async fn on_event(&mut self, e: DaemonEvent) -> Result<()> {
        if let DaemonEvent::PermissionRequested(req) = &e {
            return self.on_permission(req.clone()).await;
        }
        let e = match e {
            // History replayed by session/load is never live output (L6). Only an update for a
            // tool this turn is still waiting on is news: it ended while the connection was down.
            DaemonEvent::Replayed { event, .. } => match self.turn.as_ref() {
                Some(turn) if replay_is_news(turn, &event) => *event,
                _ => return Ok(()),
            },
            e => e,
        };
        let Some(turn) = self.turn.as_mut() else {
            // Stray frames: nothing to attach them to.
            return Ok(());
        };
        turn.liveness.observe(&e, Instant::now());
        match e {
            DaemonEvent::ToolStarted { call, info, .. } => self.on_tool_started(call, info).await,
            DaemonEvent::ToolUpdated { call, info, .. } => {
                if let Some(title) = info.title.clone()
                    && let Some(tool) = turn.tools.get_mut(&call)
                    && tool.title != title
                {
                    tool.title = title.clone();
                    let mut tx = self.begin().await?;
                    tool_calls::start(
                        tx.conn(),
                        &self.conv.id,
                        None,
                        &self.scoped(&call),
                        &self.kept(&title),
                        info.kind.as_deref(),
                        now_ms(),
                    )
                    .await?;
                    let msg = render::tool_running(&self.core.redactor, &title, None);
                    self.enqueue(
                        &mut tx,
                        &self.edit(MessageKey::Tool(self.scoped(&call)), msg, false),
                    )
                    .await?;
                    self.commit(tx).await?;
                } else if !turn.tools.contains_key(&call) {
                    return self.on_tool_started(call, info).await;
                }
                Ok(())
            }
            DaemonEvent::ToolProgress { call, progress, .. } => {
                if let Some(tool) = turn.tools.get_mut(&call) {
                    tool.unflushed += 1;
                    tool.progress = Some(progress);
                }
                self.flush_progress(false);
                self.maybe_progress_line(&call).await
            }
            DaemonEvent::ToolOutput { call, .. } => {
                if let Some(tool) = turn.tools.get_mut(&call) {
                    tool.last_output = Some(Instant::now());
                }
                self.maybe_progress_line(&call).await
            }
            DaemonEvent::ToolFinished { call, result, .. } => {
                self.on_tool_finished(call, result).await
            }
            DaemonEvent::AgentText { text, .. } => {
                turn.answer.push_str(&text);
                Ok(())
            }
            DaemonEvent::TurnEnded { stop_reason, .. } => {
                self.end_turn(Some(stop_reason), None).await
            }
            DaemonEvent::Other { kind: Some(k), .. } if k == "turn_complete" && turn.resumed => {
                self.end_turn(Some(StopReason::EndTurn), None).await
            }
            _ => Ok(()),
        }
    }

    async fn on_tool_started(&mut self, call: ToolCallId, info: ToolInfo) -> Result<()> {
        let scoped = self.scoped(&call);
        let Some(turn) = self.turn.as_mut() else {
            return Ok(());
        };
        let title = info.title.clone().unwrap_or_else(|| "tool".into());
        let mut c = self.core.store.conn().await?;
        if let Some(known) = tool_calls::by_call_id(&mut c, &self.conv.id, &scoped).await? {
            if known.status == "running" {
                // Replayed after a restart or reconnect: the thread already shows it; follow it again.
                let now = Instant::now();
                let state = ToolState {
                    title: known.title,
                    started: now,
                    last_output: None,
                    progress_shown: None,
                    unflushed: 0,
                    progress: None,
                    flushed: now,
                };
                turn.tools.insert(call, state);
            }
            // Finished already: nothing to show again.
            return Ok(());
        }
        drop(c);
        // The answer is the text after the last tool call (R5).
        turn.answer.clear();
        let turn_id = turn.row.id.clone();
        let mut tx = self.begin().await?;
        let kept_title = self.kept(&title);
        let db_id = tool_calls::start(
            tx.conn(),
            &self.conv.id,
            Some(&turn_id),
            &self.scoped(&call),
            &kept_title,
            info.kind.as_deref(),
            now_ms(),
        )
        .await?;
        tracing::debug!(tool_call = %db_id, "tool started");
        self.record(
            &mut tx,
            Some(&turn_id),
            "tool_started",
            "agent",
            &kept_title,
            Some(&db_id),
        )
        .await?;
        let msg = render::tool_running(&self.core.redactor, &title, None);
        self.enqueue(
            &mut tx,
            &self.post(MessageKey::Tool(self.scoped(&call)), msg),
        )
        .await?;
        self.commit(tx).await?;
        let now = Instant::now();
        if let Some(turn) = self.turn.as_mut() {
            turn.tools.insert(
                call,
                ToolState {
                    title,
                    started: now,
                    last_output: None,
                    progress_shown: None,
                    unflushed: 0,
                    progress: None,
                    flushed: now,
                },
            );
        }
        Ok(())
    }

    async fn on_tool_finished(&mut self, call: ToolCallId, result: ToolResult) -> Result<()> {
        let Some(turn) = self.turn.as_mut() else {
            return Ok(());
        };
        let tool = turn.tools.remove(&call);
        let (title, took) = match &tool {
            Some(t) => (t.title.clone(), Some(t.started.elapsed())),
            None => ("tool".to_owned(), None),
        };
        let turn_id = turn.row.id.clone();
        let mut tx = self.begin().await?;
        if tool.is_none() {
            // Started before a restart, or never announced: make sure the row exists.
            tool_calls::start(
                tx.conn(),
                &self.conv.id,
                Some(&turn_id),
                &self.scoped(&call),
                "",
                None,
                now_ms(),
            )
            .await?;
        }
        // This tool's unwritten heartbeat count goes into the result's own transaction: the result
        // never waits for a separate write (P2).
        if let Some(t) = tool.as_ref().filter(|t| t.unflushed > 0) {
            tool_calls::progress(
                tx.conn(),
                &self.conv.id,
                &self.scoped(&call),
                t.unflushed,
                t.progress_json().as_deref(),
                now_ms(),
            )
            .await?;
        }
        let kept_summary = result.summary.as_deref().map(|s| self.kept(s));
        let kept_output = self.kept(&result.output);
        let finish = tool_calls::Finish {
            outcome: result.outcome.as_str(),
            summary: kept_summary.as_deref(),
            output: &kept_output,
            exit_code: result.exit_code,
            signal: result.signal,
        };
        let Some(db_id) = tool_calls::finish(
            tx.conn(),
            &self.conv.id,
            &self.scoped(&call),
            &finish,
            now_ms(),
        )
        .await?
        else {
            // Already recorded (a replay): the thread already shows it.
            return Ok(());
        };
        let title = match tool {
            Some(_) => title,
            None => tool_calls::get(tx.conn(), &db_id)
                .await?
                .map_or(title, |t| t.title),
        };
        let summary = result
            .summary
            .clone()
            .unwrap_or_else(|| result.outcome.as_str().to_owned());
        self.record(
            &mut tx,
            Some(&turn_id),
            "tool_finished",
            "agent",
            &self.kept(&summary),
            Some(&db_id),
        )
        .await?;
        let msg = render::tool_finished(
            &self.core.redactor,
            &title,
            &result,
            took,
            &db_id,
            self.core.cfg.output_cap,
        );
        self.enqueue(
            &mut tx,
            &self.edit(MessageKey::Tool(self.scoped(&call)), msg, false),
        )
        .await?;
        self.commit(tx).await?;
        metrics::counter!("chatbridge_tool_results_total", "outcome" => result.outcome.as_str())
            .increment(1);
        if let Some(took) = took {
            metrics::histogram!("chatbridge_tool_duration_seconds", "outcome" => result.outcome.as_str())
                .record(took.as_secs_f64());
        }
        // R4: ids and the short outcome only — never output or prompt text.
        tracing::info!(conversation = %self.conv.id, tool_call = %db_id, outcome = result.outcome.as_str(), "tool finished");
        Ok(())
    }

    /// Hands accumulated heartbeat counts and progress to the progress writer, at most every
    /// `progress_flush` (or now). Never waits for the database: counts the writer cannot take yet stay
    /// here for the next flush.
    fn flush_progress(&mut self, force: bool) {
        let every = self.core.cfg.progress_flush;
        let conversation = self.conv.id.clone();
        let session = self.session.clone();
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        for (call, t) in &mut turn.tools {
            if t.unflushed == 0 || !(force || t.flushed.elapsed() >= every) {
                continue;
            }
            let w = super::ProgressWrite {
                conversation: conversation.clone(),
                call: scoped_id(session.as_ref(), call),
                heartbeats: t.unflushed,
                progress: t.progress_json(),
            };
            if self.core.queue_progress(w) {
                t.unflushed = 0;
                t.flushed = Instant::now();
            }
        }
    }

    /// L5: a tool running past `progress_after` shows elapsed time and output age, edited at most
    /// every `progress_every`. Never a new message.
    async fn maybe_progress_line(&mut self, call: &ToolCallId) -> Result<()> {
        let (after, every) = (self.core.cfg.progress_after, self.core.cfg.progress_every);
        let Some(turn) = self.turn.as_mut() else {
            return Ok(());
        };
        let Some(tool) = turn.tools.get_mut(call) else {
            return Ok(());
        };
        let now = Instant::now();
        let elapsed = now.duration_since(tool.started);
        let due = elapsed >= after
            && tool
                .progress_shown
                .is_none_or(|s| now.duration_since(s) >= every);
        if !due {
            return Ok(());
        }
        tool.progress_shown = Some(now);
        let age = tool
            .progress
            .and_then(|p| p.last_output_age_ms.map(Duration::from_millis))
            .or_else(|| tool.last_output.map(|o| now.duration_since(o)));
        let msg = render::tool_running(&self.core.redactor, &tool.title, Some((elapsed, age)));
        let key = MessageKey::Tool(self.scoped(call));
        let mut tx = self.begin().await?;
        self.enqueue(&mut tx, &self.edit(key, msg, true)).await?;
        self.commit(tx).await
    }

    async fn on_permission(&mut self, mut req: PermissionRequest) -> Result<()> {
        if self.core.cfg.require_second_person {
            // Four eyes on every call: an "always" would let the requester's later calls run
            // unseen, so it is not offered (and, not offered, a forged click is refused).
            req.options.retain(|o| o.kind != "allow_always");
        }
        if let Some(turn) = self.turn.as_mut() {
            turn.liveness.observe(
                &DaemonEvent::PermissionRequested(req.clone()),
                Instant::now(),
            );
        }
        let requester = self.turn.as_ref().map_or_else(
            || self.conv.started_by.clone(),
            |t| t.row.requested_by.clone(),
        );
        let title = req
            .info
            .title
            .clone()
            .unwrap_or_else(|| "a tool call".into());
        let options_json =
            serde_json::to_string(&req.options).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let request_json = serde_json::to_string(&req.request_id)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let timeout = self.core.cfg.permission_timeout;
        let scoped_call = req.call.as_ref().map(|c| self.scoped(c));
        let mut tx = self.begin().await?;
        let new = permissions::NewRequest {
            conversation_id: &self.conv.id,
            turn_id: self.turn.as_ref().map(|t| t.row.id.as_str()),
            request_id: &request_json,
            call_id: scoped_call.as_deref(),
            title: &self.kept(&title),
            options: &options_json,
            requester: &requester,
            expires_at: now_ms() + crate::store::ms(timeout),
        };
        let id = permissions::create(tx.conn(), &new, now_ms()).await?;
        let msg = render::permission(&self.core.redactor, &id, &title, &req.options, None);
        self.enqueue(&mut tx, &self.post(MessageKey::Permission(id.clone()), msg))
            .await?;
        self.commit(tx).await?;
        self.permissions.insert(
            id.clone(),
            PendingPermission {
                db_id: id,
                request_id: req.request_id,
                title,
                options: req.options,
                requester,
                expires: Instant::now() + timeout,
            },
        );
        Ok(())
    }

    async fn on_button(&mut self, user: &str, value: &str) -> Result<()> {
        match value.parse::<ButtonValue>() {
            Ok(ButtonValue::Permission { request, option }) => {
                self.decide(user, &request, &option).await
            }
            Err(_) => {
                // Hostile until parsed: the value itself is not logged.
                tracing::info!(conversation = %self.conv.id, "a click with an unknown value was ignored");
                Ok(())
            }
        }
    }

    /// Marks a request asked before a restart as lapsed and takes its buttons away; `false` when it
    /// was no longer pending.
    async fn lapse(&self, tx: &mut Tx, row: &permissions::PermissionRow) -> Result<bool> {
        if permissions::resolve(tx.conn(), &row.id, "bridge", "lapsed", now_ms())
            .await?
            .is_none()
        {
            return Ok(false);
        }
        let options: Vec<daemon_client::PermissionOption> =
            serde_json::from_str(&row.options).unwrap_or_default();
        let msg = render::permission(
            &self.core.redactor,
            &row.id,
            &row.title,
            &options,
            Some("lapsed: the bridge restarted while this waited"),
        );
        self.enqueue(
            tx,
            &self.edit(MessageKey::Permission(row.id.clone()), msg, false),
        )
        .await?;
        Ok(true)
    }

    /// R6: only the requester and configured approvers may decide; the first decision wins.
    async fn decide(&mut self, user: &str, id: &str, option: &str) -> Result<()> {
        let Some(p) = self.permissions.get(id) else {
            // Answered already, or asked before a restart: tell only the clicker.
            let mut tx = self.begin().await?;
            let lapsed = match permissions::get(tx.conn(), id).await? {
                Some(row) if row.conversation_id == self.conv.id => {
                    self.lapse(&mut tx, &row).await?
                }
                _ => false,
            };
            let text = if lapsed {
                "That approval lapsed when the bridge restarted (the agent's question went with the old connection); send the message again if it still matters."
            } else {
                "That approval is no longer pending."
            };
            let action = ChatAction::Ephemeral {
                target: self.target.clone(),
                user: user.to_owned(),
                text: text.to_owned(),
            };
            self.enqueue(&mut tx, &action).await?;
            return self.commit(tx).await;
        };
        let requester = p.requester.clone();
        let offered: Vec<String> = p.options.iter().map(|o| o.option_id.clone()).collect();
        let offered: Vec<&str> = offered.iter().map(String::as_str).collect();
        let members = self.members().await?;
        let verdict = self.roles(&members).may_answer(
            user,
            &requester,
            option,
            &offered,
            self.core.cfg.require_second_person,
        );
        if let Err(refusal) = verdict {
            // Only the clicker hears about it (ephemeral where the platform has it).
            tracing::info!(conversation = %self.conv.id, refusal = ?refusal, "an approval answer was refused");
            metrics::counter!("chatbridge_access_refusals_total", "platform" => self.conv.platform.clone()).increment(1);
            let action = ChatAction::Ephemeral {
                target: self.target.clone(),
                user: user.to_owned(),
                text: self
                    .core
                    .redactor
                    .redact(&refusal.text(&self.person(&self.conv.started_by))),
            };
            let mut tx = self.begin().await?;
            self.enqueue(&mut tx, &action).await?;
            return self.commit(tx).await;
        }
        let Some(p) = self.permissions.remove(id) else {
            return Ok(());
        };
        let label = p
            .options
            .iter()
            .find(|o| o.option_id == option)
            .map_or(option.to_owned(), |o| o.name.clone());
        let mut tx = self.begin().await?;
        if permissions::resolve(tx.conn(), &p.db_id, user, option, now_ms())
            .await?
            .is_none()
        {
            return Ok(());
        }
        let decided = format!("{user} chose: {label}");
        let msg = render::permission(
            &self.core.redactor,
            &p.db_id,
            &p.title,
            &p.options,
            Some(&decided),
        );
        self.enqueue(
            &mut tx,
            &self.edit(MessageKey::Permission(p.db_id.clone()), msg, false),
        )
        .await?;
        self.record(&mut tx, None, "permission", user, &decided, None)
            .await?;
        self.commit(tx).await?;
        if let Err(e) = self
            .core
            .client
            .answer_permission(
                &p.request_id,
                &PermissionOutcome::Selected(option.to_owned()),
            )
            .await
        {
            return self
                .notice(
                    Tone::Error,
                    &format!("Could not pass the decision to the agent: {e}"),
                )
                .await;
        }
        Ok(())
    }

    // ---- turn end, prompt completion, resume ----

    async fn end_turn(&mut self, stop: Option<StopReason>, forced: Option<&str>) -> Result<()> {
        self.flush_progress(true);
        let Some(turn) = self.turn.take() else {
            return Ok(());
        };
        let cause = turn.liveness.first_cause();
        let status = match (forced, cause, &stop) {
            (Some(s), _, _) => s,
            (None, Some(EndCause::Stalled(_)), _) => "stalled",
            (None, Some(EndCause::Cancelled), _) | (None, None, Some(StopReason::Cancelled)) => {
                "cancelled"
            }
            _ => "ended",
        };
        let end_cause = cause.map(|c| match c {
            EndCause::Stalled(StallKind::Idle) => "stalled_idle",
            EndCause::Stalled(StallKind::Wall) => "stalled_wall",
            EndCause::Cancelled => "cancelled",
        });
        let answer = turn.answer.trim().to_owned();
        let kept_answer = self.kept(&answer);
        let stop_s = stop.as_ref().map(stop_str);
        let mut tx = self.begin().await?;
        let ending = Ending {
            status,
            stop_reason: stop_s,
            end_cause,
            answer: (!answer.is_empty()).then_some(&*kept_answer),
        };
        turns::finish(tx.conn(), &turn.row.id, &ending, now_ms()).await?;
        if !answer.is_empty() {
            self.record(
                &mut tx,
                Some(&turn.row.id),
                "answer",
                "agent",
                &kept_answer,
                None,
            )
            .await?;
            let msg = render::answer(&self.core.redactor, &answer);
            self.enqueue(
                &mut tx,
                &self.post(MessageKey::Answer(turn.row.id.clone()), msg),
            )
            .await?;
        }
        if let Some(id) = &turn.user_message {
            let outcome = match status {
                "ended" => "white_check_mark",
                "cancelled" => "black_square_for_stop",
                "stalled" => "warning",
                _ => "x",
            };
            self.enqueue(&mut tx, &self.react(id, "eyes", false))
                .await?;
            self.enqueue(&mut tx, &self.react(id, outcome, true))
                .await?;
        }
        self.commit(tx).await?;
        tracing::info!(conversation = %self.conv.id, turn = %turn.row.id, %status, "turn ended");
        let took = (now_ms() - turn.row.started_at).max(0) as f64 / 1000.0;
        metrics::histogram!("chatbridge_turn_duration_seconds", "status" => status.to_owned())
            .record(took);
        let _ended = BusyGuard(self.core.clone());
        while let Some(q) = self.queue.pop_front() {
            // Asked again at its turn: its author may have been `/uninvite`d while it waited (A2).
            if let Err(refusal) = self.may(&q.user, Act::Prompt).await? {
                self.core.busy_add(-1);
                self.mark_on_commit(q.event.clone());
                let refused = Inbound {
                    event_id: String::new(),
                    platform: self.conv.platform.clone(),
                    target: self.target.clone(),
                    user: q.user,
                    message_id: q.message_id,
                    opens: false,
                    kind: InboundKind::Message(String::new()),
                };
                self.refuse(&refused, &refusal).await?;
                continue;
            }
            // Counted as busy when it was queued; that count now belongs to its turn.
            let event = q.event.clone();
            if let Err(e) = self.start_turn(q.user, q.text, q.message_id, q.event).await {
                // Not marked: it stays in the inbox and is taken again at the next start.
                if let Some(event) = &event {
                    self.take_unmarked(event);
                }
                return Err(e);
            }
            break;
        }
        Ok(())
    }

    /// Closes the tool calls of the current turn that will never finish (the daemon lost their
    /// session): stored as `interrupted`, their messages say so.
    async fn interrupt_running_tools(&mut self) -> Result<()> {
        let Some(turn) = self.turn.as_mut() else {
            return Ok(());
        };
        let running: Vec<(ToolCallId, String)> = turn
            .tools
            .drain()
            .map(|(call, tool)| (call, tool.title))
            .collect();
        if running.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin().await?;
        for (call, title) in running {
            let scoped = self.scoped(&call);
            let finish = tool_calls::Finish {
                outcome: "interrupted",
                summary: Some("the agent lost the session"),
                output: "",
                exit_code: None,
                signal: None,
            };
            tool_calls::finish(tx.conn(), &self.conv.id, &scoped, &finish, now_ms()).await?;
            let msg = render::tool_interrupted(&self.core.redactor, &title);
            self.enqueue(
                &mut tx,
                &self.edit(MessageKey::Tool(scoped.clone()), msg, false),
            )
            .await?;
        }
        self.commit(tx).await
    }

    async fn on_prompt_done(
        &mut self,
        seq: u64,
        r: std::result::Result<StopReason, daemon_client::Error>,
    ) -> Result<()> {
        let Some(turn) = &self.turn else {
            return Ok(());
        };
        if turn.prompt_seq != seq {
            return Ok(());
        }
        match r {
            // TurnEnded on the event stream ends the turn, after all its events.
            Ok(_) => Ok(()),
            Err(daemon_client::Error::SessionLost { message, .. }) => {
                self.interrupt_running_tools().await?;
                self.session = None;
                self.session_ready = false;
                self.notice(Tone::Error, &format!("The agent lost this thread's session while the connection was down ({message}); the turn was interrupted. Send the message again to start over.")).await?;
                self.end_turn(None, Some("interrupted")).await
            }
            // Our own connection closing at shutdown: the turn stays open for the next start (D3).
            Err(_) if self.core.shutdown.is_cancelled() => Ok(()),
            Err(e) => {
                self.notice(
                    Tone::Error,
                    &format!("The agent could not run this turn: {e}"),
                )
                .await?;
                self.end_turn(None, Some("failed")).await
            }
        }
    }

    async fn on_resume(&mut self, row: Turn) -> Result<()> {
        // Questions asked before the restart went with the old daemon connection.
        let mut tx = self.begin().await?;
        for pending in permissions::pending_of(tx.conn(), &self.conv.id).await? {
            self.lapse(&mut tx, &pending).await?;
        }
        self.commit(tx).await?;
        self.turn = Some(TurnState::new(row, &self.core, true, 0));
        match self.ensure_session().await {
            Ok(_) if self.session_ready && self.turn.is_some() => {
                tracing::info!(conversation = %self.conv.id, "open turn resumed after restart");
                Ok(())
            }
            _ => {
                self.notice(Tone::Warning, "The bridge restarted during this turn and the agent no longer has it; the turn was interrupted. Send your message again if it still matters.").await?;
                self.end_turn(None, Some("interrupted")).await
            }
        }
    }

    // ---- timers ----

    async fn on_timer(&mut self) -> Result<()> {
        let now = Instant::now();
        let expired: Vec<String> = self
            .permissions
            .iter()
            .filter(|(_, p)| p.expires <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for id in expired {
            if let Some(p) = self.permissions.remove(&id) {
                let mut tx = self.begin().await?;
                permissions::expire_due(tx.conn(), now_ms() + 1000).await?;
                let msg = render::permission(
                    &self.core.redactor,
                    &p.db_id,
                    &p.title,
                    &p.options,
                    Some("expired unanswered — rejected"),
                );
                self.enqueue(
                    &mut tx,
                    &self.edit(MessageKey::Permission(p.db_id.clone()), msg, false),
                )
                .await?;
                self.commit(tx).await?;
                let _ = self
                    .core
                    .client
                    .answer_permission(&p.request_id, &PermissionOutcome::Cancelled)
                    .await;
            }
        }
        let calls: Vec<ToolCallId> = self
            .turn
            .as_ref()
            .map(|t| t.tools.keys().cloned().collect())
            .unwrap_or_default();
        for call in calls {
            self.maybe_progress_line(&call).await?;
        }
        let Some(turn) = self.turn.as_mut() else {
            return Ok(());
        };
        let Some(stall) = turn.liveness.poll(now) else {
            return Ok(());
        };
        let resumed = turn.resumed;
        tracing::warn!(conversation = %self.conv.id, turn = %turn.row.id, kind = ?stall.kind, "turn stalled");
        metrics::counter!("chatbridge_stalls_total").increment(1);
        if resumed {
            self.notice(Tone::Warning, &format!("No word from the agent for {} after the bridge restarted; this turn's end was not seen, so it is marked interrupted.", human_duration(stall.silent_for))).await?;
            return self.end_turn(None, Some("interrupted")).await;
        }
        let text = match stall.kind {
            StallKind::Idle => format!(
                "No word from the agent for {} — the turn is still open; `/cancel` stops it.",
                human_duration(stall.silent_for)
            ),
            StallKind::Wall => format!(
                "This turn has run for {}, its time limit — `/cancel` stops it.",
                human_duration(stall.elapsed)
            ),
        };
        self.notice(Tone::Warning, &text).await?;
        if self.core.cfg.on_stall == OnStall::Cancel
            && let Some(s) = self.session.clone()
        {
            if let Some(t) = self.turn.as_mut() {
                t.liveness.record_cancel();
            }
            if let Err(e) = self.core.client.cancel(&s).await {
                tracing::warn!(error = %e, "cancel after stall failed");
            }
            self.notice(Tone::Neutral, "Cancelling it (on_stall = cancel).")
                .await?;
        }
        Ok(())
    }
}

impl TurnState {
    fn new(row: Turn, core: &Core, resumed: bool, prompt_seq: u64) -> Self {
        let liveness = Liveness::new(core.cfg.liveness.clone(), Instant::now());
        Self {
            row,
            liveness,
            tools: HashMap::new(),
            answer: String::new(),
            resumed,
            prompt_seq,
            user_message: None,
        }
    }

    fn liveness_elapsed(&self) -> Duration {
        Duration::from_millis(u64::try_from(now_ms() - self.row.started_at).unwrap_or(0))
    }
}

/// Releases one busy count when dropped — after any queued turn has been started and counted.
struct BusyGuard(Arc<Core>);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.0.busy_add(-1);
    }
}
