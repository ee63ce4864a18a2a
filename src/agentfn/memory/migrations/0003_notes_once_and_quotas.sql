-- A note is kept once per subject. Its key folds what a reader would not tell apart: compatibility forms
-- (NFKC: full-width letters, ligatures, non-breaking spaces), case, runs of whitespace, and the sentence's
-- closing punctuation ("Answer in Croatian." = "answer in croatian"). Episodes are summaries of sessions and
-- are not compared. The key's digest is a stored column (a key may outgrow a btree tuple, and under
-- row-level security only a plain column can be an index condition); a lookup checks the key itself too.
-- Not a unique index: rows kept before this rule may repeat one another, and a migration does not delete
-- a person's notes. Writes are serialised per subject by the quota row below instead.
CREATE FUNCTION note_key(text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN regexp_replace(btrim(regexp_replace(lower(normalize($1, NFKC)), '\s+', ' ', 'g')), '[\s.!?,;:。]+$', '');

ALTER TABLE entries ADD COLUMN note_digest text GENERATED ALWAYS AS (md5(note_key(text))) STORED;
CREATE INDEX entries_notes ON entries (subject, note_digest) WHERE kind <> 'episode';

-- One row per subject that has written: its write-rate bucket (refilled evenly up to the per-minute rate).
-- Every write locks it first, so a subject's writes are serialised across processes: the entry cap, the
-- rate and the duplicate check are exact under concurrency. Recall never reads it.
CREATE TABLE quotas (
    subject       text PRIMARY KEY,
    tokens        double precision NOT NULL,
    refreshed_at  timestamptz NOT NULL
);

ALTER TABLE quotas ENABLE ROW LEVEL SECURITY;
ALTER TABLE quotas FORCE ROW LEVEL SECURITY;
CREATE POLICY quotas_of_subject ON quotas
    USING (subject = current_setting('agentfn.subject', true))
    WITH CHECK (subject = current_setting('agentfn.subject', true));
