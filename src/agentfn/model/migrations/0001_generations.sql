-- The model function's record (RFC 0002: steps, tools and timings, never text) and its budgets. Only who, which agent, how much and how long:
-- never the messages, the arguments, the results or the answer.

-- One row per generation: a turn, a session's end (the episode's summary), or a tool called alone or over MCP.
CREATE TABLE generations (
    id           uuid        PRIMARY KEY,
    kind         text        NOT NULL CHECK (kind IN ('turn', 'session_end', 'tool_call')),
    channel      text        NOT NULL CHECK (channel IN ('agent', 'alone', 'mcp')),
    subject      text        NOT NULL,
    agent        text,
    tier         text,
    status       text        NOT NULL,  -- running, ok, error, deadline, budget, cancelled
    problem      integer,               -- the HTTP status of the problem that ended it, if one did
    tokens_in    integer     NOT NULL DEFAULT 0 CHECK (tokens_in >= 0),
    tokens_out   integer     NOT NULL DEFAULT 0 CHECK (tokens_out >= 0),
    rounds       integer     NOT NULL DEFAULT 0,
    steps        integer     NOT NULL DEFAULT 0,
    step_log     jsonb       NOT NULL DEFAULT '[]',  -- [{tool, status, ms}], in order
    reserved     integer     NOT NULL DEFAULT 0 CHECK (reserved >= 0),  -- tokens held for the round under way
    day          date        NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    hold_until   timestamptz NOT NULL,  -- a reservation of a process that died stops counting then
    duration_ms  integer
);
CREATE INDEX generations_held ON generations (subject, day) WHERE reserved > 0;
CREATE INDEX generations_by_subject ON generations (subject, started_at DESC);

-- Tokens spent per caller per UTC day. The row is locked while a round reserves, so concurrent turns
-- see each other's holds: none can spend past the limit by more than the estimate of one round.
CREATE TABLE token_budgets (
    subject  text   NOT NULL,
    day      date   NOT NULL,
    spent    bigint NOT NULL DEFAULT 0 CHECK (spent >= 0),
    PRIMARY KEY (subject, day)
);

-- Calls per caller per grant per UTC day, for a grant's dailyLimit; counted up in one statement.
CREATE TABLE grant_calls (
    subject    text    NOT NULL,
    grant_ref  text    NOT NULL,
    day        date    NOT NULL,
    calls      integer NOT NULL CHECK (calls >= 0),
    PRIMARY KEY (subject, grant_ref, day)
);
