"""The runsc (gVisor) backend through the same door, where runsc is installed; skipped, saying so, elsewhere."""

import os
import secrets
import shutil

import pytest
import requests
from support.tools import CANARY, RUN_LIMITS

from agentfn.devstack.harness.servers import Gunicorn

pytestmark = pytest.mark.skipif(
    shutil.which("runsc") is None or os.geteuid() != 0,
    reason="runsc (gVisor) is not installed here (or we are not root): the runsc backend is not tested on this machine",
)


@pytest.fixture(scope="module")
def gvisor(run_code_env, tmp_path_factory):
    env = {**run_code_env, "AGENTFN_RUN_CODE_BACKEND": "runsc", "AGENTFN_RUN_CODE_WALL_SECONDS": "4", "AGENTFN_WORKERS": "1"}
    server = Gunicorn("agentfn.run_code.app:create_app()", env, tmp_path_factory.mktemp("runsc-logs") / "run_code.log")
    server.start()
    yield server
    server.stop()


def run(server, issuer, code: str) -> dict:
    response = requests.post(
        server.url + "/v1/call",
        json={"arguments": {"code": code}},
        timeout=30,
        headers=issuer.tool_headers("run_code", f"gvisor-{secrets.token_hex(4)}"),
    )
    assert response.status_code == 200, response.text
    return response.json()["content"]


def test_a_program_runs_in_gvisor(gvisor, issuer):
    content = run(gvisor, issuer, "import os, socket\nprint('hi', os.getuid(), socket.if_nameindex())")
    assert content["backend"] == "runsc" and content["exit_status"] == 0
    assert content["stdout"] == "hi 1000 [(1, 'lo')]\n"


def test_gvisor_hides_the_host(gvisor, issuer):
    content = run(
        gvisor,
        issuer,
        """
import os
for path in ("/etc/shadow", "/work", "/root"):
    print(path, os.path.exists(path))
print(sorted(os.environ))
print(open("/proc/1/environ").read())
try:
    open("/usr/x", "w")
except OSError as e:
    print("no", type(e).__name__)
""",
    )
    assert "True" not in content["stdout"] and CANARY not in content["stdout"] and "AGENTFN" not in content["stdout"]
    assert "no " in content["stdout"]


def test_gvisor_contains_a_fork_bomb_and_a_sleeper(gvisor, issuer):
    bomb = run(gvisor, issuer, "import os\nwhile True:\n    os.fork()\n")
    assert bomb["limit"] in ("processes", "wall_time")
    sleeper = run(gvisor, issuer, "import time\ntime.sleep(60)")
    assert sleeper["limit"] == "wall_time" and sleeper["wall_ms"] < 6000
    assert requests.get(gvisor.url + "/healthz", timeout=2).status_code == 200


def test_gvisor_holds_a_runs_children_to_its_memory_together(gvisor, issuer):
    """Six children, each within the per-process limit, together far over the run's memory: the sampled
    memory of runsc's whole tree (the run's pages live in gVisor's own) stops the run."""
    share = int(RUN_LIMITS["AGENTFN_RUN_CODE_MEMORY_MB"]) // 2
    content = run(
        gvisor,
        issuer,
        f"""
import os, time
for i in range(6):
    if os.fork() == 0:
        hold = b"x" * ({share} << 20)
        time.sleep(2)
        os._exit(0)
for _ in range(6):
    os.wait()
print("all six held their share")
""",
    )
    assert content["limit"] == "memory" and "all six" not in content["stdout"], content
    assert content["bounds"] == "rlimit"
    assert run(gvisor, issuer, "print(6 * 7)")["stdout"] == "42\n"
