-- The same index as PostgreSQL's (which needs it to look a thread up by its whole key from the first
-- lookup of a new database on); kept on both backends so their schemas stay alike.
CREATE UNIQUE INDEX conversations_thread ON conversations (platform, channel, thread, workspace);
