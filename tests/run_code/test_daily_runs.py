"""Daily runs: counted atomically per caller in run_code's own schema; spent means 429 with the reset time."""

import datetime as dt
import secrets
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
import requests
from support.tools import RUN_LIMITS, call

DAILY = int(RUN_LIMITS["AGENTFN_RUN_CODE_DAILY_RUNS"])


def next_midnight_utc() -> str:
    tomorrow = dt.datetime.now(dt.UTC).date() + dt.timedelta(days=1)
    return f"{tomorrow.isoformat()}T00:00:00Z"


def test_concurrent_calls_never_exceed_the_daily_runs(run_code, issuer):
    headers = issuer.tool_headers("run_code", f"hasty-{secrets.token_hex(4)}")
    with ThreadPoolExecutor(12) as pool:
        responses = list(pool.map(lambda _: call(run_code.url, headers, {"code": "print('one')"}), range(3 * DAILY)))
    ok = [r for r in responses if r.status_code == 200]
    spent = [r for r in responses if r.status_code == 429]
    assert len(ok) == DAILY and len(spent) == 2 * DAILY, [r.status_code for r in responses]
    assert sorted(r.json()["content"]["runs_left"] for r in ok) == list(range(DAILY))
    assert all(r.json()["content"]["stdout"] == "one\n" for r in ok)


def test_spent_runs_are_a_429_that_says_when_they_reset(run_code, issuer):
    headers = issuer.tool_headers("run_code", f"thrifty-{secrets.token_hex(4)}")
    for left in reversed(range(DAILY)):
        assert call(run_code.url, headers, {"code": "pass"}).json()["content"]["runs_left"] == left
    response = call(run_code.url, headers, {"code": "print('one more')"})
    assert response.status_code == 429
    assert response.headers["Content-Type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"].endswith("/daily-runs-spent") and problem["limit"] == DAILY
    assert problem["resets_at"] == next_midnight_utc() and problem["resets_at"] in problem["detail"]
    assert 0 < int(response.headers["Retry-After"]) <= 86400
    assert "one more" not in response.text


def test_callers_have_runs_of_their_own(run_code, issuer):
    spender, other = (issuer.tool_headers("run_code", f"{who}-{secrets.token_hex(4)}") for who in ("spender", "other"))
    for _ in range(DAILY):
        call(run_code.url, spender, {"code": "pass"})
    assert call(run_code.url, spender, {"code": "pass"}).status_code == 429
    assert call(run_code.url, other, {"code": "pass"}).json()["content"]["runs_left"] == DAILY - 1


def test_the_counts_live_in_run_codes_own_schema_and_role(run_code, run_code_env, postgres):
    # run_code made its schema at its start (its migrations): the test reads what the running function made.
    dsn = run_code_env["AGENTFN_DATABASE_URL"]
    with psycopg.connect(dsn) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_schema = 'run_code' ORDER BY table_name"
        ).fetchall()
        assert ("run_code", "daily_runs") in tables
        assert conn.execute("SELECT current_user").fetchone()[0] == "agentfn_run_code"
        columns = {
            r[0]
            for r in conn.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = 'run_code' AND table_name = 'daily_runs'"
            )
        }
        assert columns == {"subject", "day", "runs"}  # counts only: never a program or its output
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("CREATE TABLE public.intruder (x int)")


def test_a_sandbox_that_cannot_start_is_not_ready_and_costs_no_run(run_code_env, issuer):
    import time

    from agentfn.devstack.harness.servers import Served
    from agentfn.run_code.app import create_app

    served = Served(create_app({**run_code_env, "AGENTFN_RUN_CODE_PYTHON": "/nonexistent/python3"}))
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            ready = requests.get(served.url + "/readyz", timeout=5)
            if ready.status_code == 503:
                break
            time.sleep(0.05)
        assert ready.status_code == 503 and ready.json()["checks"] == {"database": True, "sandbox": False}
        subject = f"unlucky-{secrets.token_hex(4)}"
        response = call(served.url, issuer.tool_headers("run_code", subject), {"code": "print(1)"})
        assert response.status_code == 503 and "sandbox could not start" in response.json()["detail"]
        with psycopg.connect(run_code_env["AGENTFN_DATABASE_URL"]) as conn:
            runs = conn.execute("SELECT runs FROM run_code.daily_runs WHERE subject = %s", (subject,)).fetchone()
        assert runs == (0,)  # taken, then given back
    finally:
        served.stop()
