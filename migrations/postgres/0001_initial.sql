-- chat-bridge schema, PostgreSQL. Append-only: never edit a migration that has landed; add a new one.
-- Times are unix milliseconds (BIGINT) so the same queries run on SQLite; JSON is TEXT for the same reason.

CREATE TABLE conversations (
    id              TEXT PRIMARY KEY,
    platform        TEXT NOT NULL,
    workspace       TEXT NOT NULL,
    channel         TEXT NOT NULL,
    thread          TEXT NOT NULL,
    daemon_session  TEXT,
    cwd             TEXT NOT NULL DEFAULT '',
    started_by      TEXT NOT NULL,
    title           TEXT NOT NULL DEFAULT '',
    status          TEXT NOT NULL DEFAULT 'active',
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    UNIQUE (platform, workspace, channel, thread)
);
CREATE INDEX conversations_created ON conversations (created_at DESC, id DESC);
CREATE INDEX conversations_channel ON conversations (platform, channel, created_at DESC);
CREATE INDEX conversations_user ON conversations (started_by, created_at DESC);
CREATE INDEX conversations_session ON conversations (daemon_session);

CREATE TABLE turns (
    id              TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    seq             BIGINT NOT NULL,
    prompt          TEXT NOT NULL,
    requested_by    TEXT NOT NULL,
    status          TEXT NOT NULL DEFAULT 'open',
    stop_reason     TEXT,
    end_cause       TEXT,
    answer          TEXT,
    started_at      BIGINT NOT NULL,
    ended_at        BIGINT,
    UNIQUE (conversation_id, seq)
);
CREATE INDEX turns_open ON turns (status) WHERE status = 'open';

CREATE TABLE tool_calls (
    id              TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    turn_id         TEXT REFERENCES turns (id) ON DELETE SET NULL,
    call_id         TEXT NOT NULL,
    title           TEXT NOT NULL DEFAULT '',
    kind            TEXT,
    status          TEXT NOT NULL DEFAULT 'running',
    summary         TEXT,
    output          TEXT,
    exit_code       BIGINT,
    signal          BIGINT,
    heartbeats      BIGINT NOT NULL DEFAULT 0,
    last_progress   TEXT,
    started_at      BIGINT NOT NULL,
    progress_at     BIGINT,
    finished_at     BIGINT,
    UNIQUE (conversation_id, call_id)
);
CREATE INDEX tool_calls_turn ON tool_calls (turn_id);

CREATE TABLE transcript (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    turn_id         TEXT,
    seq             BIGINT NOT NULL,
    kind            TEXT NOT NULL,
    actor           TEXT,
    body            TEXT NOT NULL,
    tool_call_id    TEXT,
    created_at      BIGINT NOT NULL,
    UNIQUE (conversation_id, seq)
);

CREATE TABLE message_map (
    conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    logical_key     TEXT NOT NULL,
    platform_id     TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    PRIMARY KEY (conversation_id, logical_key)
);

CREATE TABLE inbound_events (
    platform        TEXT NOT NULL,
    event_id        TEXT NOT NULL,
    received_at     BIGINT NOT NULL,
    PRIMARY KEY (platform, event_id)
);
CREATE INDEX inbound_events_received ON inbound_events (received_at);

CREATE TABLE outbox (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    kind            TEXT NOT NULL,
    coalesce_key    TEXT,
    action          TEXT NOT NULL,
    status          TEXT NOT NULL DEFAULT 'pending',
    attempts        BIGINT NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,
    claimed_by      TEXT,
    claim_until     BIGINT,
    last_error      TEXT,
    created_at      BIGINT NOT NULL,
    delivered_at    BIGINT
);
CREATE INDEX outbox_pending ON outbox (conversation_id, id) WHERE status = 'pending';
CREATE INDEX outbox_due ON outbox (next_attempt_at) WHERE status = 'pending';

CREATE TABLE permission_requests (
    id              TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    turn_id         TEXT,
    request_id      TEXT NOT NULL,
    call_id         TEXT,
    title           TEXT NOT NULL DEFAULT '',
    options         TEXT NOT NULL,
    requester       TEXT NOT NULL,
    status          TEXT NOT NULL DEFAULT 'pending',
    decider         TEXT,
    option_id       TEXT,
    created_at      BIGINT NOT NULL,
    expires_at      BIGINT NOT NULL,
    decided_at      BIGINT
);
CREATE INDEX permission_requests_pending ON permission_requests (expires_at) WHERE status = 'pending';
