"""Bad input gets a 4xx problem with a useful detail, and changes nothing."""

import json
import time

import pytest

OK = {"kind": "fact", "text": "The ledger listens on 7311.", "source": "chat"}

CASES = [
    # (name, method, path, body, raw body, content type, status, words in the detail)
    ("unknown kind", "post", "/v1/entries", {**OK, "kind": "opinion"}, None, None, 422, "kind: must be one of"),
    ("episode via the public door", "post", "/v1/entries", {**OK, "kind": "episode"}, None, None, 422, "kind"),
    ("empty text", "post", "/v1/entries", {**OK, "text": ""}, None, None, 422, "text: must be at least 1"),
    ("blank text", "post", "/v1/entries", {**OK, "text": "   "}, None, None, 422, "text"),
    ("oversized text", "post", "/v1/entries", {**OK, "text": "x" * 1001}, None, None, 422, "at most 1000"),
    ("missing source", "post", "/v1/entries", {"kind": "fact", "text": "t"}, None, None, 422, "'source'"),
    ("empty source", "post", "/v1/entries", {**OK, "source": ""}, None, None, 422, "source"),
    ("unknown field", "post", "/v1/entries", {**OK, "subject": "someone-else"}, None, None, 422, "unknown field 'subject'"),
    ("text of the wrong type", "post", "/v1/entries", {**OK, "text": 42}, None, None, 422, "must be of type string"),
    ("body not an object", "post", "/v1/entries", [OK], None, None, 422, "must be of type object"),
    ("bad JSON", "post", "/v1/entries", None, b'{"kind": "fact",', "application/json", 400, "not valid JSON"),
    ("not JSON", "post", "/v1/entries", None, b"kind=fact", "application/x-www-form-urlencoded", 415, "application/json"),
    (
        "huge body",
        "post",
        "/v1/entries",
        None,
        json.dumps({**OK, "text": "x" * 200_000}).encode(),
        "application/json",
        413,
        "larger than",
    ),
    ("bad id on correct", "patch", "/v1/entries/not-a-uuid", {"text": "t"}, None, None, 404, "no entry"),
    ("bad id on forget", "delete", "/v1/entries/12345", None, None, None, 404, "no entry"),
    ("empty correction", "patch", "/v1/entries/00000000-0000-4000-8000-000000000000", {}, None, None, 422, "at least 1"),
    ("limit over 5", "post", "/v1/recall", {"query": "q", "limit": 6}, None, None, 422, "limit: must be <= 5"),
    ("limit zero", "post", "/v1/recall", {"query": "q", "limit": 0}, None, None, 422, "limit: must be >= 1"),
    ("empty query", "post", "/v1/recall", {"query": ""}, None, None, 422, "query"),
    ("unknown kind in recall", "post", "/v1/recall", {"query": "q", "kinds": ["secret"]}, None, None, 422, "kinds.0"),
    (
        "unknown recall field",
        "post",
        "/v1/recall",
        {"query": "q", "threshold": 0.1},
        None,
        None,
        422,
        "unknown field 'threshold'",
    ),
    ("list with unknown kind", "get", "/v1/entries?kind=opinion", None, None, None, 400, "kind: must be one of"),
    ("list with bad limit", "get", "/v1/entries?limit=-1", None, None, None, 400, "limit"),
    ("list with unknown parameter", "get", "/v1/entries?subject=bob", None, None, None, 400, "unknown query parameter"),
    ("wrong method", "put", "/v1/entries", OK, None, None, 405, "PUT is not allowed"),
    ("no such door", "get", "/v1/nothing", None, None, None, 404, "no such door"),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "raw", "ctype", "status", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_is_a_problem_and_changes_nothing(caller, method, path, body, raw, ctype, status, words):
    kept = caller.post("/v1/entries", json=OK).json()
    before = caller.get("/v1/entries").json()
    kwargs = {"data": raw, "headers": {"Content-Type": ctype}} if raw is not None else {"json": body}
    response = getattr(caller, method)(path, **kwargs)
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    problem = response.json()
    assert problem["status"] == status and problem["title"]
    assert words in problem["detail"], problem
    assert caller.get("/v1/entries").json() == before
    assert caller.get("/v1/entries").json()["entries"][0]["id"] == kept["id"]


def test_a_problem_never_quotes_the_callers_text(caller):
    secret = "hunter2-" * 200
    response = caller.post("/v1/entries", json={**OK, "text": secret})
    assert response.status_code == 422
    assert "hunter2" not in response.text


# Bodies that make a backtracking regex engine work quadratically (a long text the pattern almost matches),
# each just under the body limit. Refused at once: a pattern is never tried on a text over its maxLength,
# and every pattern is linear.
HOSTILE_LIMIT_SECONDS = 1.5  # generous for a loaded 2-core machine; the quadratic pattern took ~20 s here
LONG = 60_000
ENTRY = "/v1/entries/00000000-0000-4000-8000-000000000000"
HOSTILE = [
    # (name, method, path, body, the field the detail names)
    ("text of letters ending in NUL", "post", "/v1/entries", {**OK, "text": "a" * LONG + "\0"}, "text"),
    ("text of spaces ending in NUL", "post", "/v1/entries", {**OK, "text": " " * LONG + "\0"}, "text"),
    ("text of letters and spaces ending in NUL", "post", "/v1/entries", {**OK, "text": "a " * (LONG // 2) + "\0"}, "text"),
    ("source ending in NUL", "post", "/v1/entries", {**OK, "source": "a" * LONG + "\0"}, "source"),
    (
        "text and source ending in NUL",
        "post",
        "/v1/entries",
        {**OK, "text": "a" * (LONG // 2) + "\0", "source": "b" * (LONG // 2) + "\0"},
        "text",
    ),
    ("text within its length ending in NUL", "post", "/v1/entries", {**OK, "text": "a" * 999 + "\0"}, "text"),
    ("correction ending in NUL", "patch", ENTRY, {"text": "a" * LONG + "\0"}, "text"),
    ("query ending in NUL", "post", "/v1/recall", {"query": "a" * LONG + "\0"}, "query"),
    ("query within its length ending in NUL", "post", "/v1/recall", {"query": "a" * 3999 + "\0"}, "query"),
    ("query of spaces within its length ending in NUL", "post", "/v1/recall", {"query": " " * 3999 + "\0"}, "query"),
]


@pytest.mark.parametrize(("method", "path", "body", "field"), [c[1:] for c in HOSTILE], ids=[c[0] for c in HOSTILE])
def test_a_hostile_pattern_body_is_refused_at_once(caller, method, path, body, field):
    assert caller.get("/v1/entries").status_code == 200  # warm: the token's keys fetched
    data = json.dumps(body).encode()
    assert len(data) < 65536  # under the body limit: the schema, not the size check, must refuse it
    started = time.perf_counter()
    response = getattr(caller, method)(path, data=data, headers={"Content-Type": "application/json"})
    took = time.perf_counter() - started
    assert response.status_code == 422, response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    assert response.json()["detail"].startswith(f"{field}:")
    assert took < HOSTILE_LIMIT_SECONDS, f"{took:.2f} s"
