-- Poison events never loop (S4). Each time the bridge starts handling an inbox event it counts the
-- attempt here first, in its own commit, so an attempt that ends in a crash counts too. An event that
-- fails (or was interrupted) `attempts` times is set aside as a dead letter: `dead_at` is set, it is
-- never taken again, and it stays (with the reason in `last_error`) for on-call to read.
ALTER TABLE inbound_events ADD COLUMN attempts BIGINT NOT NULL DEFAULT 0;
ALTER TABLE inbound_events ADD COLUMN last_error TEXT;
ALTER TABLE inbound_events ADD COLUMN dead_at BIGINT;
DROP INDEX inbound_events_unhandled;
CREATE INDEX inbound_events_unhandled ON inbound_events (received_at)
    WHERE handled_at IS NULL AND payload IS NOT NULL AND dead_at IS NULL;
CREATE INDEX inbound_events_dead ON inbound_events (dead_at) WHERE dead_at IS NOT NULL;
