"""Every function folder has a func.yaml that knative's own schema accepts."""

import json
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft4Validator

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "tests/schemas/knative-func-yaml-schema.json").read_text())
FUNCTIONS = sorted(p.parent for p in ROOT.glob("functions/*/app.py"))


def test_there_are_functions():
    assert ROOT / "functions/memory" in FUNCTIONS


@pytest.mark.parametrize("folder", FUNCTIONS, ids=[f.name for f in FUNCTIONS])
def test_func_yaml_is_valid(folder):
    path = folder / "func.yaml"
    assert path.exists(), f"{folder.name} has no func.yaml"
    descriptor = yaml.safe_load(path.read_text())
    errors = sorted(Draft4Validator(SCHEMA).iter_errors(descriptor), key=str)
    assert not errors, "\n".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors)
    assert descriptor["deploy"]["annotations"]["autoscaling.knative.dev/min-scale"] == "0"
    assert descriptor["deploy"]["healthEndpoints"] == {"liveness": "/healthz", "readiness": "/readyz"}


def test_the_validator_refuses_a_broken_descriptor():
    broken = {"specVersion": "0.36.0", "created": "2026-12-02T00:00:00Z", "name": "Not_Valid", "invoke": "smoke"}
    assert len(list(Draft4Validator(SCHEMA).iter_errors(broken))) >= 2
