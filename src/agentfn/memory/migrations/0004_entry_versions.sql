-- A subject's version: one more with every statement that changes its entries, in that statement's own
-- transaction. A memory process keeps a subject's vectors between recalls (vectors.py) and reads the version
-- in each recall's snapshot: the vectors it holds serve only while no write, correction or forgetting has come
-- since, from any process or replica.
CREATE TABLE versions (
    subject     text PRIMARY KEY,
    version     bigint NOT NULL
);

ALTER TABLE versions ENABLE ROW LEVEL SECURITY;
ALTER TABLE versions FORCE ROW LEVEL SECURITY;
CREATE POLICY versions_of_subject ON versions
    USING (subject = current_setting('agentfn.subject', true))
    WITH CHECK (subject = current_setting('agentfn.subject', true));

-- Once per statement, for each subject whose entries it changed. search_path is fixed here, so a statement
-- run with another (an admin's) still finds this schema's table.
CREATE FUNCTION next_version() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
BEGIN
    INSERT INTO versions AS g (subject, version)
    SELECT DISTINCT subject, 1 FROM changed
    ON CONFLICT (subject) DO UPDATE SET version = g.version + 1;
    RETURN NULL;
END
$$;

-- A trigger with a transition table has one event each.
CREATE TRIGGER entries_inserted AFTER INSERT ON entries
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION next_version();
CREATE TRIGGER entries_updated AFTER UPDATE ON entries
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION next_version();
CREATE TRIGGER entries_deleted AFTER DELETE ON entries
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION next_version();
