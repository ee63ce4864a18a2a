"""schemathesis against memory's own /openapi.json: every door answers as documented, never with a 5xx."""

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

MODEL_SERVICE = "system:serviceaccount:agentfn:agentfn-model"


@pytest.fixture(scope="module")
def memory_schema(memory):
    return schemathesis.openapi.from_url(memory.url + "/openapi.json")


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
    case.validate_response(response)


def test_the_document_lists_every_door(memory):
    import requests

    paths = requests.get(memory.url + "/openapi.json").json()["paths"]
    assert set(paths) == {"/v1/entries", "/v1/entries/{id}", "/v1/recall", "/internal/v1/episodes"}
