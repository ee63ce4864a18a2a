"""Day two on a real kube-apiserver: the Agent and ToolGrant CRDs are templates of the release, so
`helm upgrade` brings a CRD's new field and printer column, `helm rollback` takes them back, the objects
stay through both, and `helm uninstall` leaves the CRDs and every object (helm.sh/resource-policy: keep)
unless `crds.keep` is false.

Release N is the chart as it is and N+1 a copy whose Agent CRD adds `spec.owner` and an Owner column,
both made for the test's 1.20 server (no kubeVersion floor, the CRDs without what 1.20 refuses, see
test_cluster.py). The server is this module's own: helm must own the CRDs here, while the session's server
has them applied by kubectl for the operator's tests.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from support.chart import CHART, CRD_FILES, ROOT, SCHEMAS, Loader, for_1_20, helm, objects

pytestmark = pytest.mark.timeout(1500)
NAMESPACE = "agentfn"  # the examples' namespace
EXAMPLES = [ROOT / "examples" / "agents.yaml", ROOT / "examples" / "grants.yaml"]
OWNED = {
    "apiVersion": "agentfn.dev/v1alpha1",
    "kind": "Agent",
    "metadata": {"name": "owned", "namespace": NAMESPACE},
    "spec": {"brief": "Answers for the platform team.", "owner": "platform-team"},
}


@pytest.fixture(scope="module")
def upgrade_kube():
    from agentfn.devstack.harness.apiserver import KubeAPI, build

    api = KubeAPI()
    try:
        api.start(build())
        others = [
            for_1_20(yaml.load((SCHEMAS / name).read_text(), Loader=Loader)) for name in sorted(set(CRD_FILES.values()))
        ]
        api.kubectl("apply", "--server-side", "--validate=false", "-f", "-", input=yaml.safe_dump_all(others))
        yield api
    finally:
        api.stop()


def add_owner(crd: dict) -> None:
    """Release N+1's schema change: Agents get an owner, shown by `kubectl get agents`."""
    if crd["spec"]["names"]["kind"] != "Agent":
        return
    [version] = crd["spec"]["versions"]
    version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["owner"] = {
        "type": "string",
        "maxLength": 63,
        "description": "The team that answers for the agent.",
    }
    version["additionalPrinterColumns"].insert(1, {"name": "Owner", "type": "string", "jsonPath": ".spec.owner"})


def release(tmp_path: Path, version: str, change=lambda crd: None) -> Path:
    """A copy of the chart at `version` for the 1.20 server, its CRDs changed by `change`."""
    target = tmp_path / f"agentfn-{version}"
    shutil.copytree(CHART, target)  # symlinks followed: files/policies and files/tools become plain files
    chart = yaml.safe_load((target / "Chart.yaml").read_text())
    chart["version"] = version
    chart.pop("kubeVersion")
    (target / "Chart.yaml").write_text(yaml.safe_dump(chart))
    for path in (target / "files" / "crds").glob("*.yaml"):
        crd = for_1_20(yaml.load(path.read_text(), Loader=Loader))
        change(crd)
        path.write_text(yaml.safe_dump(crd))
    return target


def specs(upgrade_kube) -> dict[str, dict]:
    """Every Agent's and ToolGrant's spec, by kind/name."""
    items = json.loads(upgrade_kube.kubectl("-n", NAMESPACE, "get", "agents,toolgrants", "-o", "json").stdout)["items"]
    return {f"{o['kind']}/{o['metadata']['name']}": o["spec"] for o in items}


def crd_version(upgrade_kube) -> str:
    crd = json.loads(upgrade_kube.kubectl("get", "crd", "agents.agentfn.dev", "-o", "json").stdout)
    return crd["metadata"]["annotations"]["agentfn.dev/crd-version"]


def table(upgrade_kube) -> str:
    shown = upgrade_kube.kubectl("-n", NAMESPACE, "get", "agents").stdout
    print(shown)  # what an operator sees (run with -s)
    return shown


def keys(upgrade_kube) -> dict[str, str]:
    """The keys the chart makes once: approval tokens' and subject_hash's (base64, as the Secrets hold them)."""
    return {
        name: json.loads(upgrade_kube.kubectl("-n", NAMESPACE, "get", "secret", name, "-o", "json").stdout)["data"]["key"]
        for name in ("agentfn-model-approval-key", "agentfn-subject-hash-key")
    }


