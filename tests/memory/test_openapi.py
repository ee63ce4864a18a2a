"""schemathesis against memory's own /openapi.json: every door answers as documented, never with a 5xx."""

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance
from support import openapi_schema

MODEL_SERVICE = "system:serviceaccount:agentfn:agentfn-model"


@pytest.fixture(scope="module")
def memory_schema(memory):
    return openapi_schema(memory.url)


schema = schemathesis.pytest.from_fixture("memory_schema")


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_door_answers_as_documented(case, issuer):
    if case.path.startswith("/internal/"):
        token = issuer.service_token(MODEL_SERVICE)
    else:
        token = issuer.caller_token("schemathesis-caller")
    response = case.call(headers={"Authorization": f"Bearer {token}"})
    assert response.status_code < 500, response.text
    if response.status_code == 414:
        return  # a request line over gunicorn's cap (4094 bytes) is refused before any door reads it
    # "A sentence a person could have said" has no JSON Schema keyword: a schema-valid text may not be a note.
    not_a_note = response.status_code == 422 and "/problems/not-a-note" in response.text
    case.validate_response(response, excluded_checks=[positive_data_acceptance] if not_a_note else [])


def test_the_document_lists_every_door(memory):
    import requests

    paths = requests.get(memory.url + "/openapi.json").json()["paths"]
    assert set(paths) == {"/v1/entries", "/v1/entries/{id}", "/v1/recall", "/internal/v1/episodes"}


def test_the_document_says_what_a_write_may_answer(memory):
    import requests

    document = requests.get(memory.url + "/openapi.json").json()
    create = document["paths"]["/v1/entries"]["post"]["responses"]
    assert {"200", "201", "422", "429"} <= set(create)
    for status in ("200", "201"):
        assert create[status]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Kept"}
    assert document["components"]["schemas"]["Kept"]["properties"]["existing"]["type"] == "boolean"
    assert "existing" in document["components"]["schemas"]["Kept"]["required"]
    correct = document["paths"]["/v1/entries/{id}"]["patch"]["responses"]
    episode = document["paths"]["/internal/v1/episodes"]["post"]["responses"]
    assert "409" in correct
    for responses in (create, correct, episode):
        assert "Retry-After" in responses["429"]["headers"]


def test_the_document_says_how_to_forget_everything(memory):
    import requests

    document = requests.get(memory.url + "/openapi.json").json()
    forget_all = document["paths"]["/v1/entries"]["delete"]
    body = forget_all["requestBody"]["content"]["application/json"]["schema"]
    assert body["required"] == ["confirm"] and body["properties"]["confirm"]["const"] == "forget everything"
    assert forget_all["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Receipt"
    }
    receipt = document["components"]["schemas"]["Receipt"]
    # Counts, a time and what stays (the platform's own words): no text of the caller's.
    assert set(receipt["properties"]) == {"deleted", "total", "at", "stays"}
    assert receipt["properties"]["stays"]["items"]["required"] == ["part", "record", "holds", "why", "until"]
    assert set(receipt["properties"]["deleted"]["required"]) == {"fact", "preference", "episode"}
    assert "422" in forget_all["responses"]
