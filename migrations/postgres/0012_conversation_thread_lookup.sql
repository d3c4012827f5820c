-- Looking a thread's conversation up by its key must use a unique index on the whole key. On a new
-- database PostgreSQL plans that prepared lookup while the table is empty, where an index on
-- (platform, channel, created_at) costs the same as the key's own; it kept that plan (scanning the
-- channel's every thread: 0.9 ms a lookup at 5,000 threads in one channel, against 0.03 ms) until
-- autovacuum first analysed the table. With thread among the leading columns this index is the
-- cheaper one from the first lookup on.
CREATE UNIQUE INDEX conversations_thread ON conversations (platform, channel, thread, workspace);
