-- Runs per caller per day (UTC). One row per subject and day, counted up in one statement, so two
-- concurrent runs can never both take the last one. Only counts: never the program or its output.
CREATE TABLE daily_runs (
    subject  text    NOT NULL,
    day      date    NOT NULL,
    runs     integer NOT NULL CHECK (runs >= 0),
    PRIMARY KEY (subject, day)
);
