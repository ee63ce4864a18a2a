"""run_code's telemetry through a test OTLP receiver (a TEST DOUBLE of a collector): each run counted by the limit
that stopped it, a spent day counted as a budget refusal, and never the program or its output."""

from __future__ import annotations

import secrets

import pytest
from support.tools import call

from agentfn.devstack.harness.servers import Gunicorn
from agentfn.devstack.otlp_receiver import Receiver


@pytest.fixture(scope="module")
def run_code_receiver():
    served = Receiver()
    yield served
    served.stop()


@pytest.fixture(scope="module")
def traced_run_code(run_code_env, run_code_receiver, tmp_path_factory):
    env = {
        **run_code_env,
        "AGENTFN_RUN_CODE_DAILY_RUNS": "2",
        "AGENTFN_RUN_CODE_UID_BASE": "3200000",
        "OTEL_EXPORTER_OTLP_ENDPOINT": run_code_receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_METRIC_EXPORT_INTERVAL": "300",
        "AGENTFN_WORKERS": "1",
    }
    server = Gunicorn("agentfn.run_code.app:create_app()", env, tmp_path_factory.mktemp("traced") / "run_code.log")
    server.start()
    yield server
    server.stop()


def latest(run_code_receiver, metric: str, **attributes) -> float:
    found = [
        p
        for p in run_code_receiver.points()
        if p.metric == metric
        and p.service == "agentfn-run_code"
        and all(p.attributes.get(k) == v for k, v in attributes.items())
    ]
    return found[-1].value if found else 0


def test_runs_are_counted_by_the_limit_that_stopped_them_and_a_spent_day_as_a_refusal(
    traced_run_code, issuer, run_code_receiver
):
    marker = f"programmarker{secrets.token_hex(4)}"
    headers = issuer.tool_headers("run_code", f"counted-{secrets.token_hex(4)}")
    assert call(traced_run_code.url, headers, {"code": f"print('{marker}')"}).status_code == 200
    stopped = call(traced_run_code.url, headers, {"code": "while True:\n    pass"})
    assert stopped.status_code == 200 and stopped.json()["content"]["limit"] in ("wall_time", "cpu_time"), stopped.text
    limit = stopped.json()["content"]["limit"]
    assert call(traced_run_code.url, headers, {"code": "print(1)"}).status_code == 429
    run_code_receiver.wait_for(
        lambda: (
            latest(run_code_receiver, "agentfn.runs", **{"agentfn.limit": "none"}) >= 1
            and latest(run_code_receiver, "agentfn.runs", **{"agentfn.limit": limit}) >= 1
            and latest(run_code_receiver, "agentfn.budget.refusals", **{"agentfn.limit": "daily-runs"}) >= 1
        )
    )
    assert latest(run_code_receiver, "agentfn.runs", **{"agentfn.limit": "none"}) == 1
    assert latest(run_code_receiver, "agentfn.budget.refusals", **{"agentfn.limit": "daily-runs"}) == 1

    def calls():
        found = [s for s in run_code_receiver.spans() if s.service == "agentfn-run_code" and s.name == "POST /v1/call"]
        # The refused call's span may be exported a batch after the others: wait for both statuses, or time out.
        return found if {s.attributes.get("http.response.status_code") for s in found} >= {200, 429} else None

    spans = run_code_receiver.wait_for(calls)
    assert {s.attributes.get("http.response.status_code") for s in spans} >= {200, 429}
    assert marker.encode() not in run_code_receiver.raw() and b"while True" not in run_code_receiver.raw()
