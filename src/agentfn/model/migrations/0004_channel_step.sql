-- One name per channel: a tool call inside an agent's loop is the `step` channel, as the CRDs and the registry
-- name it (the record said `agent`). Old rows are renamed in place, so they read as new ones do.
ALTER TABLE generations DROP CONSTRAINT generations_channel_check;
UPDATE generations SET channel = 'step' WHERE channel = 'agent';
ALTER TABLE generations ADD CONSTRAINT generations_channel_check CHECK (channel IN ('step', 'alone', 'mcp'));
