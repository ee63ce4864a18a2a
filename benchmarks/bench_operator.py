"""Benchmark: the operator's apply-to-ConfigMap latency on a real kube-apiserver, and the pure reconcile at scale.

Not a test; run by hand (2 cores, loopback only):

    .venv/bin/python benchmarks/bench_operator.py [--applies 20] [--runs 5]

1. apply -> ConfigMap: the real kube-apiserver v1.20.2 + etcd of the tests (scripts/kube-apiserver.sh,
   tests/support/apiserver.py), the CRDs, RBAC and examples applied, the operator as its own process
   (`kopf run -m agentfn.operator`, as its ServiceAccount). Then --applies times: `kubectl apply` of one
   ToolGrant with a new dailyLimit, and the time until the registry ConfigMap shows a new revision
   (polled every 5 ms with the admin token). Timed from kubectl's start (what an admin waits for) and
   from kubectl's exit (the API has the object; what the operator adds). Goal: p50 <= 1 s.
2. reconcile at scale, in this process: 1,000 agents x 10 grants each (10,000 grants, one per agent and
   tool, 10 tools), and the other reading of the goal, 1,000 agents x 10 grants that each name all of
   them. Median of --runs of `reconcile()` (registry and verdicts, revision included), and of the whole
   pure path a publish runs (reconcile, the file's bytes, every object's status). Goal: <= 1 s.
Results: benchmarks/results/operator.json and operator.md. Everything started is stopped.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import requests
import yaml
from report import ROOT, command, machine, percentile, when, write

from agentfn.devstack.harness.apiserver import KubeAPI, build
from agentfn.operator.catalog import CatalogEntry
from agentfn.operator.reconcile import dumps, reconcile
from agentfn.operator.status import desired

NS = "agentfn"
GRANT = "platform-status-for-everyone"


def revision(kube: KubeAPI, session: requests.Session) -> str | None:
    r = session.get(f"{kube.url}/api/v1/namespaces/{NS}/configmaps/agentfn-registry", timeout=5)
    return r.json()["metadata"].get("annotations", {}).get("agentfn.dev/registry-revision") if r.ok else None


def wait_change(kube, session, before: str, timeout: float = 30) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (now := revision(kube, session)) and now != before:
            return time.monotonic()
        time.sleep(0.005)
    raise RuntimeError("the registry did not change")


def bench_apply(applies: int) -> dict:
    kube = KubeAPI()
    operator = None
    try:
        kube.start(build())
        kube.kubectl("apply", "--validate=false", "-f", str(ROOT / "charts/agentfn/files/crds"))
        kube.kubectl("wait", "--for=condition=Established", "crd/agents.agentfn.dev", "crd/toolgrants.agentfn.dev")
        kube.kubectl("create", "namespace", NS)
        kube.kubectl("apply", "-f", str(ROOT / "operator/deploy/rbac.yaml"))
        kube.kubectl("apply", "-f", str(ROOT / "examples"))
        token = kube.kubectl("-n", NS, "create", "token", "agentfn-operator", "--duration=1h").stdout.strip()
        kubeconfig = kube.root / "operator.kubeconfig"
        kubeconfig.write_text(kube.kubeconfig_text(token, NS))
        log = open(kube.root / "operator.log", "wb")
        operator = subprocess.Popen(
            [str(Path(sys.executable).parent / "kopf"), "run", "-m", "agentfn.operator", "--namespace", NS],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "KUBECONFIG": str(kubeconfig), "AGENTFN_NAMESPACE": NS},
        )
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {kube.admin_token}"
        session.verify, session.trust_env = str(kube.ca_file), False
        deadline = time.monotonic() + 60
        while not revision(kube, session):
            if time.monotonic() > deadline or operator.poll() is not None:
                raise RuntimeError("the operator published nothing:\n" + (kube.root / "operator.log").read_text()[-2000:])
            time.sleep(0.05)
        grant = next(
            d for d in yaml.safe_load_all((ROOT / "examples/grants.yaml").read_text()) if d["metadata"]["name"] == GRANT
        )
        from_start, from_exit = [], []
        for i in range(applies + 2):  # two warm-up applies, not counted
            grant["spec"]["dailyLimit"] = 1000 + i
            before = revision(kube, session)
            started = time.monotonic()
            kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(grant))
            applied = time.monotonic()
            changed = wait_change(kube, session, before)
            if i >= 2:
                from_start.append(changed - started)
                from_exit.append(changed - applied)
            time.sleep(0.2)
        return {
            "applies": applies,
            "from_kubectl_start_s": {
                "p50": statistics.median(from_start),
                "p90": percentile(from_start, 0.9),
                "max": max(from_start),
            },
            "from_kubectl_exit_s": {
                "p50": statistics.median(from_exit),
                "p90": percentile(from_exit, 0.9),
                "max": max(from_exit),
            },
        }
    finally:
        if operator and operator.poll() is None:
            operator.terminate()
            operator.wait(15)
        kube.stop()


def synthetic(agents: int, tools: int, per_agent: bool):
    catalog = {
        f"t{t}": CatalogEntry(f"t{t}", f"f{t}", callable_alone=t < 3, mcp=t < 3, changes_state=False) for t in range(tools)
    }
    agent_objs = [
        {
            "kind": "Agent",
            "metadata": {"name": f"agent-{a}", "namespace": NS, "generation": 1},
            "spec": {"brief": f"agent {a}", "tools": list(catalog), "memory": "none"},
        }
        for a in range(agents)
    ]
    if per_agent:
        grants = [
            {
                "kind": "ToolGrant",
                "metadata": {"name": f"g-{a}-{t}", "namespace": NS, "generation": 1},
                "spec": {
                    "tool": f"t{t}",
                    "agents": [f"agent-{a}"],
                    "groups": ["developers"],
                    "subjects": [f"u{a}"],
                    "dailyLimit": 100,
                },
            }
            for a in range(agents)
            for t in range(tools)
        ]
    else:
        names = [f"agent-{a}" for a in range(agents)]
        grants = [
            {
                "kind": "ToolGrant",
                "metadata": {"name": f"g-{t}", "namespace": NS, "generation": 1},
                "spec": {"tool": f"t{t}", "agents": names, "groups": ["developers"], "callableAlone": t < 3, "mcp": t < 3},
            }
            for t in range(tools)
        ]
    return catalog, agent_objs, grants


def bench_reconcile(runs: int) -> dict:
    out = {}
    for label, per_agent in (
        ("1000 agents x 10 grants each (10,000 grants)", True),
        ("1000 agents, 10 grants naming all of them", False),
    ):
        catalog, agents, grants = synthetic(1000, 10, per_agent)
        pure, whole = [], []
        for _ in range(runs):
            started = time.perf_counter()
            outcome = reconcile(catalog, agents, grants)
            pure.append(time.perf_counter() - started)
            dumps(outcome.registry)
            for verdict in outcome.verdicts:
                desired(verdict, None, "2026-12-02T00:00:00Z")
            whole.append(time.perf_counter() - started)
        ready = sum(v.ready for v in outcome.verdicts)
        out[label] = {
            "objects": len(agents) + len(grants),
            "ready": ready,
            "reconcile_s": statistics.median(pure),
            "publish_path_s": statistics.median(whole),
            "registry_bytes": len(dumps(outcome.registry)),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--applies", type=int, default=20)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    result = {
        "when": when(),
        "machine": machine(),
        "command": command(),
        "reconcile": bench_reconcile(args.runs),
        "apply_to_configmap": bench_apply(args.applies),
    }
    write("operator", result, markdown(result))
    print(markdown(result))


def markdown(result: dict) -> str:
    a = result["apply_to_configmap"]
    lines = [
        "# Operator benchmark",
        "",
        f"{result['when']}, {result['machine']}, `{result['command']}` "
        f"(real kube-apiserver v1.20.2 + etcd on loopback; the operator as its own process and ServiceAccount).",
        "",
        f"## `kubectl apply` of a ToolGrant -> the registry ConfigMap changed ({a['applies']} applies, goal p50 <= 1 s)",
        "",
        "| timed from | p50 | p90 | max |",
        "|---|---|---|---|",
        *(
            f"| {name} | {v['p50']:.3f} s | {v['p90']:.3f} s | {v['max']:.3f} s |"
            for name, v in (
                ("kubectl's start", a["from_kubectl_start_s"]),
                ("kubectl's exit (object stored)", a["from_kubectl_exit_s"]),
            )
        ),
        "",
        "## The pure reconcile (goal <= 1 s)",
        "",
        "| case | objects | reconcile | reconcile + file + statuses | registry |",
        "|---|---|---|---|---|",
        *(
            f"| {name} | {v['objects']} | {v['reconcile_s']:.3f} s | {v['publish_path_s']:.3f} s | "
            f"{v['registry_bytes'] / 1e6:.1f} MB |"
            for name, v in result["reconcile"].items()
        ),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
