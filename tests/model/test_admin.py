"""The admin doors of the model function: recent generations (hashed subject, never text) and the registry's rows,
for callers in an admin group (AGENTFN_ADMIN_GROUPS) only."""

from __future__ import annotations

import csv
import datetime
import io
import json
import secrets
import uuid

import psycopg
import pytest
import requests
from psycopg import sql
from support.model import Person, agentfn, registry_document, take_turn

from agentfn.devstack.harness.servers import Gunicorn
from agentfn.shared import db
from agentfn.shared.grants import records, rows

DOORS = ("/v1/admin/generations", "/v1/admin/grants", "/v1/admin/calls")


@pytest.fixture
def admin(issuer):
    return Person(issuer, groups=("platform-admins",))


def recent(base: str, who: Person, **params) -> requests.Response:
    return requests.get(base + "/v1/admin/generations", params=params, headers=who.headers, timeout=30)


def call_alone(model, who: Person) -> None:
    answer = requests.post(
        model.url + "/v1/tools/platform_status/call", json={"arguments": {}}, headers=who.headers, timeout=30
    )
    assert answer.status_code == 200, answer.text


def test_an_admin_sees_a_turn_as_counts_names_and_timings_with_the_subject_hashed(
    model, scripted_engine, issuer, person, admin
):
    said, argument, answered = (f"canary{secrets.token_hex(6)}" for _ in range(3))
    sid = scripted_engine.script(
        {"call": {"name": "platform_status", "arguments": {"service": argument}}}, {"text": f"The answer is {answered}."}
    )
    _, events = take_turn(model.url, person, "reviewer", f"Tell me about {said}. script:{sid}")
    done = events[-1][1]
    assert events[-1][0] == "done"

    answer = recent(model.url, admin, limit=200)
    assert answer.status_code == 200, answer.text
    found = answer.json()["generations"]
    [mine] = [g for g in found if g["id"] == done["generation_id"]]
    assert mine["subject_hash"] == issuer.subject_hash(person.subject)
    assert (mine["kind"], mine["channel"], mine["agent"], mine["tier"], mine["status"], mine["problem"]) == (
        "turn",
        "step",
        "reviewer",
        "fast",
        "ok",
        None,
    )
    assert (mine["tokens_in"], mine["tokens_out"]) == (done["usage"]["tokens_in"], done["usage"]["tokens_out"])
    assert mine["rounds"] == 2 and mine["steps"] == 1
    assert [(t["tool"], t["status"]) for t in mine["tools"]] == [("platform_status", "ok")] and mine["tools"][0]["ms"] > 0
    assert mine["duration_ms"] >= mine["tools"][0]["ms"]
    assert datetime.datetime.fromisoformat(mine["started_at"]) <= datetime.datetime.now(datetime.UTC)
    for secret in (said, argument, answered, person.subject, person.token):
        assert secret not in answer.text
    started = [g["started_at"] for g in found]
    assert started == sorted(started, reverse=True)  # newest first


def test_before_pages_back_through_the_generations(model, issuer, person, admin):
    for _ in range(4):
        call_alone(model, person)
    whole = recent(model.url, admin, limit=4).json()["generations"]
    first = recent(model.url, admin, limit=2).json()["generations"]
    second = recent(model.url, admin, limit=2, before=first[-1]["started_at"]).json()["generations"]
    assert [g["id"] for g in first + second] == [g["id"] for g in whole]
    assert all(g["started_at"] < first[-1]["started_at"] for g in second)
    hashed = issuer.subject_hash(person.subject)
    assert [(g["kind"], g["channel"], g["subject_hash"]) for g in whole] == [("tool_call", "alone", hashed)] * 4
    # A time long past: nothing before it; a time without an offset is read as UTC.
    assert recent(model.url, admin, before="2000-01-01T00:00:00Z").json()["generations"] == []
    naive = whole[1]["started_at"][:26]  # its own time, in UTC, without "+00:00"
    assert [g["id"] for g in recent(model.url, admin, limit=1, before=naive).json()["generations"]] == [whole[2]["id"]]


