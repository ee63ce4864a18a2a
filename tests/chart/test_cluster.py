"""The chart on a real kube-apiserver (v1.20.2 on loopback, tests/support/apiserver.py): the CRDs it needs
(agentfn's, Knative Serving's, Gateway API's, CloudNativePG's), then the rendered chart with server-side
dry-run, then for real, then deleted. Nothing runs pods here, so this proves what the API server checks:
schemas (built-in and CRD), references it resolves, RBAC.

1.20 predates two things the chart and the CRDs use: CEL (`x-kubernetes-validations` is stripped from the
CRDs before they are applied, and their rules are run offline, tests/operator/test_cel.py; so are
`selectableFields` and empty-string defaults, which 1.20 refuses, with the map-list keys that
needed them) and
ValidatingAdmissionPolicy (left out here and evaluated offline, tests/policies/).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest
import yaml
from support.chart import CHART, CRD_FILES, SCHEMAS, VALUES_SETS, Loader, for_1_20, helm

# The first build of the apiserver on a fresh machine takes minutes (scripts/kube-apiserver.sh).
pytestmark = pytest.mark.timeout(1500)
NAMESPACE = "agentfn-chart"  # apart from the operator's tests, which use agentfn
NOT_IN_1_20 = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
APPLIED_FIRST = {"CustomResourceDefinition"}  # by the cluster fixture, made fit for 1.20


@functools.cache
def crd_documents() -> list[dict]:
    docs = [yaml.load(p.read_text(), Loader=Loader) for p in sorted((CHART / "files" / "crds").glob("*.yaml"))]
    docs += [yaml.load((SCHEMAS / name).read_text(), Loader=Loader) for name in sorted(set(CRD_FILES.values()))]
    return [for_1_20(d) for d in docs]


def rendered(values_set: str) -> list[dict]:
    args = ["template", "agentfn", str(CHART), "--namespace", NAMESPACE]
    if VALUES_SETS[values_set]:
        args += ["-f", str(VALUES_SETS[values_set])]
    docs = [d for d in yaml.safe_load_all(helm(*args).stdout) if d]
    # `helm test`'s pod and policy are hooks: `helm install` leaves them out too
    return [
        d
        for d in docs
        if d["kind"] not in NOT_IN_1_20 | APPLIED_FIRST and "helm.sh/hook" not in d["metadata"].get("annotations", {})
    ]


@pytest.fixture(scope="module")
def cluster(apiserver, tmp_path_factory):
    directory = tmp_path_factory.mktemp("crds")
    path = directory / "crds.yaml"
    path.write_text(yaml.safe_dump_all(crd_documents()))
    # Server-side: CloudNativePG's CRD is larger than the annotation client-side apply would keep.
    apiserver.kubectl("apply", "--server-side", "--force-conflicts", "--validate=false", "-f", str(path))
    names = [d["metadata"]["name"] for d in crd_documents()]
    apiserver.kubectl("wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{n}" for n in names])
    for crd in crd_documents():  # the refusals below are kubectl's, against the schemas the server publishes
        spec = crd["spec"]
        stored = next(v["name"] for v in spec["versions"] if v.get("storage"))
        apiserver.published(spec["names"]["plural"], f"{spec['group']}/{stored}")
    if apiserver.kubectl("get", "namespace", NAMESPACE, check=False).returncode != 0:
        apiserver.kubectl("create", "namespace", NAMESPACE)
    return apiserver


def test_the_crds_1_20_refuses_are_the_ones_stripped():
    docs = crd_documents()
    assert len(docs) == 7
    assert "x-kubernetes-validations" not in json.dumps(docs)
    raw = (SCHEMAS / "gateway-api-httproutes-crd.yaml").read_text()
    assert "x-kubernetes-validations" in raw  # there was something to strip


def write(tmp_path: Path, docs: list[dict]) -> Path:
    path = tmp_path / "objects.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


@pytest.mark.parametrize("values_set", ["cnpg", "external"])
def test_the_chart_passes_a_server_side_dry_run(cluster, tmp_path, values_set):
    docs = rendered(values_set)
    assert {"Service", "NetworkPolicy", "Deployment", "Role"} <= {d["kind"] for d in docs}
    done = cluster.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", str(write(tmp_path, docs)))
    assert done.stdout.count("(server dry run)") == len(docs), done.stdout


BROKEN = [
    (
        "a Knative Service with a field its CRD lacks",
        "Service",
        "serving.knative.dev/v1",
        lambda d: d["spec"]["template"]["spec"].__setitem__("replicas", 2),
        r"replicas",
    ),
    (
        "an HTTPRoute path type its CRD lacks",
        "HTTPRoute",
        "gateway.networking.k8s.io/v1",
        lambda d: d["spec"]["rules"][0]["matches"][0]["path"].__setitem__("type", "Glob"),
        r"Glob",
    ),
    (
        "a NetworkPolicy port out of range",
        "NetworkPolicy",
        "networking.k8s.io/v1",
        lambda d: d["spec"].__setitem__("egress", [{"ports": [{"port": 70000}]}]),
        r"port",
    ),
    (
        "a Cluster with instances as text",
        "Cluster",
        "postgresql.cnpg.io/v1",
        lambda d: d["spec"].__setitem__("instances", "three"),
        r"instances",
    ),
]


@pytest.mark.parametrize("kind, api_version, breaks, pattern", [r[1:] for r in BROKEN], ids=[r[0] for r in BROKEN])
def test_the_apiserver_refuses_broken_objects(cluster, tmp_path, kind, api_version, breaks, pattern):
    doc = next(d for d in rendered("cnpg") if d["kind"] == kind and d["apiVersion"] == api_version)
    assert cluster.kubectl("apply", "--dry-run=server", "-f", str(write(tmp_path, [doc]))).returncode == 0
    breaks(doc)
    done = cluster.kubectl("apply", "--dry-run=server", "-f", str(write(tmp_path, [doc])), check=False)
    assert done.returncode != 0 and re.search(pattern, done.stderr), done.stderr


def test_the_chart_applies_for_real_and_cleans_up(cluster, tmp_path):
    docs = rendered("cnpg")
    path = write(tmp_path, docs)
    cluster.kubectl("apply", "-f", str(path))
    try:
        kinds = sorted(
            {
                f"{d['kind'].lower()}.{d['apiVersion'].rpartition('/')[0]}".rstrip(".")
                for d in docs
                if d["kind"] != "RuntimeClass"
            }
        )
        stored = json.loads(cluster.kubectl("-n", NAMESPACE, "get", ",".join(kinds), "-o", "json").stdout)["items"]
        assert sorted((o["kind"], o["metadata"]["name"]) for o in stored if "agentfn" in o["metadata"]["name"]) == sorted(
            (d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] != "RuntimeClass"
        )
        cluster.kubectl("get", "runtimeclass", "gvisor")
        ksvc = json.loads(
            cluster.kubectl("-n", NAMESPACE, "get", "services.serving.knative.dev", "agentfn-run-code", "-o", "json").stdout
        )
        assert ksvc["spec"]["template"]["spec"]["runtimeClassName"] == "gvisor"
        assert ksvc["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"] == "0"
        # The operator's account may do what it needs in the chart's namespace, and no more.
        account = f"system:serviceaccount:{NAMESPACE}:agentfn-operator"

        def can(*what):
            return cluster.kubectl("auth", "can-i", f"--as={account}", "-n", NAMESPACE, *what, check=False).stdout.strip()

        assert can("patch", "configmap/agentfn-registry") == "yes"
        assert can("patch", "networkpolicy/agentfn-model-to-tools") == "yes"
        assert can("watch", "toolgrants.agentfn.dev") == "yes"
        assert can("get", "secrets") == "no"
        assert can("patch", "configmap/agentfn-tool-descriptors") == "no"
        assert can("delete", "networkpolicy/agentfn-default-deny") == "no"
    finally:
        cluster.kubectl("delete", "--wait=true", "-f", str(path))
    left = cluster.kubectl(
        "-n",
        NAMESPACE,
        "get",
        "services.serving.knative.dev,networkpolicies,httproutes,clusters,deployments,secrets,serviceaccounts",
        "-o",
        "name",
    ).stdout.split()
    assert [n for n in left if "agentfn" in n] == []
