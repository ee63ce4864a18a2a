"""platform_status through its door, before its dev upstream (a test double of the platform's status service): what it
says of the services, of one service, and of one the caller may not see. The doors every tool shares are tested in
tests/shared (test_tool_*.py, test_read_tool.py)."""

from support.tools import call


def test_it_says_how_the_services_are(read_tools, issuer):
    ops = issuer.tool_headers("platform_status", "olga", ["platform-ops"])
    status = call(read_tools["platform_status"].url, ops).json()["content"]
    assert status["figures"] == {
        "services": 6,
        "up": 4,
        "degraded": 1,
        "down": 1,
        "queue_waiting": 3,
        "queue_running": 2,
        "open_incidents": 1,
    }
    assert status["text"].startswith("4 of 6 services up; degraded: radar; down: operator.")
    assert len(status["text"]) <= 400


def test_it_says_how_one_service_is(read_tools, issuer):
    ops = issuer.tool_headers("platform_status", "olga", ["platform-ops"])
    one = call(read_tools["platform_status"].url, ops, {"service": "radar"}).json()["content"]
    assert one["text"].startswith("radar is degraded: digests published late.") and len(one["attention"]) == 1


def test_a_service_the_caller_may_not_see_is_one_it_does_not_know(read_tools, issuer):
    hidden = call(
        read_tools["platform_status"].url,
        issuer.tool_headers("platform_status", "alice", ["platform-users"]),
        {"service": "operator"},
    )
    assert hidden.json()["content"]["text"] == "No service named operator is visible to you."
