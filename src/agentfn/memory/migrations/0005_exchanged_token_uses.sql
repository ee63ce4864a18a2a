-- A token the model function exchanged for memory keeps one note and forgets one entry: each use is claimed here,
-- by the token's `jti`, in the transaction of the write or the forgetting it allows, so the rule holds across
-- processes and replicas. A row lives until its token could no longer be taken (its `exp` and the clock skew
-- allowed), and is deleted by a later claim. It names no subject: a `jti` is all it holds.
CREATE TABLE token_uses (
    jti         text NOT NULL,
    use         text NOT NULL CHECK (use IN ('write', 'forget')),
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (jti, use)
);

CREATE INDEX token_uses_expiry ON token_uses (expires_at);
