"""radar_latest through its door, before its dev upstream (a test double of the Radar): the latest digests, and a count
given as a whole float. The doors every tool shares are tested in tests/shared (test_tool_*.py, test_read_tool.py)."""

from support.tools import call


def test_it_gives_the_latest_digests(read_tools, issuer):
    digests = call(
        read_tools["radar_latest"].url, issuer.tool_headers("radar_latest", "alice", ["platform-users"]), {"count": 2}
    ).json()["content"]
    assert [d["date"] for d in digests["digests"]] == ["2026-12-01", "2026-11-24"] and digests["count"] == 2
    assert all(d["url"].startswith("https://") and len(d["summary"]) <= 300 for d in digests["digests"])


def test_a_whole_number_count_given_as_a_float_is_a_count(read_tools, issuer):
    # JSON Schema calls 2.0 an integer; the Radar's contract wants "2" (found by schemathesis).
    response = call(
        read_tools["radar_latest"].url, issuer.tool_headers("radar_latest", "pedant", ["platform-users"]), {"count": 2.0}
    )
    assert response.status_code == 200 and response.json()["content"]["count"] == 2
