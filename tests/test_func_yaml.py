"""Every function folder has a func.yaml that knative's own schema accepts."""

import json
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft4Validator

from agentfn.cli import images

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "tests/schemas/knative-func-yaml-schema.json").read_text())
# Each function is a package with an app (src/agentfn/<function>/app.py) and a Knative folder, functions/<function>.
FUNCTIONS = [ROOT / "functions" / name for name in images.FUNCTIONS]


def test_there_are_functions_and_each_is_a_package_with_an_app():
    assert ROOT / "functions/memory" in FUNCTIONS
    assert sorted(p.parent for p in ROOT.glob("functions/*/func.yaml")) == sorted(FUNCTIONS)
    assert all((ROOT / "src/agentfn" / f.name / "app.py").is_file() for f in FUNCTIONS)


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