def test_crds_upgrade_and_roll_back_with_the_release_and_outlive_it(upgrade_kube, tmp_path):
    at = ("--kubeconfig", str(upgrade_kube.kubeconfig), "-n", NAMESPACE)
    n, n1 = release(tmp_path, "0.1.0"), release(tmp_path, "0.1.1", add_owner)
    helm("install", "agentfn", str(n), *at, "--create-namespace")
    assert crd_version(upgrade_kube) == "0.1.0"
    made = keys(upgrade_kube)
    upgrade_kube.kubectl("apply", *[f"--filename={p}" for p in EXAMPLES])
    before = specs(upgrade_kube)
    assert len(before) >= 4 and {k.split("/")[0] for k in before} == {"Agent", "ToolGrant"}
    # On N the server prunes what the CRD lacks: what a stale CRD does to every object using a new field.
    upgrade_kube.kubectl("apply", "--validate=false", "-f", "-", input=json.dumps(OWNED))
    assert "owner" not in specs(upgrade_kube)["Agent/owned"]
    assert "OWNER" not in table(upgrade_kube)

    helm("upgrade", "agentfn", str(n1), *at)
    assert crd_version(upgrade_kube) == "0.1.1"
    assert keys(upgrade_kube) == made  # kept (lookup): a new key would void approvals and name everyone anew
    assert {k: v for k, v in specs(upgrade_kube).items() if k != "Agent/owned"} == before
    upgrade_kube.published("agents.spec.owner")  # kubectl validates against the OpenAPI the server republishes
    upgrade_kube.kubectl("apply", "-f", "-", input=json.dumps(OWNED))
    assert specs(upgrade_kube)["Agent/owned"]["owner"] == "platform-team"
    shown = table(upgrade_kube)
    assert shown.splitlines()[0].split()[:3] == ["NAME", "TIER", "OWNER"]
    assert re.search(r"^owned\s+fast\s+platform-team\s", shown, re.M), shown

    helm("rollback", "agentfn", "1", *at)
    assert crd_version(upgrade_kube) == "0.1.0"
    after = specs(upgrade_kube)
    assert {k: v for k, v in after.items() if k != "Agent/owned"} == before
    assert after["Agent/owned"]["brief"] == OWNED["spec"]["brief"]  # kept; its owner is hidden by N's schema
    assert "OWNER" not in table(upgrade_kube)
    helm("upgrade", "agentfn", str(n1), *at)  # forward again: the owner was hidden, not lost
    assert specs(upgrade_kube)["Agent/owned"]["owner"] == "platform-team"
    assert {k: v for k, v in specs(upgrade_kube).items() if k != "Agent/owned"} == before

    done = helm("uninstall", "agentfn", *at)
    assert re.search(r"kept due to the resource policy", done.stdout + done.stderr), done.stdout
    assert upgrade_kube.kubectl("get", "crd", "agents.agentfn.dev", "toolgrants.agentfn.dev").returncode == 0
    kept = specs(upgrade_kube)
    assert kept["Agent/owned"]["owner"] == "platform-team" and len(kept) == len(after)

    # Values that say otherwise: crds.keep false, and uninstalling takes the CRDs and every object with them.
    helm("install", "agentfn", str(n), *at, "--set", "crds.keep=false")
    assert specs(upgrade_kube).keys() == kept.keys()  # the kept CRDs are the release's again, objects untouched
    helm("uninstall", "agentfn", *at)
    upgrade_kube.kubectl("wait", "--for=delete", "--timeout=60s", "crd/agents.agentfn.dev", "crd/toolgrants.agentfn.dev")
    assert upgrade_kube.kubectl("get", "crd", "agents.agentfn.dev", check=False).returncode != 0


@pytest.mark.parametrize(
    "sets, kept, crds",
    [
        ((), True, 2),
        (("crds.keep=false",), False, 2),
        (("crds.install=false",), None, 0),
    ],
    ids=["defaults", "not kept", "not installed"],
)
def test_the_crds_render_with_their_version_and_resource_policy(sets, kept, crds):
    rendered = objects("default", "CustomResourceDefinition", sets)
    assert len(rendered) == crds
    for crd in rendered:
        annotations = crd["metadata"]["annotations"]
        assert annotations["agentfn.dev/crd-version"] == yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
        assert ("helm.sh/resource-policy" in annotations) == kept
        assert annotations.get("helm.sh/resource-policy", "keep") == "keep"
    source = [yaml.load(p.read_text(), Loader=Loader) for p in (CHART / "files" / "crds").glob("*.yaml")]
    assert {c["metadata"]["name"]: c["spec"] for c in rendered} == (
        {c["metadata"]["name"]: c["spec"] for c in source} if crds else {}
    )


def test_the_chart_and_its_crds_carry_the_projects_version():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (project, project)
    for crd in objects("default", "CustomResourceDefinition"):
        assert crd["metadata"]["annotations"]["agentfn.dev/crd-version"] == project
