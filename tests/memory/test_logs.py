"""Logs are JSON lines with request ids; they never hold a token, an entry's text or a query."""

import hashlib
import json
import secrets
import time

import pytest
import requests

from agentfn.devstack.harness.servers import Gunicorn


def test_logs_hold_no_token_no_text_no_query(memory, issuer, caller):
    marker = f"zebra-{secrets.token_hex(6)}"
    token = issuer.caller_token("log-watcher")
    headers = {"Authorization": f"Bearer {token}", "X-Request-Id": f"req-{marker}"}
    entry = caller.post(
        "/v1/entries", json={"kind": "fact", "text": f"secret note {marker}", "source": f"src {marker}"}, headers=headers
    ).json()
    caller.post("/v1/recall", json={"query": f"where is {marker}?"}, headers=headers)
    caller.patch(f"/v1/entries/{entry['id']}", json={"text": "x" * 2000 + marker}, headers=headers)  # a refusal
    caller.post("/v1/entries", data=f'{{"text": "{marker}"', headers={**headers, "Content-Type": "application/json"})

    lines = memory.log.read_text().splitlines()
    ours = [json.loads(line) for line in lines if f"req-{marker}" in line]
    assert len(ours) == 4 and all(r["route"] and r["status"] for r in ours)
    assert {r["status"] for r in ours} == {201, 200, 422, 400}
    text = memory.log.read_text()
    assert text.count(marker) == 4  # only inside the request ids we chose
    assert token.split(".")[1] not in text and token.split(".")[2] not in text


def request_line(server, request_id: str) -> dict:
    """The request's log line, once it is written."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = [json.loads(line) for line in server.log.read_text().splitlines() if request_id in line]
        if found:
            return found[-1]
        time.sleep(0.05)
    raise AssertionError(f"no log line of {request_id}")


def test_the_subject_hash_is_keyed_so_hashing_names_finds_no_one(memory, issuer):
    subject = f"Ana Horvat {secrets.token_hex(3)}"
    request_id = f"req-keyed-{secrets.token_hex(6)}"
    answer = requests.get(
        memory.url + "/v1/entries", headers={**issuer.headers(subject), "X-Request-Id": request_id}, timeout=30
    )
    assert answer.status_code == 200, answer.text
    logged = request_line(memory, request_id)["subject_hash"]
    assert logged == issuer.subject_hash(subject)  # HMAC-SHA256 keyed by the deployment's key, 48 bits
    assert logged != hashlib.sha256(subject.encode()).hexdigest()[:12]  # what anyone could compute from a name


KEYLESS = {
    "unset": (None, "AGENTFN_SUBJECT_HASH_KEY_FILE is required"),
    "missing file": ("missing", "AGENTFN_SUBJECT_HASH_KEY_FILE cannot be read"),
    "short key": ("short-key-9d1c", "AGENTFN_SUBJECT_HASH_KEY_FILE must hold at least 32 bytes"),
}


@pytest.mark.slow  # memory under gunicorn
@pytest.mark.parametrize(("key", "says"), KEYLESS.values(), ids=KEYLESS.keys())
def test_a_part_without_its_subject_hash_key_does_not_start(memory_env, tmp_path, key, says):
    env = {k: v for k, v in memory_env.items() if k != "AGENTFN_SUBJECT_HASH_KEY_FILE"}
    if key is not None:
        path = tmp_path / "subject-hash-key"
        if key != "missing":
            path.write_text(key)
        env["AGENTFN_SUBJECT_HASH_KEY_FILE"] = str(path)
    server = Gunicorn("agentfn.memory.app:create_app()", env, tmp_path / "memory.log")
    try:
        with pytest.raises(RuntimeError):
            server.start(timeout=120)
    finally:
        server.stop()
    log = server.log.read_text()
    assert says in log
    assert "short-key-9d1c" not in log  # the key itself is never repeated
