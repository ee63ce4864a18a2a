"""The record (L4): one generation row per turn with counts, names and timings; never what was said.

A turn and a session end carry canaries in the person's message, the tool's arguments, the tool's
result and the answer; afterwards every table of the database and every log of the parts is scanned.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time

import psycopg
import requests
from psycopg import sql
from support.model import take_turn


def test_the_record_keeps_counts_and_never_the_conversation(
    model, scripted_engine, memory, person, postgres, model_logs, model_env
):
    said, argument, answered = (f"canary{secrets.token_hex(6)}" for _ in range(3))
    sid = scripted_engine.script(
        {"call": {"name": "platform_status", "arguments": {"service": argument}}},
        {"call": {"name": "list_models", "arguments": {}}},
        {"text": f"The answer is {answered}."},
    )
    sid_of_turn = sid
    _, events = take_turn(model.url, person, "reviewer", f"Tell me about {said}. script:{sid}")
    assert events[-1][0] == "done"
    assert argument in str(events)  # the caller sees the step's arguments and result ("No service named ...")
    generation = events[-1][1]["generation_id"]
    sid = scripted_engine.script({"text": "The person asked about a service and settled nothing."})
    ended = requests.post(
        f"{model.url}/v1/agents/reviewer/sessions/end",
        headers=person.headers,
        timeout=30,
        json={"messages": [{"role": "user", "content": f"About {said}, script:{sid}"}]},
    )
    assert ended.status_code == 201

    with psycopg.connect(model_env["AGENTFN_DATABASE_URL"], options="-c search_path=model") as conn:
        conn.row_factory = psycopg.rows.dict_row
        row = conn.execute("SELECT * FROM generations WHERE id = %s", (generation,)).fetchone()
    assert set(row) == {
        "id",
        "kind",
        "channel",
        "subject",
        "agent",
        "tier",
        "status",
        "problem",
        "tokens_in",
        "tokens_out",
        "rounds",
        "steps",
        "step_log",
        "reserved",
        "day",
        "started_at",
        "hold_until",
        "duration_ms",
        "conversation",
    }
    # The conversation a turn belonged to is named by a keyed digest: neither the message nor its plain hash.
    first = f"Tell me about {said}. script:{sid_of_turn}"
    assert len(row["conversation"]) == 32 and row["conversation"] != hashlib.sha256(first.encode()).hexdigest()[:32]
    assert (row["kind"], row["channel"], row["subject"], row["agent"], row["tier"], row["status"]) == (
        "turn",
        "step",
        person.subject,
        "reviewer",
        "fast",
        "ok",
    )
    assert row["steps"] == 2 and row["rounds"] == 3 and row["tokens_in"] > 0 and row["tokens_out"] > 0
    assert [(s["tool"], s["status"]) for s in row["step_log"]] == [("platform_status", "ok"), ("list_models", "ok")]
    assert row["duration_ms"] >= sum(s["ms"] for s in row["step_log"]) * 0.9

    time.sleep(0.5)  # the last log lines are flushed
    secrets_ = [said, argument, answered, person.token]
    for table, text in every_table(postgres.admin_dsn):
        for secret in secrets_:
            assert secret not in text, f"{table} holds the turn's text"
    for path in [*model_logs.iterdir(), memory.log]:
        text = path.read_text(errors="replace")
        for secret in secrets_:
            assert secret not in text, f"{path.name} holds the turn's text"


def every_table(dsn):
    with psycopg.connect(dsn) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables WHERE table_type = "
            "'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
        assert ("model", "generations") in tables and ("memory", "entries") in tables
        for schema, name in tables:
            query = sql.SQL("SELECT coalesce(string_agg(t::text, E'\\n'), '') FROM {}.{} t").format(
                sql.Identifier(schema), sql.Identifier(name)
            )
            yield f"{schema}.{name}", conn.execute(query).fetchone()[0]


def test_a_turns_log_line_says_where_its_time_went_and_nothing_it_said(model, scripted_engine, person, model_logs):
    said = f"canary{secrets.token_hex(6)}"
    sid = scripted_engine.script({"call": {"name": "platform_status", "arguments": {}}}, {"text": "All is well."})
    _, events = take_turn(model.url, person, "reviewer", f"How is {said}? script:{sid}")
    done = events[-1][1]
    time.sleep(0.5)  # the last log lines are flushed
    lines = [json.loads(line) for line in (model_logs / "model.log").read_text().splitlines() if line.startswith("{")]
    [turn] = [line for line in lines if line.get("msg") == "turn" and line.get("generation_id") == done["generation_id"]]
    assert set(turn["timing"]) == {"ms", "engine_ms", "tools_ms"}
    assert (turn["timing"]["engine_ms"], turn["timing"]["tools_ms"]) == (
        done["timing"]["engine_ms"],
        done["timing"]["tools_ms"],
    )
    assert turn["timing"]["ms"] >= done["timing"]["ms"] and said not in json.dumps(turn)
