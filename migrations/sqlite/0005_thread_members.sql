-- A2: a thread belongs to the person who opened it (`conversations.started_by`); the people they
-- invite with `/invite` may act there too. One row per invited person; `/uninvite` deletes it.
CREATE TABLE thread_members (
    conversation_id TEXT NOT NULL REFERENCES conversations (id),
    user_id TEXT NOT NULL,
    added_by TEXT NOT NULL,
    added_at BIGINT NOT NULL,
    PRIMARY KEY (conversation_id, user_id)
);
