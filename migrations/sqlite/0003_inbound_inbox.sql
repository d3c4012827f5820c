-- The inbound table becomes an inbox: the event itself is kept with its id, and `handled_at` is set in
-- the transaction that acted on it (a turn started, a reply queued, a decision recorded). An event
-- recorded but not handled when the process died — a crash between the platform's acknowledgement and
-- the turn, or a message queued behind a running turn — is taken again at start-up. Rows from before
-- this migration have no payload and are never replayed.
ALTER TABLE inbound_events ADD COLUMN payload TEXT;
ALTER TABLE inbound_events ADD COLUMN handled_at BIGINT;
CREATE INDEX inbound_events_unhandled ON inbound_events (received_at)
    WHERE handled_at IS NULL AND payload IS NOT NULL;
