-- Issue 17: each conversation belongs to a project (the channel's `[[projects]]` entry). Rows from
-- before, and every conversation of the one-project configuration, belong to the implicit project
-- `default`. History filters by it (`?project=`, `--project`).
ALTER TABLE conversations ADD COLUMN project TEXT NOT NULL DEFAULT 'default';
CREATE INDEX conversations_project_created ON conversations (project, created_at);