@pytest.mark.parametrize(
    ("params", "status", "detail"),
    [
        ({"limit": "1"}, 200, None),
        ({"limit": "200"}, 200, None),
        ({}, 200, None),
        ({"limit": "0"}, 400, "limit: must be an integer from 1 to 200"),
        ({"limit": "201"}, 400, "limit"),
        ({"limit": "-1"}, 400, "limit"),
        ({"limit": "ten"}, 400, "limit"),
        ({"limit": "1.5"}, 400, "limit"),
        ({"before": "yesterday"}, 400, "before: must be an ISO 8601 date-time"),
        ({"before": ""}, 400, "before"),
        ({"after": "2026-01-01T00:00:00Z"}, 400, "unknown query parameter after"),
    ],
)
def test_the_query_is_checked(model, person, admin, params, status, detail):
    call_alone(model, person)
    answer = recent(model.url, admin, **params)
    assert answer.status_code == status, answer.text
    if status == 200:
        assert 1 <= len(answer.json()["generations"]) <= int(params.get("limit", 50))
    else:
        assert answer.headers["Content-Type"] == "application/problem+json" and detail in answer.json()["detail"]


@pytest.mark.parametrize("path", DOORS)
def test_only_a_caller_in_an_admin_group_may_use_the_admin_doors(model, issuer, person, admin, path):
    nobody = requests.get(model.url + path, timeout=30)
    assert nobody.status_code == 401 and nobody.headers["Content-Type"] == "application/problem+json"
    refused = requests.get(model.url + path, headers=person.headers, timeout=30)
    assert refused.status_code == 403, refused.text
    assert refused.json()["title"] == "Forbidden" and "admin group" in refused.json()["detail"]
    almost = Person(issuer, groups=("platform-admin", "Platform-Admins", "developers"))
    assert requests.get(model.url + path, headers=almost.headers, timeout=30).status_code == 403
    assert requests.get(model.url + path, headers=admin.headers, timeout=30).status_code == 200


def test_the_grants_are_the_rows_agentfn_audit_prints(model, admin, registry_file):
    answer = requests.get(model.url + "/v1/admin/grants", headers=admin.headers, timeout=30)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["rows"] == records(rows(registry_document()))
    assert body["revision"] == registry_document()["revision"]
    printed = agentfn("audit", str(registry_file), "--json")
    assert printed.returncode == 0 and json.loads(printed.stdout) == body["rows"]
    assert {
        "agent": "reviewer",
        "tool": "run_code",
        "subjects": "-",
        "groups": "developers",
        "channel": "step",
        "daily": "-",
        "approval": "waived",
        "grant": "agentfn/test",
    } in body["rows"]


@pytest.mark.parametrize(
    ("setting", "answers"),
    [
        (" auditors , sre-leads ", {("auditors",): 200, ("developers", "sre-leads"): 200, ("platform-admins",): 403}),
        ("", {("platform-admins",): 403, ("developers",): 403}),  # empty: no one
    ],
    ids=["two_groups", "empty"],
)
def test_the_admin_groups_are_a_setting(model_env, model_logs, issuer, setting, answers):
    server = Gunicorn(
        "agentfn.model.app:create_app()", {**model_env, "AGENTFN_ADMIN_GROUPS": setting}, model_logs / "model-admins.log"
    )
    server.start()
    try:
        for groups, status in answers.items():
            who = Person(issuer, groups=groups)
            assert requests.get(server.url + "/v1/admin/grants", headers=who.headers, timeout=30).status_code == status
    finally:
        server.stop()


def calls(base: str, who: Person, **params) -> requests.Response:
    return requests.get(base + "/v1/admin/calls", params=params, headers=who.headers, timeout=30)


@pytest.fixture
def audited(model, scripted_engine, upstreams, person, admin):
    """A turn whose round calls platform_status (ok) and list_models (its platform service fails), then a call alone."""
    since = datetime.datetime.now(datetime.UTC).isoformat()
    said, argument, answered = (f"canary{secrets.token_hex(6)}" for _ in range(3))
    sid = scripted_engine.script(
        {
            "calls": [
                {"name": "platform_status", "arguments": {"service": argument}},
                {"name": "list_models", "arguments": {"embeds": True}},
            ]
        },
        {"text": f"The answer is {answered}."},
    )
    upstreams["list_models"].app.extensions["agentfn.dev_upstream"].fail_status = 503
    _, events = take_turn(model.url, person, "reviewer", f"Tell me about {said}. script:{sid}")
    upstreams["list_models"].app.extensions["agentfn.dev_upstream"].fail_status = 0
    assert events[-1][0] == "done", events
    call_alone(model, person)
    return {"since": since, "canaries": (said, argument, answered), "generation": events[-1][1]["generation_id"]}


