"""Logs are JSON lines with request ids; they never hold a token, an entry's text or a query."""

import json
import secrets


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
