-- The admin door lists the newest generations of every caller, a page before a given time: read in this order.
CREATE INDEX generations_recent ON generations (started_at DESC, id DESC);