def test_an_admin_lists_each_call_with_its_channel_outcome_and_grant_and_no_content(model, issuer, person, admin, audited):
    answer = calls(model.url, admin, since=audited["since"])
    assert answer.status_code == 200, answer.text
    found = answer.json()["calls"]
    hashed = issuer.subject_hash(person.subject)
    assert [(c["subject_hash"], c["agent"], c["tool"], c["channel"], c["outcome"], c["grant"]) for c in found] == [
        (hashed, None, "platform_status", "alone", "ok", "agentfn/test"),
        (hashed, "reviewer", "list_models", "step", "error", "agentfn/test"),
        (hashed, "reviewer", "platform_status", "step", "ok", "agentfn/test"),
    ]
    assert [c["n"] for c in found[1:]] == [2, 1] and {c["generation_id"] for c in found[1:]} == {audited["generation"]}
    assert all(c["ms"] > 0 for c in found) and answer.json()["next"] is None
    assert set(found[0]) == {
        "at",
        "generation_id",
        "n",
        "subject_hash",
        "agent",
        "tool",
        "channel",
        "outcome",
        "ms",
        "grant",
    }
    for secret in (*audited["canaries"], person.subject, person.token):
        assert secret not in answer.text


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"channel": "alone"}, [("platform_status", "alone", "ok")]),
        ({"channel": "step"}, [("list_models", "step", "error"), ("platform_status", "step", "ok")]),
        ({"tool": "list_models"}, [("list_models", "step", "error")]),
        ({"outcome": "ok", "agent": "reviewer"}, [("platform_status", "step", "ok")]),
        ({"agent": "keeper"}, []),
        ({"before": "2000-01-01T00:00:00Z"}, []),
    ],
)
def test_the_calls_filter_by_agent_tool_channel_outcome_and_time(model, admin, audited, params, expected):
    answer = calls(model.url, admin, since=audited["since"], **params)
    assert answer.status_code == 200, answer.text
    assert [(c["tool"], c["channel"], c["outcome"]) for c in answer.json()["calls"]] == expected


def test_the_calls_page_with_the_next_cursor(model, admin, audited):
    whole = calls(model.url, admin, since=audited["since"]).json()["calls"]
    seen, cursor = [], None
    while True:
        page = calls(model.url, admin, since=audited["since"], limit=1, **({"cursor": cursor} if cursor else {})).json()
        seen += page["calls"]
        cursor = page["next"]
        if cursor is None:
            break
    assert seen == whole and len(whole) == 3


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        ({"channel": "agent"}, "channel: must be one of step, alone, mcp"),
        ({"cursor": "nonsense"}, "cursor"),
        ({"since": "today"}, "since: must be an ISO 8601 date-time"),
        ({"limit": "0"}, "limit"),
        ({"subject": "x"}, "unknown query parameter subject"),
        ({"agent": "\x00"}, "agent: at most 200 characters, and no NUL"),
        ({"tool": "t" * 201}, "tool: at most 200 characters, and no NUL"),
    ],
)
def test_the_calls_query_is_checked(model, admin, params, detail):
    answer = calls(model.url, admin, **params)
    assert answer.status_code == 400 and answer.headers["Content-Type"] == "application/problem+json"
    assert detail in answer.json()["detail"]


def test_agentfn_audit_calls_prints_a_table_json_lines_and_csv_through_the_gateway(gateway, person, admin, audited):
    def run(*extra):
        done = agentfn("audit", "calls", "--since", audited["since"], *extra, url=gateway.url, token=admin.token)
        assert done.returncode == 0, done.stderr
        return done.stdout

    lines = [json.loads(line) for line in run("--json").splitlines()]
    assert [(c["tool"], c["channel"], c["outcome"]) for c in lines] == [
        ("platform_status", "alone", "ok"),
        ("list_models", "step", "error"),
        ("platform_status", "step", "ok"),
    ]
    rows = list(csv.DictReader(io.StringIO(run("--csv", "--channel", "step"))))
    assert [(r["tool"], r["outcome"], r["grant"]) for r in rows] == [
        ("list_models", "error", "agentfn/test"),
        ("platform_status", "ok", "agentfn/test"),
    ]
    table = run("--limit", "2")
    assert "list_models" in table and "alone" in table and table.count("platform_status") == 1
    refused = agentfn("audit", "calls", url=gateway.url, token=person.token)
    assert refused.returncode != 0 and "admin group" in refused.stderr


