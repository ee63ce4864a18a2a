"""values.schema.json refuses bad values before anything renders: rows of (id, patch of values.yaml,
error pattern | None), checked with jsonschema, and a few through helm itself (which applies the schema)."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys

import pytest
from jsonschema import Draft7Validator
from support.chart import CHART, ROOT, helm, template_args, values_defaults, values_schema

VALIDATOR = Draft7Validator(values_schema())

ROWS = [
    ("the defaults", {}, None),
    ("an external database", {"database": {"mode": "external", "external": {"cidrs": ["10.0.0.0/24"]}}}, None),
    (
        "a second tier",
        {
            "engines": {
                "tiers": {
                    "large": {"url": "https://e.example/v1", "model": "m", "toolMode": "constrained", "apiKeySecret": "k"}
                }
            }
        },
        None,
    ),
    ("extra AGENTFN settings", {"functions": {"page": {"env": {"AGENTFN_PAGE_DAILY_PAGES": "50"}}}}, None),
    ("an unknown top-level key", {"replicas": 3}, r"Additional properties are not allowed \('replicas'"),
    ("an unknown key in a function", {"functions": {"memory": {"minScale": 1}}}, r"'minScale' was unexpected"),
    ("an unknown function", {"functions": {"billing": {}}}, r"'billing' was unexpected"),
    ("a database mode nobody knows", {"database": {"mode": "sqlite"}}, r"'sqlite' is not one of"),
    (
        "a function without a cpu limit",
        {"functions": {"run_code": {"resources": {"limits": {"cpu": None}}}}},
        r"'cpu' is a required property",
    ),
    ("a memory limit in words", {"functions": {"model": {"resources": {"limits": {"memory": "lots"}}}}}, r"does not match"),
    ("an env name outside AGENTFN_", {"functions": {"model": {"env": {"OPENAI_API_KEY": "x"}}}}, r"does not match"),
    (
        "an env value that is a number",
        {"functions": {"model": {"env": {"AGENTFN_THREADS": 16}}}},
        r"is not of type 'string'",
    ),
    ("a JWKS URL that is not a URL", {"identity": {"jwksUrl": "keys.json"}}, r"does not match"),
    ("a CIDR that is not one", {"apiServer": {"cidrs": ["kubernetes"]}}, r"does not match"),
    ("no API server address", {"apiServer": {"cidrs": []}}, r"should be non-empty|is too short"),
    ("a tool mode nobody knows", {"engines": {"tiers": {"fast": {"toolMode": "magic"}}}}, r"'magic' is not one of"),
    (
        "a capitalised tier",
        {"engines": {"tiers": {"Fast": {"url": "http://e/v1", "model": "m", "toolMode": "native", "apiKeySecret": ""}}}},
        r"does not match",
    ),
    ("a prefix without its dash", {"functionPrefix": "agentfn"}, r"does not match"),
    ("a gateway namespace with capitals", {"gateway": {"namespace": "Gateways"}}, r"does not match"),
    ("an admission action nobody knows", {"admissionPolicies": {"validationActions": ["Block"]}}, r"'Block' is not one of"),
    ("max scale zero", {"functions": {"memory": {"maxScale": 0}}}, r"less than the minimum of 1"),
    ("a port out of range", {"database": {"external": {"port": 70000}}}, r"greater than the maximum"),
    ("a registry with a port and a path", {"images": {"registry": "registry.example.com:5000/team/agentfn"}}, None),
    # Refused at once: the pattern's path segments cannot overlap (a backtracking engine once took hours here).
    ("a registry of forty slashed segments and a space", {"images": {"registry": "a/" * 40 + " "}}, r"does not match"),
    ("an image pinned by digest", {"images": {"digests": {"page": "sha256:" + "ab" * 32}}}, None),
    ("a digest without its algorithm", {"images": {"digests": {"page": "ab" * 32}}}, r"does not match"),
    ("a digest one digit short", {"images": {"digests": {"memory": "sha256:" + "a" * 63}}}, r"does not match"),
    ("a digest of no image", {"images": {"digests": {"billing": "sha256:" + "a" * 64}}}, r"'billing' was unexpected"),
]


def merged(base: dict, patch: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


@pytest.mark.parametrize("patch, pattern", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_values_schema(patch, pattern):
    errors = [e.message for e in VALIDATOR.iter_errors(merged(values_defaults(), patch))]
    if pattern is None:
        assert errors == []
    else:
        assert any(re.search(pattern, e) for e in errors), errors


def test_every_key_of_values_yaml_is_commented():
    lines = (CHART / "values.yaml").read_text().splitlines()
    keys = [i for i, line in enumerate(lines) if re.match(r"^\s*[A-Za-z_]+:", line)]
    assert len(keys) > 100
    assert [lines[i].strip() for i in keys if not lines[i - 1].strip().startswith("#")] == []


@pytest.mark.parametrize(
    "sets, pattern",
    [
        (("database.mode=sqlite",), r"database/mode"),
        (("functions.memory.replicas=2",), r"replicas"),
        (("identity.jwksUrl=nowhere",), r"identity/jwksUrl"),
    ],
    ids=["mode", "unknown key", "url"],
)
def test_helm_applies_the_schema(sets, pattern):
    done = helm(*template_args(None, sets), check=False)
    assert done.returncode != 0 and re.search(pattern, done.stderr), done.stderr


VALUES_DOC = ROOT / "scripts" / "values_doc.py"


def values_doc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(VALUES_DOC), *args], capture_output=True, text=True, timeout=60)


def test_the_schema_and_the_charts_readme_say_what_the_values_comments_say():
    done = values_doc("--check")
    assert done.returncode == 0, done.stderr
    readme = (CHART / "README.md").read_text()
    assert "| `crds.keep` | `true` | Keep them when the release is uninstalled" in readme
    assert values_schema()["properties"]["tests"]["properties"]["tokenSecret"]["description"].startswith("A Secret of yours")


# (id, change to a copy of values.yaml, what --check says)
DRIFT = [
    (
        "a comment changed",
        lambda t: t.replace("# Run the operator.", "# Run the operator, or not."),
        r"values.schema.json is stale.*\n.*README.md is stale",
    ),
    (
        "a key the schema lacks",
        lambda t: t + "\n# Something new.\nsomethingNew: 1\n",
        r"somethingNew: in values.yaml, not in values.schema.json",
    ),
    (
        "a key values.yaml lacks",
        lambda t: t.replace("  timeoutSeconds: 5\n", ""),
        r"tests.timeoutSeconds: in values.schema.json, not in values.yaml",
    ),
]


@pytest.mark.parametrize("change, pattern", [r[1:] for r in DRIFT], ids=[r[0] for r in DRIFT])
def test_the_values_doc_check_fails_on_drift(tmp_path, change, pattern):
    for name in ("values.yaml", "values.schema.json", "README.md"):
        shutil.copy(CHART / name, tmp_path / name)
    assert values_doc("--chart", str(tmp_path), "--check").returncode == 0
    (tmp_path / "values.yaml").write_text(change((tmp_path / "values.yaml").read_text()))
    done = values_doc("--chart", str(tmp_path), "--check")
    assert done.returncode == 1 and re.search(pattern, done.stderr), done.stderr
