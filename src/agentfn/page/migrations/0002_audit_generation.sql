-- Which generation of the model function, and which step of it, a fetch was, so an admin's audit of tool calls can show the
-- host and size of each open_page call beside it. Null for a fetch that named none.
ALTER TABLE audit ADD COLUMN generation_id uuid, ADD COLUMN step integer;
CREATE INDEX audit_by_generation ON audit (generation_id) WHERE generation_id IS NOT NULL;