def test_an_open_page_call_shows_the_page_fetchers_audit_of_it_by_host_and_never_the_path(
    model, gateway, scripted_engine, person, admin
):
    since = datetime.datetime.now(datetime.UTC).isoformat()
    url = f"http://127.0.0.1/pathcanary{secrets.token_hex(4)}?q=querycanary"
    sid = scripted_engine.script(
        {
            "calls": [
                {"name": "open_page", "arguments": {"url": url}},
                {"name": "open_page", "arguments": {"url": "http://127.0.0.2/never-offered"}},
            ]
        },
        {"text": "Neither opened."},
    )
    _, events = take_turn(model.url, person, "reviewer", f"Open {url} please. script:{sid}")
    assert events[-1][0] == "done", events
    answer = calls(model.url, admin, since=since, tool="open_page")
    assert answer.status_code == 200, answer.text
    found = sorted(answer.json()["calls"], key=lambda c: c["n"])
    # Step 1 reached the fetcher, whose guard refused the loopback address; step 2 was refused by the model
    # function's own rule (a URL the person never wrote), so the fetcher has nothing of it.
    assert [(c["n"], c["outcome"], c["page_audit"]) for c in found] == [(1, "error", "found"), (2, "error", "none")]
    assert found[0]["page"] == {
        "host": "127.0.0.1",
        "final_host": None,
        "status": None,
        "bytes": 0,
        "outcome": "blocked-address",
    }
    assert found[1]["page"] is None
    for secret in ("pathcanary", "querycanary", "never-offered", person.subject):
        assert secret not in answer.text
    printed = agentfn("audit", "calls", "--since", since, "--tool", "open_page", "--csv", url=gateway.url, token=admin.token)
    assert printed.returncode == 0, printed.stderr
    rows = sorted(csv.DictReader(io.StringIO(printed.stdout)), key=lambda r: int(r["n"]))
    assert [r["page"] for r in rows] == ["127.0.0.1 0 B blocked-address", "none"]


@pytest.fixture
def recorded_before_one_channel_name(postgres):
    """A database at the record's third migration, holding a turn recorded when the step channel was named `agent`."""
    name = "model_upgrade"
    with psycopg.connect(postgres.admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    db.provision(
        postgres.admin_dsn.rsplit("/", 1)[0] + f"/{name}", schema="model", role="agentfn_model_up", password="up-pw"
    )
    dsn = postgres.dsn("agentfn_model_up", "up-pw").rsplit("/", 1)[0] + f"/{name}"
    turn = uuid.uuid4()
    with psycopg.connect(dsn, options="-c search_path=model") as conn:
        conn.execute("CREATE TABLE schema_migrations (version int PRIMARY KEY, name text NOT NULL, applied_at timestamptz)")
        for version, file, text in db.migrations("agentfn.model"):
            if version <= 3:
                conn.execute(text)
                conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, file))
        conn.execute(
            "INSERT INTO generations (id, kind, channel, subject, agent, tier, status, day, hold_until, duration_ms) "
            "VALUES (%s, 'turn', 'agent', 'someone', 'reviewer', 'fast', 'ok', current_date, now(), 12)",
            (turn,),
        )
    yield dsn, turn
    with psycopg.connect(postgres.admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_a_turn_recorded_before_the_channel_had_one_name_reads_as_step(
    recorded_before_one_channel_name, model_env, admin, tmp_path
):
    dsn, turn = recorded_before_one_channel_name
    upgraded = Gunicorn("agentfn.model.app:create_app()", {**model_env, "AGENTFN_DATABASE_URL": dsn}, tmp_path / "model.log")
    upgraded.start()
    try:
        answer = recent(upgraded.url, admin)
        assert answer.status_code == 200, answer.text
        [old] = [g for g in answer.json()["generations"] if g["id"] == str(turn)]
        assert (old["kind"], old["channel"], old["agent"]) == ("turn", "step", "reviewer")
        calls = requests.get(upgraded.url + "/v1/admin/calls", params={"channel": "step"}, headers=admin.headers, timeout=30)
        assert calls.status_code == 200, calls.text
    finally:
        upgraded.stop()
