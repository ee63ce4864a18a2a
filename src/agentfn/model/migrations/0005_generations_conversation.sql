-- Which conversation a turn belonged to, as a keyed digest of its agent and first message (never its text), so that
-- ending a session can read what its turns did (the tools' names and outcomes) from the record.
ALTER TABLE generations ADD COLUMN IF NOT EXISTS conversation text;
CREATE INDEX IF NOT EXISTS generations_conversation ON generations (subject, agent, conversation, started_at)
    WHERE conversation IS NOT NULL;
