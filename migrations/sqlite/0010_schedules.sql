-- Scheduled prompts (`/every 1h …`, `/at 09:00 …`): each run is a normal turn in its thread,
-- sent as the person who scheduled it. `every_ms` repeats; without it the schedule runs once
-- and is deleted. `next_run_at` is Unix ms; a run missed while no replica was active runs once.
CREATE TABLE schedules (
    id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations (id),
    created_by TEXT NOT NULL,
    prompt TEXT NOT NULL,
    every_ms BIGINT,
    next_run_at BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX schedules_due ON schedules (next_run_at);
CREATE INDEX schedules_conversation ON schedules (conversation_id);
