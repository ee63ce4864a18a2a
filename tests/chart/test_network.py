"""The policy matrix, proven by a real analyser: network-config-analyzer (nca) reads the chart's rendered
NetworkPolicies plus the operator's own (written for a sample registry by the operator's code) over the
pods the chart runs and the world around them, and every expected allow and deny is asserted.

The table in docs/deploying.md is this module's MATRIX, rendered by `matrix_markdown()`; a test keeps the two equal.
"""

from __future__ import annotations

import pytest
from support.chart import NAMESPACE, ROOT, objects
from support.network import ADDRESSES, allowed, cluster_pods, connectivity, run_nca

from agentfn.operator.config import Config
from agentfn.operator.network import policy

# The chart as a cluster would run it: the caller token issuer in namespace `auth`.
SETS = ("identityEgress.namespaces[0]=auth",)
# A sample registry: grants use platform_status and list_models only.
GRANTED = ["platform_status", "list_models"]

A, D = True, False
# (source, destination, port, protocol, expected, why)
MATRIX = [
    ("gateway-system/gateway", "agentfn/memory", 8012, "TCP", A, "public door (queue-proxy)"),
    ("gateway-system/gateway", "agentfn/model", 8012, "TCP", A, "public door (queue-proxy)"),
    ("gateway-system/gateway", "agentfn/memory", 8080, "TCP", D, "only the queue-proxy port"),
    ("gateway-system/gateway", "agentfn/page", 8012, "TCP", D, "internal function"),
    ("gateway-system/gateway", "agentfn/run-code", 8012, "TCP", D, "internal function"),
    ("gateway-system/gateway", "agentfn/platform-status", 8012, "TCP", D, "internal function"),
    ("gateway-system/gateway", "agentfn/postgres", 5432, "TCP", D, "database"),
    ("knative-serving/activator", "agentfn/memory", 8012, "TCP", A, "scale from zero"),
    ("knative-serving/activator", "agentfn/model", 8012, "TCP", A, "scale from zero"),
    ("knative-serving/activator", "agentfn/page", 8012, "TCP", A, "scale from zero"),
    ("knative-serving/activator", "agentfn/platform-status", 8012, "TCP", A, "scale from zero"),
    ("knative-serving/activator", "agentfn/list-models", 8012, "TCP", A, "scale from zero"),
    ("knative-serving/activator", "agentfn/radar-latest", 8012, "TCP", A, "scale from zero"),
    ("knative-serving/activator", "agentfn/run-code", 8012, "TCP", A, "scale from zero"),
    ("knative-serving/activator", "agentfn/memory", 9090, "TCP", A, "autoscaler metrics"),
    ("knative-serving/activator", "agentfn/postgres", 5432, "TCP", D, "database"),
    ("tenant/tenant", "agentfn/memory", 8012, "TCP", D, "another namespace"),
    ("tenant/tenant", "agentfn/model", 8012, "TCP", D, "another namespace"),
    ("tenant/tenant", "agentfn/run-code", 8012, "TCP", D, "another namespace"),
    ("agentfn/stranger", "agentfn/memory", 8012, "TCP", D, "default deny, same namespace"),
    ("agentfn/stranger", "agentfn/postgres", 5432, "TCP", D, "default deny, same namespace"),
    ("agentfn/stranger", "internet", 443, "TCP", D, "default deny"),
    ("agentfn/test-probe", "gateway-system/gateway", 443, "TCP", A, "helm test: GET /v1/agents through the gateway"),
    ("agentfn/test-probe", "knative-serving/activator", 8012, "TCP", A, "helm test: a function's Service, at zero"),
    ("agentfn/test-probe", "agentfn/memory", 8012, "TCP", D, "helm test: no function's pods directly"),
    ("agentfn/test-probe", "agentfn/page", 8012, "TCP", D, "helm test: an internal function"),
    ("agentfn/test-probe", "agentfn/run-code", 8012, "TCP", D, "helm test: an internal function"),
    ("agentfn/test-probe", "agentfn/postgres", 5432, "TCP", D, "helm test: no database"),
    ("agentfn/test-probe", "internet", 443, "TCP", D, "helm test: no web"),
    ("agentfn/model", "agentfn/memory", 8012, "TCP", A, "recall, remember, WriteEpisode"),
    ("agentfn/model", "agentfn/page", 8012, "TCP", A, "open_page"),
    ("agentfn/model", "agentfn/platform-status", 8012, "TCP", A, "granted tool (operator's policy)"),
    ("agentfn/model", "agentfn/list-models", 8012, "TCP", A, "granted tool (operator's policy)"),
    ("agentfn/model", "agentfn/radar-latest", 8012, "TCP", D, "no grant uses it"),
    ("agentfn/model", "agentfn/run-code", 8012, "TCP", D, "no grant uses it"),
    ("agentfn/model", "agentfn-engines/engine", 8000, "TCP", A, "its engines"),
    ("agentfn/model", "agentfn/postgres", 5432, "TCP", A, "its schema"),
    ("agentfn/model", "auth/issuer", 443, "TCP", A, "caller token keys, token exchange"),
    ("agentfn/model", "kube-system/kube-dns", 53, "UDP", A, "DNS"),
    ("agentfn/model", "internet", 443, "TCP", D, "no web of its own"),
    ("agentfn/model", "metadata", 80, "TCP", D, "cloud metadata"),
    ("agentfn/model", "api-server", 443, "TCP", D, "no API access"),
    ("agentfn/memory", "agentfn/postgres", 5432, "TCP", A, "its schema"),
    ("agentfn/memory", "api-server", 443, "TCP", A, "the cluster's JWKS"),
    ("agentfn/memory", "auth/issuer", 443, "TCP", A, "caller token keys"),
    ("agentfn/memory", "agentfn/model", 8012, "TCP", D, "never calls back"),
    ("agentfn/memory", "agentfn/page", 8012, "TCP", D, "no other function"),
    ("agentfn/memory", "internet", 443, "TCP", D, "no web"),
    ("agentfn/memory", "metadata", 80, "TCP", D, "cloud metadata"),
    ("agentfn/page", "internet", 443, "TCP", A, "public web, https"),
    ("agentfn/page", "internet", 80, "TCP", A, "public web, http"),
    ("agentfn/page", "internet-v6", 443, "TCP", A, "public web over IPv6"),
    ("agentfn/page", "internet", 22, "TCP", D, "ports 80 and 443 only"),
    ("agentfn/page", "metadata", 80, "TCP", D, "cloud metadata 169.254.169.254"),
    ("agentfn/page", "wireserver", 80, "TCP", D, "Azure WireServer, a public address inside the cloud"),
    ("agentfn/page", "private", 80, "TCP", D, "private 10/8"),
    ("agentfn/page", "cgnat", 80, "TCP", D, "CGNAT 100.64/10"),
    ("agentfn/page", "unique-local-v6", 80, "TCP", D, "IPv6 unique local"),
    ("agentfn/page", "api-server", 443, "TCP", D, "the API server"),
    ("agentfn/page", "agentfn/memory", 8012, "TCP", D, "cannot read memory"),
    ("agentfn/page", "platform/platform-service", 80, "TCP", D, "no platform service"),
    ("agentfn/page", "agentfn/postgres", 5432, "TCP", A, "its schema"),
    ("agentfn/run-code", "internet", 443, "TCP", D, "no web"),
    ("agentfn/run-code", "metadata", 80, "TCP", D, "cloud metadata"),
    ("agentfn/run-code", "private", 80, "TCP", D, "no private address"),
    ("agentfn/run-code", "agentfn/memory", 8012, "TCP", D, "no other function"),
    ("agentfn/run-code", "agentfn/model", 8012, "TCP", D, "no other function"),
    ("agentfn/run-code", "platform/platform-service", 80, "TCP", D, "no platform service"),
    ("agentfn/run-code", "agentfn-engines/engine", 8000, "TCP", D, "no engine"),
    ("agentfn/run-code", "api-server", 443, "TCP", D, "no API access"),
    ("agentfn/run-code", "agentfn/postgres", 5432, "TCP", A, "its schema (daily runs)"),
    ("agentfn/run-code", "auth/issuer", 443, "TCP", A, "caller token keys"),
    ("agentfn/platform-status", "platform/platform-service", 443, "TCP", A, "its upstream, as the caller"),
    ("agentfn/platform-status", "auth/issuer", 443, "TCP", A, "caller token keys, token exchange"),
    ("agentfn/platform-status", "internet", 443, "TCP", D, "no web"),
    ("agentfn/platform-status", "metadata", 80, "TCP", D, "cloud metadata"),
    ("agentfn/platform-status", "agentfn/postgres", 5432, "TCP", D, "owns no schema"),
    ("agentfn/platform-status", "agentfn/memory", 8012, "TCP", D, "no other function"),
    ("agentfn/radar-latest", "platform/platform-service", 80, "TCP", A, "its upstream, as the caller"),
    ("agentfn/operator", "api-server", 443, "TCP", A, "watches Agents, ToolGrants"),
    ("agentfn/operator", "agentfn/postgres", 5432, "TCP", D, "owns no schema"),
    ("agentfn/operator", "internet", 443, "TCP", D, "no web"),
    ("agentfn/operator", "agentfn/memory", 8012, "TCP", D, "no function"),
    ("cnpg-system/cnpg-operator", "agentfn/postgres", 8000, "TCP", A, "instance status"),
    ("cnpg-system/cnpg-operator", "agentfn/postgres", 5432, "TCP", D, "no SQL"),
    ("agentfn/postgres-replica", "agentfn/postgres", 5432, "TCP", A, "replication"),
    ("agentfn/postgres", "internet", 443, "TCP", D, "no web"),
]


