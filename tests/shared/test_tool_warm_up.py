"""What a tool leaves off its way to ready is loaded right after it first answers ready, beside the first
requests: in a fresh process, a read tool's app built, then asked /readyz (its platform service answering)."""

import json
import logging
import subprocess
import sys
import threading
import time

from agentfn.shared.app import create_app, warm_up

PROBE = """
import json, sys, tempfile, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Healthy(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if sys.argv[2] == "up" else 503)
        self.end_headers()

    def log_message(self, *args):
        pass

upstream = ThreadingHTTPServer(("127.0.0.1", 0), Healthy)
threading.Thread(target=upstream.serve_forever, daemon=True).start()
key = tempfile.NamedTemporaryFile(prefix="subject-hash-key-")
key.write(b"k" * 48)
key.flush()
env = {
    "AGENTFN_SUBJECT_HASH_KEY_FILE": key.name,
    "AGENTFN_JWT_ISSUER": "http://127.0.0.1:9",
    "AGENTFN_JWKS_URL": "http://127.0.0.1:9/jwks",
    "AGENTFN_TRUSTED_ACTORS": "system:serviceaccount:agentfn:agentfn-model",
    "AGENTFN_PLATFORM_STATUS_UPSTREAM_URL": f"http://127.0.0.1:{upstream.server_port}",
    "AGENTFN_LOG_LEVEL": "WARNING",
}
from agentfn.platform_status.app import create_app

app = create_app(env)
seen = {"built": sorted(m for m in ("jwt", "jsonschema") if m in sys.modules)}
response = app.test_client().get("/readyz")
seen["status"] = response.status_code
response.close()  # the answer is sent: the warm-up starts now
deadline = time.monotonic() + float(sys.argv[3])
while time.monotonic() < deadline and not {"jwt", "jsonschema"} <= set(sys.modules):
    time.sleep(0.05)
time.sleep(0.2)
seen["after"] = sorted(m for m in ("jwt", "jsonschema") if m in sys.modules)
seen["threads"] = sorted(t.name for t in threading.enumerate() if t.name.startswith("agentfn-"))
print(json.dumps(seen))
"""


def probe(upstream: str, wait: float) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, "platform_status", upstream, str(wait)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout.splitlines()[-1])


def test_the_first_ready_answer_warms_up_the_token_check_and_the_body_schema():
    seen = probe("up", 20)
    assert seen["built"] == [], "built with PyJWT or jsonschema loaded: they are on the way to ready"
    assert seen["status"] == 200
    assert seen["after"] == ["jsonschema", "jwt"]


def test_a_tool_not_ready_warms_up_nothing():
    seen = probe("down", 2)
    assert seen["status"] == 503
    assert seen["threads"] == [] and seen["after"] == seen["built"]


def test_the_warm_up_runs_once_and_a_failed_step_is_logged_not_raised(caplog):
    ran, done = [], threading.Event()

    def broken():
        ran.append("broken")
        raise RuntimeError("no such module")

    def fine():
        ran.append("fine")
        done.set()

    app = create_app("agentfn.probe", openapi={}, readiness={"always": lambda: True}, identity=None)
    warm_up(app, broken)
    warm_up(app, fine)
    client = app.test_client()
    assert ran == []
    with caplog.at_level(logging.WARNING, logger="agentfn.http"):
        for _ in range(3):
            response = client.get("/readyz")
            assert response.status_code == 200
            response.close()
        assert done.wait(10)
        time.sleep(0.2)
    assert ran == ["broken", "fine"]
    failed = [r for r in caplog.records if getattr(r, "event", None) == "warm_up"]
    assert len(failed) == 1 and failed[0].error_type == "RuntimeError"
