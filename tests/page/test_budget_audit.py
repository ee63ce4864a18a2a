"""The page budget (atomic, per caller per UTC day) and the audit (host and size, never path or text)."""

import datetime as dt
import secrets
import signal
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
import requests
from support.page import Opener, PageFunction, page_env, settle_audit

from agentfn.shared.contract import audience

PUB = "http://www.pub.test"
SECRET_WORD = "marmalade-velvet"  # in the article's text (public_web.py)


def call(base, issuer, page_subject, url, **body):
    """One call of a page fetcher's door as `subject`."""
    token = issuer.exchanged(audience("page"), page_subject)
    return requests.post(
        base + "/v1/open", json={"url": url, **body}, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )


def test_the_budget_is_atomic_under_concurrent_calls(tight_page, issuer, page_dsn, page_subject):
    urls = [f"{PUB}/article?n={i}" for i in range(12)]
    with ThreadPoolExecutor(12) as pool:
        responses = list(pool.map(lambda u: call(tight_page.url, issuer, page_subject, u), urls))
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * 4 + [429] * 8
    spent = next(r for r in responses if r.status_code == 429)
    problem = spent.json()
    tomorrow = dt.datetime.now(dt.UTC).date() + dt.timedelta(days=1)
    assert problem["type"] == "https://agentfn.dev/problems/budget-spent"
    assert problem["reset_at"] == f"{tomorrow.isoformat()}T00:00:00Z" and problem["limit"] == 4
    assert 0 < int(spent.headers["Retry-After"]) <= 86400
    with psycopg.connect(page_dsn) as conn:
        (pages,) = conn.execute("SELECT pages FROM page.budget WHERE subject = %s", (page_subject,)).fetchone()
    assert pages == 4


def test_a_spent_budget_still_pages_through_what_was_opened(tight_page, issuer, page_subject):
    opened = call(tight_page.url, issuer, page_subject, f"{PUB}/long", window=500).json()
    for i in range(3):
        assert call(tight_page.url, issuer, page_subject, f"{PUB}/article?more={i}").status_code == 200
    assert call(tight_page.url, issuer, page_subject, f"{PUB}/article?one-too-many").status_code == 429
    more = call(tight_page.url, issuer, page_subject, f"{PUB}/long", offset=opened["next_offset"], window=500)
    assert more.status_code == 200 and more.json()["offset"] == opened["next_offset"]


def test_the_cache_is_short_lived(tight_page, issuer, lab, page_subject):
    url = f"{PUB}/long?short-lived"
    call(tight_page.url, issuer, page_subject, url)
    call(tight_page.url, issuer, page_subject, url, offset=100)
    time.sleep(4.5)  # the tight instance keeps pages 4 s
    call(tight_page.url, issuer, page_subject, url, offset=200)
    assert len([h for h in lab.public_hits() if h["path"] == "/long?short-lived"]) == 2


def test_budgets_are_per_caller(tight_page, issuer, page_subject):
    for i in range(4):
        assert call(tight_page.url, issuer, page_subject, f"{PUB}/article?per-caller={i}").status_code == 200
    assert call(tight_page.url, issuer, page_subject, f"{PUB}/article?per-caller=x").status_code == 429
    assert call(tight_page.url, issuer, f"other-{secrets.token_hex(4)}", f"{PUB}/article?per-caller=x").status_code == 200


def test_the_audit_records_host_status_bytes_never_path_query_or_text(lab_fetcher, opener, issuer, page_dsn, page_subject):
    assert opener(f"{PUB}/go/article?token=hunter2-q", subject=page_subject).status_code == 200
    assert opener("http://127.0.0.1/private-path?token=hunter2-q", subject=page_subject).status_code == 403
    assert opener(f"{PUB}/bomb/gzip?token=hunter2-q", subject=page_subject).status_code == 422
    settle_audit(lab_fetcher.url, issuer)
    with psycopg.connect(page_dsn) as conn:
        rows = conn.execute(
            "SELECT host, final_host, status, bytes, ms, redirects, outcome, audit::text AS whole "
            "FROM page.audit WHERE subject = %s ORDER BY id",
            (page_subject,),
        ).fetchall()
    assert [(r[0], r[1], r[2], r[5], r[6]) for r in rows] == [
        ("www.pub.test", "www.pub.test", 200, 1, "ok"),
        ("127.0.0.1", None, None, 0, "blocked-address"),
        ("www.pub.test", None, 200, 0, "too-large"),
    ]
    assert rows[0][3] > 1000 and rows[2][3] > 1 << 20 and all(r[4] >= 0 for r in rows)
    for row in rows:
        assert "hunter2" not in row[7] and "/article" not in row[7] and "private-path" not in row[7]
        assert SECRET_WORD not in row[7]


def test_the_logs_hold_no_path_query_token_or_text(opener, lab_fetcher, page_subject):
    token_marker = "hunter3-log"
    assert opener(f"{PUB}/deep/dir/article?token={token_marker}", subject=page_subject).status_code == 200
    assert opener(f"http://10.0.0.5/internal-path?{token_marker}", subject=page_subject).status_code == 403
    log = lab_fetcher.log.read_text()
    assert '"msg": "page fetch ok"' in log and '"msg": "page fetch blocked-address"' in log
    for secret in (token_marker, "/deep/dir", "internal-path", SECRET_WORD, page_subject, "Bearer", "10.0.0.5"):
        assert secret not in log, secret


