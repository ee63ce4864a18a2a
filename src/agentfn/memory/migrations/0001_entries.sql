-- Entries: one row per fact, preference or episode, beside its vector. Forgetting deletes the row.
CREATE TABLE entries (
    id          uuid PRIMARY KEY,
    subject     text NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('fact', 'preference', 'episode')),
    text        text NOT NULL,
    source      text NOT NULL,
    session_id  text,
    model       text NOT NULL,
    -- halfvec: half the space, and small enough for 1024 dimensions to fit the covering index below.
    embedding   halfvec NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Recall is exact per subject: this covering index keeps a subject's vectors together, so a recall
-- reads a few index pages (an index-only scan) instead of one heap page per entry.
CREATE INDEX entries_recall ON entries (subject, model) INCLUDE (id, kind, embedding);
CREATE INDEX entries_listing ON entries (subject, created_at DESC, id);

-- The second wall: even a statement that forgets its subject filter sees only the subject of the
-- transaction (set with set_config('agentfn.subject', ..., true)). FORCE applies it to the owner too.
ALTER TABLE entries ENABLE ROW LEVEL SECURITY;
ALTER TABLE entries FORCE ROW LEVEL SECURITY;
CREATE POLICY entries_of_subject ON entries
    USING (subject = current_setting('agentfn.subject', true))
    WITH CHECK (subject = current_setting('agentfn.subject', true));

-- Forgotten rows leave dead tuples until vacuum; vacuum this table eagerly.
ALTER TABLE entries SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 20);
