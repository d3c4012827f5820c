-- The platform id of the message that asked for the turn: a turn taken back after a restart (D3)
-- still marks that message with its outcome (✅, ❌, ⏹) in place of the 👀 it got when it started.
ALTER TABLE turns ADD COLUMN message_id TEXT;
