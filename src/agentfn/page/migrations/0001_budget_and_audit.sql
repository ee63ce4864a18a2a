-- Pages per caller per day (UTC). One row per subject and day, counted up atomically by one statement.
CREATE TABLE budget (
    subject  text NOT NULL,
    day      date NOT NULL,
    pages    integer NOT NULL CHECK (pages >= 0),
    PRIMARY KEY (subject, day)
);

-- One row per fetch attempt: who, which host, how it ended. Never the path, the query or the text.
CREATE TABLE audit (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    subject     text NOT NULL,
    host        text NOT NULL,
    final_host  text,
    status      integer,
    bytes       bigint NOT NULL DEFAULT 0,
    ms          integer NOT NULL,
    redirects   integer NOT NULL DEFAULT 0,
    outcome     text NOT NULL
);
CREATE INDEX audit_by_subject ON audit (subject, at);
CREATE INDEX audit_by_host ON audit (host, at);
