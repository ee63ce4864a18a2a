"""list_models through its door, before its dev upstream (a test double of the platform's model registry): the tiers a
caller may use, and an upstream that answers outside the registry's contract. The doors every tool shares are tested
in tests/shared (test_tool_*.py, test_read_tool.py)."""

from support.tools import call


def test_it_lists_the_tiers_the_caller_may_use(read_tools, issuer):
    tiers = call(
        read_tools["list_models"].url, issuer.tool_headers("list_models", "rita", ["research"]), {"embeds": False}
    ).json()["content"]
    assert tiers == {
        "tiers": [
            {
                "name": "deep",
                "engine": "llama.cpp",
                "model": "Qwen3-32B-Q4_K_M",
                "context_tokens": 131072,
                "deadline_seconds": 120,
                "embeds": False,
                "embedding_model": None,
            }
        ],
        "count": 1,
    }


def test_a_service_outside_its_contract_is_an_upstream_problem(fragile, issuer):
    _, served = fragile("list_models", upstream_tool="radar_latest")  # answers 404 to /v1/tiers
    response = call(served.url, issuer.tool_headers("list_models", "confused", ["platform-users"]))
    assert response.status_code == 502
    assert "outside its contract (HTTP 404)" in response.json()["detail"]