def policies(granted: list[str]) -> list[dict]:
    operator = policy(Config(namespace=NAMESPACE, function_prefix="agentfn-"), granted)
    return objects("default", "NetworkPolicy", SETS) + [operator]


@pytest.fixture(scope="module")
def edges(tmp_path_factory):
    return connectivity(tmp_path_factory.mktemp("nca"), policies(GRANTED), cluster_pods())


@pytest.mark.parametrize(
    "source, destination, port, protocol, expected, why",
    MATRIX,
    ids=[f"{r[0].split('/')[-1]}->{r[1].split('/')[-1]}:{r[2]}" for r in MATRIX],
)
def test_policy_matrix(edges, source, destination, port, protocol, expected, why):
    assert allowed(edges, source, destination, port, protocol) is expected, why


def test_the_matrix_reader_bites(edges):
    assert allowed(edges, "agentfn/page", "internet", 443)
    assert not allowed(edges, "agentfn/page", "internet", 443, "UDP")
    assert not allowed(edges, "agentfn/page", "agentfn/page", 443)
    assert allowed(edges, "agentfn/model", "kube-system/kube-dns", 53, "TCP")


@pytest.mark.parametrize(
    "granted, reachable",
    [
        ([], set()),
        (["run_code"], {"run-code"}),
        (
            ["platform_status", "list_models", "radar_latest", "run_code"],
            {"platform-status", "list-models", "radar-latest", "run-code"},
        ),
    ],
    ids=["no grants", "run_code only", "every tool"],
)
def test_the_model_reaches_exactly_the_tools_some_grant_uses(tmp_path, granted, reachable):
    edges = connectivity(tmp_path, policies(granted), cluster_pods())
    tools = {"platform-status", "list-models", "radar-latest", "run-code"}
    assert {t for t in tools if allowed(edges, "agentfn/model", f"agentfn/{t}", 8012)} == reachable


