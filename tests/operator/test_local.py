"""Static tier: local mode writes the registry the dev stack reads, from the same reconcile, and audit
prints who may call what from it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import yaml
from jsonschema import Draft202012Validator
from support.operator import EXAMPLES, ROOT, example_objects, wait_for

from agentfn.operator import audit
from agentfn.operator.reconcile import dumps, reconcile

SCHEMA = json.loads((ROOT / "src" / "agentfn" / "shared" / "contract" / "registry.schema.json").read_text())


def run(module, *args, **kw):
    return subprocess.run(
        [sys.executable, "-m", f"agentfn.operator.{module}", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        **kw,
    )


def test_local_mode_writes_the_registry_once_and_only_when_it_changes(tool_catalog, tmp_path):
    out = tmp_path / "var" / "registry.json"
    first = run("local", EXAMPLES, "--out", out)
    assert first.returncode == 0, first.stderr
    assert out.read_text() == dumps(reconcile(tool_catalog, *example_objects()).registry)
    Draft202012Validator(SCHEMA).validate(json.loads(out.read_text()))
    assert "Agent agentfn/code-reviewer: Ready" in first.stdout
    stamp = out.stat().st_mtime_ns
    second = run("local", EXAMPLES, "--out", out)
    assert second.returncode == 0 and "unchanged" in second.stdout and out.stat().st_mtime_ns == stamp


def test_local_mode_leaves_out_an_invalid_object_and_says_so(tmp_path):
    shutil.copytree(EXAMPLES, tmp_path / "agents")
    (tmp_path / "agents" / "bad.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "agentfn.dev/v1alpha1",
                "kind": "ToolGrant",
                "metadata": {"name": "guide-opens-pages"},
                "spec": {"tool": "open_page", "agents": ["site-guide"], "groups": ["visitors"]},
            }
        )
    )
    out = tmp_path / "registry.json"
    done = run("local", tmp_path / "agents", "--out", out)
    assert done.returncode == 1
    assert "ToolGrant default/guide-opens-pages: Invalid (ForbiddenAgent)" in done.stderr
    assert "open_page" not in json.loads(out.read_text())["agents"]["site-guide"]["tools"]


def test_local_mode_refuses_a_grant_that_makes_a_tool_that_changes_state_callable_alone(tmp_path):
    # A tool function of another team: its descriptor offers it alone and does not say it is a read.
    for described in (ROOT / "src" / "agentfn").glob("*/tool.json"):
        (tmp_path / "catalog" / described.parent.name).mkdir(parents=True)
        shutil.copy(described, tmp_path / "catalog" / described.parent.name)
    (tmp_path / "catalog" / "incidents").mkdir()
    (tmp_path / "catalog" / "incidents" / "tool.json").write_text(
        json.dumps(
            {
                "name": "close_incident",
                "description": "Closes an incident.",
                "input_schema": {"type": "object", "additionalProperties": False},
                "callable_alone": True,
                "mcp": False,
            }
        )
    )
    shutil.copytree(EXAMPLES, tmp_path / "agents")
    (tmp_path / "agents" / "incidents.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "agentfn.dev/v1alpha1",
                "kind": "ToolGrant",
                "metadata": {"name": "incidents-alone"},
                "spec": {"tool": "close_incident", "callableAlone": True, "groups": ["platform-users"]},
            }
        )
    )
    out = tmp_path / "registry.json"
    done = run(
        "local", tmp_path / "agents", "--out", out, env={**os.environ, "AGENTFN_TOOL_CATALOG_DIR": str(tmp_path / "catalog")}
    )
    assert done.returncode == 1, done.stderr
    assert (
        "ToolGrant default/incidents-alone: Invalid (ForbiddenChannel) close_incident changes state: "
        "it is never callable alone" in done.stderr
    )
    assert "close_incident" not in json.loads(out.read_text())["alone"]


def test_watch_mode_rewrites_the_registry_when_a_file_changes(tmp_path):
    shutil.copytree(EXAMPLES, tmp_path / "agents")
    out = tmp_path / "registry.json"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentfn.operator.local",
            str(tmp_path / "agents"),
            "--out",
            str(out),
            "--watch",
            "--interval",
            "0.1",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        first = wait_for(lambda: out.exists() and json.loads(out.read_text()), timeout=30, what="the first registry")
        grants = tmp_path / "agents" / "grants.yaml"
        docs = [d for d in yaml.safe_load_all(grants.read_text()) if d["metadata"]["name"] != "code-reviewer-runs-code"]
        grants.write_text(yaml.safe_dump_all(docs))
        os.utime(grants, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))  # a coarse clock still sees it
        second = wait_for(
            lambda: (r := json.loads(out.read_text()))["revision"] != first["revision"] and r,
            timeout=15,
            what="a rewritten registry",
        )
        assert "run_code" in first["agents"]["code-reviewer"]["tools"]
        assert "run_code" not in second["agents"]["code-reviewer"]["tools"]
    finally:
        process.terminate()
        process.wait(10)


def test_audit_prints_who_may_call_what(tmp_path):
    out = tmp_path / "registry.json"
    run("local", EXAMPLES, "--out", out)
    printed = run("audit", out)
    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.splitlines()
    assert lines[0].split() == list(audit.HEADER)
    rows = {tuple(line.split()) for line in lines[1:]}
    assert (
        "code-reviewer",
        "run_code",
        "-",
        "developers",
        "step",
        "50",
        "required",
        "agentfn/code-reviewer-runs-code",
    ) in rows
    assert ("code-reviewer", "forget", "-", "developers", "step", "-", "required", "agentfn/code-reviewer-forgets") in rows
    assert (
        "-",
        "platform_status",
        "-",
        "system:authenticated",
        "mcp",
        "500",
        "-",
        "agentfn/platform-status-for-everyone",
    ) in rows
    assert not any(r[1] in ("run_code", "open_page", "remember", "forget") and r[4] != "step" for r in rows)
    assert not any(r[0] == "site-guide" and r[1] != "platform_status" for r in rows)
    assert len(rows) == 8
    piped = run("audit", "-", "--json", input=out.read_text())
    assert [tuple(r.values()) for r in json.loads(piped.stdout)] == audit.rows(json.loads(out.read_text()))