def test_the_page_role_reaches_only_its_own_schema(postgres, page_dsn):
    other = postgres.provision("pagetest_other", "agentfn_pagetest_other")
    with psycopg.connect(other, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS pagetest_other.secrets (x text)")
    with psycopg.connect(page_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone() == (False,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT * FROM pagetest_other.secrets")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("CREATE TABLE public.mine (x int)")


def audit_of(base, issuer, generations, groups=("platform-admins",), page_subject="page-admin"):
    token = issuer.exchanged(audience("page"), page_subject, list(groups))
    return requests.get(
        base + "/v1/audit",
        params=[("generation_id", g) for g in generations],
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def test_an_admin_reads_the_fetches_of_a_generation_by_step_and_never_a_path(lab_fetcher, opener, issuer, page_subject):
    generation, other = str(uuid.uuid4()), str(uuid.uuid4())
    assert (
        opener(
            f"{PUB}/go/article?token=hunter2-q", subject=page_subject, step={"generation_id": generation, "n": 2}
        ).status_code
        == 200
    )
    assert (
        opener("http://127.0.0.1/private-path", subject=page_subject, step={"generation_id": generation, "n": 3}).status_code
        == 403
    )
    assert opener(f"{PUB}/go/article", subject=page_subject, step={"generation_id": other, "n": 1}).status_code == 200
    answer = audit_of(lab_fetcher.url, issuer, [generation])
    assert answer.status_code == 200, answer.text
    found = answer.json()["fetches"]
    assert [(f["generation_id"], f["n"], f["host"], f["status"], f["outcome"]) for f in found] == [
        (generation, 2, "www.pub.test", 200, "ok"),
        (generation, 3, "127.0.0.1", None, "blocked-address"),
    ]
    assert found[0]["bytes"] > 1000
    for secret in ("hunter2", "/article", "private-path", SECRET_WORD, page_subject):
        assert secret not in answer.text


@pytest.mark.parametrize(
    ("groups", "params", "status"),
    [
        (("platform-users",), [("generation_id", "00000000-0000-0000-0000-000000000000")], 403),
        (("platform-admin",), [("generation_id", "00000000-0000-0000-0000-000000000000")], 403),
        (("platform-admins",), [], 400),
        (("platform-admins",), [("generation_id", "not-a-uuid")], 400),
        (("platform-admins",), [("generation_id", "00000000-0000-0000-0000-000000000000"), ("subject", "x")], 400),
        (("platform-admins",), [("generation_id", "00000000-0000-0000-0000-000000000000")] * 65, 400),
    ],
)
def test_the_fetch_audit_is_for_admins_and_checks_its_query(lab_fetcher, issuer, groups, params, status):
    token = issuer.exchanged(audience("page"), "page-someone", list(groups))
    answer = requests.get(
        lab_fetcher.url + "/v1/audit", params=params, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    assert answer.status_code == status, answer.text
    assert answer.headers["Content-Type"] == "application/problem+json"


def test_the_fetch_audit_takes_no_token_the_model_function_did_not_exchange(lab_fetcher, issuer):
    raw = issuer.caller_token("page-admin", ["platform-admins"])  # the caller's own token, not exchanged
    answer = requests.get(
        lab_fetcher.url + "/v1/audit",
        params={"generation_id": str(uuid.uuid4())},
        headers={"Authorization": f"Bearer {raw}"},
        timeout=30,
    )
    assert answer.status_code == 401


def test_the_audit_is_off_the_response_path_and_written_when_the_fetcher_is_stopped(
    lab, issuer, page_dsn, page_subject, tmp_path
):
    """Fetches are answered while the audit table is locked; their rows wait, and a graceful stop (SIGTERM)
    waits for them to be written rather than dropping them."""
    server = PageFunction(lab, page_env(lab, issuer, page_dsn), tmp_path / "stopped.log")
    server.start()
    try:
        generation = str(uuid.uuid4())
        with psycopg.connect(page_dsn) as lock:
            lock.execute("LOCK TABLE page.audit IN SHARE MODE")  # no INSERT gets through until this commits
            for n in range(1, 6):
                started = time.monotonic()
                answer = Opener(server.url, issuer)(
                    f"{PUB}/article?stopped={n}", subject=page_subject, step={"generation_id": generation, "n": n}
                )
                assert answer.status_code == 200, answer.text
                assert time.monotonic() - started < 5  # not waiting on the locked table
            server.process.send_signal(signal.SIGTERM)
            time.sleep(4)  # the worker has left its loop by now, its rows still queued behind the lock
            assert server.process.poll() is None, "the fetcher exited with its audit rows unwritten"
        assert server.process.wait(15) == 0
        with psycopg.connect(page_dsn) as conn:
            rows = conn.execute(
                "SELECT step, host, status, outcome FROM page.audit WHERE generation_id = %s ORDER BY step", (generation,)
            ).fetchall()
        assert rows == [(n, "www.pub.test", 200, "ok") for n in range(1, 6)]
    finally:
        server.stop()
