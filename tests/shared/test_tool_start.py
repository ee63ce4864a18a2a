"""Start fast: a tool's way to ready imports nothing heavy (the measured times are in benchmarks/bench_tools.py)."""

import json
import subprocess
import sys

import pytest
from support import TOOLS

# PyJWT and its crypto backend come with the first token (or the warm-up after ready), jsonschema with the first
# call's body; OpenTelemetry only when a collector is named (none here).
HEAVY = [
    "jwt",
    "cryptography",
    "jsonschema",
    "opentelemetry",
    "urllib.request",
    "requests",
    "urllib3",
    "psycopg",
    "psycopg_pool",
    "numpy",
    "onnxruntime",
    "tokenizers",
]
ALLOWED = {"run_code": {"psycopg", "psycopg_pool"}}  # its daily-runs count is part of being ready
PROBE = """
import json, sys
from importlib import import_module
app = import_module(f"agentfn.{sys.argv[1]}.app").create_app(json.loads(sys.argv[2]))
print(json.dumps(sorted(m for m in json.loads(sys.argv[3]) if m in sys.modules)))
"""


@pytest.mark.parametrize("tool", TOOLS)
def test_the_way_to_ready_imports_nothing_heavy(run_code_env, tool):
    env = {
        "AGENTFN_JWT_ISSUER": "http://127.0.0.1:9",
        "AGENTFN_JWKS_URL": "http://127.0.0.1:9/jwks",
        "AGENTFN_TRUSTED_ACTORS": "system:serviceaccount:agentfn:agentfn-model",
        f"AGENTFN_{tool.upper()}_UPSTREAM_URL": "http://127.0.0.1:9",
        "AGENTFN_LOG_LEVEL": "WARNING",
        "AGENTFN_DATABASE_URL": run_code_env["AGENTFN_DATABASE_URL"],
        "AGENTFN_SUBJECT_HASH_KEY_FILE": run_code_env["AGENTFN_SUBJECT_HASH_KEY_FILE"],
    }
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, tool, json.dumps(env), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    loaded = set(json.loads(probe.stdout.splitlines()[-1]))
    assert loaded <= ALLOWED.get(tool, set()), f"{tool} imports {sorted(loaded)} on its way to ready"
