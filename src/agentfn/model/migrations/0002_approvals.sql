-- Approval tokens already used: a token is good once. Inserted before anything of the turn runs, in one
-- transaction for all the tokens of a request (the primary key makes concurrent uses of one token race
-- to a single winner). A row is kept until its token has expired anyway, then may be pruned.
CREATE TABLE approvals_used (
    jti         uuid        PRIMARY KEY,
    subject     text        NOT NULL,
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX approvals_used_expiry ON approvals_used (expires_at);
