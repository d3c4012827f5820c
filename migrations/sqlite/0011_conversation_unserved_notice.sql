-- Issue 17: a thread whose project is no longer configured (and whose channel serves no project) is
-- told so once. The project it was told about is kept here, so a restart does not tell it again; a
-- thread told about one project is told again if it later belongs to another that goes too.
ALTER TABLE conversations ADD COLUMN unserved_told TEXT;