def test_without_the_policies_everything_is_open(tmp_path):
    """The analyser's baseline: with no policy at all every row above would be an allow, so the denies are the policies'."""
    edges = connectivity(
        tmp_path,
        [
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {"name": "noop", "namespace": "tenant"},
                "spec": {"podSelector": {"matchLabels": {"none": "none"}}, "policyTypes": ["Ingress"]},
            }
        ],
        cluster_pods(),
    )
    assert all(allowed(edges, s, d, p, proto) for s, d, p, proto, *_ in MATRIX)


def test_nca_forbids_the_metadata_address_to_every_agentfn_pod(tmp_path):
    """The same question asked the analyser's own way: a policy naming the forbidden connection, checked
    with --forbids against the chart's policies (and with --permits, a path that must stay open)."""
    forbidden = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "no-metadata", "namespace": NAMESPACE},
        "spec": {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [{"to": [{"ipBlock": {"cidr": "169.254.169.254/32"}}]}],
        },
    }
    permitted = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "page-web", "namespace": NAMESPACE},
        "spec": {
            "podSelector": {"matchLabels": {"serving.knative.dev/service": "agentfn-page"}},
            "policyTypes": ["Egress"],
            "egress": [{"to": [{"ipBlock": {"cidr": "93.184.215.0/24"}}], "ports": [{"port": 443}]}],
        },
    }
    base = policies(GRANTED)
    import yaml

    for name, query, spec, holds in (
        ("forbids", "--forbids", forbidden, True),
        ("permits", "--permits", permitted, True),
        ("forbids-web", "--forbids", {**permitted, "metadata": {"name": "x", "namespace": NAMESPACE}}, False),
    ):
        directory = tmp_path / name
        directory.mkdir()
        (directory / "query.yaml").write_text(yaml.safe_dump(spec))
        done = run_nca(
            directory,
            base,
            cluster_pods(),
            query,
            str(directory / "query.yaml"),
            "--base_np_list",
            str(directory / "np.yaml"),
        )
        assert done.returncode == (0 if holds else 1), (name, done.stdout, done.stderr)


def matrix_markdown() -> str:
    rows = ["| from | to | port | verdict | why |", "|---|---|---|---|---|"]
    for source, destination, port, protocol, expected, why in MATRIX:
        target = f"{destination} ({ADDRESSES[destination]})" if destination in ADDRESSES else destination
        rows.append(f"| {source} | {target} | {port}/{protocol} | {'allow' if expected else 'deny'} | {why} |")
    return "\n".join(rows) + "\n"


def test_the_deployment_docs_show_this_matrix(tmp_path):
    table = matrix_markdown()
    (ROOT / "var").mkdir(exist_ok=True)
    (ROOT / "var" / "policy-matrix.md").write_text(table)
    print(table)  # shown with -s, for pasting
    assert table in (ROOT / "docs" / "deploying.md").read_text()
