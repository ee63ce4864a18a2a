"""`open_page` in an agent's turn follows only the links of a page opened earlier in the same turn: by its
number (`link`) or its exact href (`url`). The model function, the page fetcher in the lab (its public web, a
test double) and the scripted engine (the tests' test double of an LLM); the rest of the URL rule, with no
page opened, is in tests/model/test_tool_results.py.
"""

from __future__ import annotations

import json

import psycopg
import pytest
import requests
from support.page import settle_audit

from agentfn.devstack.harness.servers import Gunicorn

PUB = "http://www.pub.test"
ARTICLE = f"{PUB}/deep/dir/article"
NEXT = f"{PUB}/deep/dir/rel/next.html"  # the article's link [1] (relative href, resolved)


@pytest.fixture(scope="module")
def reader_model(lab_fetcher, issuer, model_dsn, scripted_engine, tmp_path_factory):
    where = tmp_path_factory.mktemp("links")
    everyone = {
        "subjects": [],
        "groups": ["system:authenticated"],
        "dailyLimit": None,
        "grant": "t/pages",
        "approval": "required",
    }
    reader = {
        "object": "t/reader",
        "brief": "Reads pages.",
        "tier": "fast",
        "memory": "none",
        "tools": {"open_page": everyone},
        "limits": {"steps": 4, "tokensPerTurn": 60000, "deadlineSeconds": 30},
    }
    (where / "registry.json").write_text(
        json.dumps(
            {
                "apiVersion": "agentfn.dev/v1alpha1",
                "kind": "Registry",
                "revision": "sha256:" + "0" * 64,
                "agents": {"reader": reader},
                "alone": {},
                "mcp": {},
            }
        )
    )
    server = Gunicorn(
        "agentfn.model.app:create_app()",
        {
            **issuer.env(),
            "AGENTFN_DATABASE_URL": model_dsn,
            "AGENTFN_REGISTRY_FILE": str(where / "registry.json"),
            "AGENTFN_PAGE_URL": lab_fetcher.url,
            "AGENTFN_TIERS": "fast",
            "AGENTFN_TIER_FAST_URL": scripted_engine.url + "/v1",
            "AGENTFN_TIER_FAST_MODEL": "scripted",
            "AGENTFN_TOOL_TIMEOUT_SECONDS": "5",
            "NO_PROXY": "127.0.0.1",
            "AGENTFN_EXCHANGE_TOKEN_FILE": str(issuer.assertion_file(where, "model")),
            "no_proxy": "127.0.0.1",
        },
        where / "model.log",
    )
    server.start()
    yield server
    server.stop()


def opened(**arguments):
    return {"call": {"name": "open_page", "arguments": arguments}}


LINK_CASES = [  # (case, the second call, what it opens: the URL or the refusal's kind, pages fetched in all)
    ("a_link_by_its_number", opened(url="1"), NEXT, 2),
    ("a_link_by_its_number_in_brackets", opened(url="[1]"), NEXT, 2),
    ("a_link_by_its_exact_href", opened(url=NEXT), NEXT, 2),
    ("the_same_page_read_on", opened(url=ARTICLE, offset=100), ARTICLE, 1),  # from the caller's cache
    ("a_number_the_page_does_not_have", opened(url="99"), "url-not-offered", 1),
    ("an_address_on_the_page_host_but_not_a_link", opened(url=f"{PUB}/deep/dir/secret?q=marmalade"), "url-not-offered", 1),
]


@pytest.mark.parametrize(("case", "second", "outcome", "pages"), LINK_CASES, ids=[c[0] for c in LINK_CASES])
def test_a_turn_follows_only_the_links_of_a_page_it_opened(
    reader_model, scripted_engine, lab_fetcher, issuer, case, second, outcome, pages
):
    subject = f"reader-{case}"
    headers = issuer.headers(subject, ["readers"])
    sid = scripted_engine.script(opened(url=ARTICLE), second, {"text": "Read."})
    response = requests.post(
        f"{reader_model.url}/v1/agents/reader/turns",
        headers=headers,
        timeout=60,
        json={"messages": [{"role": "user", "content": f"Read {ARTICLE} and its first link. script:{sid}"}]},
    )
    assert response.status_code == 200, response.text
    ended = [
        json.loads(block.split("data: ", 1)[1])
        for block in response.text.split("\n\n")
        if block.startswith("event: step") and '"status":"started"' not in block
    ]
    assert ended[0]["status"] == "ok" and ended[0]["result"]["final_url"] == ARTICLE
    if outcome.startswith("http://"):
        assert ended[1]["status"] == "ok", ended[1]
        assert ended[1]["result"]["final_url"] == outcome
    else:
        assert ended[1]["status"] == "error" and ended[1]["result"]["type"].endswith("/" + outcome)
    assert fetched(lab_fetcher, issuer, subject) == pages  # a refused call fetched nothing


def fetched(lab_fetcher, issuer, page_subject: str) -> int:
    settle_audit(lab_fetcher.url, issuer)
    with psycopg.connect(lab_fetcher.env["AGENTFN_DATABASE_URL"], options="-c search_path=page") as conn:
        return conn.execute("SELECT count(*) FROM audit WHERE subject = %s", (page_subject,)).fetchone()[0]


def test_a_link_of_a_page_opened_in_an_earlier_turn_is_refused(reader_model, scripted_engine, lab_fetcher, issuer):
    subject = "reader-earlier-turn"
    headers = issuer.headers(subject, ["readers"])
    first = scripted_engine.script(opened(url=ARTICLE), {"text": "Read."})
    requests.post(
        f"{reader_model.url}/v1/agents/reader/turns",
        headers=headers,
        timeout=60,
        json={"messages": [{"role": "user", "content": f"Read {ARTICLE}. script:{first}"}]},
    )
    history = [{"role": "user", "content": f"Read {ARTICLE}."}]  # (the engine plays the first script id it sees)
    sid = scripted_engine.script(opened(url=NEXT), {"text": "No."})
    response = requests.post(
        f"{reader_model.url}/v1/agents/reader/turns",
        headers=headers,
        timeout=60,
        json={
            "messages": [
                *history,
                {"role": "assistant", "content": "Read."},
                {"role": "user", "content": f"Now its first link. script:{sid}"},
            ]
        },
    )
    steps = [
        json.loads(block.split("data: ", 1)[1])
        for block in response.text.split("\n\n")
        if block.startswith("event: step") and '"status":"started"' not in block
    ]
    assert [(s["status"], s["result"]["type"].rsplit("/", 1)[-1]) for s in steps] == [("error", "url-not-offered")]
    assert fetched(lab_fetcher, issuer, subject) == 1
