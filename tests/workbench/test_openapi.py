"""schemathesis against the workbench's own /openapi.json: every door answers as documented, never with a 5xx;
and the sign-in settings say where the page signs in."""

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from support import openapi_schema


@pytest.fixture(scope="module")
def workbench_schema(workbench):
    return openapi_schema(workbench.url)


schema = schemathesis.pytest.from_fixture("workbench_schema")


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_door_answers_as_documented(case):
    response = case.call()
    assert response.status_code < 500, response.text
    case.validate_response(response)


def test_the_settings_name_the_issuer_and_the_public_client(workbench, issuer):
    found = requests.get(workbench.url + "/workbench.json", timeout=5).json()
    assert found == {
        "issuer": issuer.url,
        "client_id": "agentfn-workbench",
        "scope": "openid",
        "admin_groups": ["platform-admins"],
    }
    policy = requests.get(workbench.url + "/", timeout=5).headers["Content-Security-Policy"]
    assert f"connect-src 'self' {issuer.url}" in policy  # the page may reach the issuer's token endpoint, nothing else
