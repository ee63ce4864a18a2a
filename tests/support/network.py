"""The pods and namespaces the chart runs among, and network-config-analyzer's reading of the policies.

nca computes the connectivity a set of NetworkPolicies allows over a pod list and a namespace list;
`connectivity()` runs it once and returns every allowed (source, destination) with its connections.
Function pods carry the label Knative puts on them (serving.knative.dev/service).
"""

from __future__ import annotations

import ipaddress
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

NCA = Path(sys.executable).parent / "nca"
# The outside world, as addresses: the analyser reports ranges, a row names one address in them.
ADDRESSES = {
    "internet": "93.184.215.14",
    "internet-v6": "2606:2800:21f:cb07:6820:80da:af6b:8b2c",
    "metadata": "169.254.169.254",
    "wireserver": "168.63.129.16",
    "private": "10.20.0.5",
    "cgnat": "100.64.1.1",
    "unique-local-v6": "fd00::1",
    "api-server": "10.96.0.1",
}


@dataclass(frozen=True)
class Pod:
    name: str
    namespace: str
    labels: dict[str, str]


def cluster_pods(prefix: str = "agentfn-") -> list[Pod]:
    ns = "agentfn"
    functions = ["memory", "page", "model", "platform-status", "list-models", "radar-latest", "run-code"]
    pods = [
        Pod(
            fn,
            ns,
            {
                "serving.knative.dev/service": prefix + fn,
                "serving.knative.dev/revision": f"{prefix}{fn}-00001",
                "app.kubernetes.io/name": "agentfn",
            },
        )
        for fn in functions
    ]
    return pods + [
        Pod(
            "operator",
            ns,
            {
                "app.kubernetes.io/name": "agentfn",
                "app.kubernetes.io/instance": "agentfn",
                "app.kubernetes.io/component": "operator",
            },
        ),
        Pod("postgres", ns, {"cnpg.io/cluster": f"{prefix}postgres", "cnpg.io/instanceRole": "primary"}),
        Pod("postgres-replica", ns, {"cnpg.io/cluster": f"{prefix}postgres", "cnpg.io/instanceRole": "replica"}),
        Pod("stranger", ns, {"app": "debug"}),
        Pod(
            "test-probe",
            ns,
            {
                "app.kubernetes.io/name": "agentfn",
                "app.kubernetes.io/instance": "agentfn",
                "app.kubernetes.io/component": "test",
            },
        ),  # `helm test`'s pod
        Pod("gateway", "gateway-system", {"app": "gateway"}),
        Pod("activator", "knative-serving", {"app": "activator"}),
        Pod("kube-dns", "kube-system", {"k8s-app": "kube-dns"}),
        Pod("platform-service", "platform", {"app": "arena-status"}),
        Pod("engine", "agentfn-engines", {"app": "engine-fast"}),
        Pod("cnpg-operator", "cnpg-system", {"app.kubernetes.io/name": "cloudnative-pg"}),
        Pod("issuer", "auth", {"app": "issuer"}),
        Pod("tenant", "tenant", {"app": "tenant"}),
    ]


def pod_list(pods: list[Pod]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PodList",
        "items": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": p.name, "namespace": p.namespace, "labels": p.labels},
                "spec": {"containers": [{"name": "c", "image": "x"}]},
                "status": {"podIP": "10.244.0.1"},
            }
            for p in pods
        ],
    }


def namespace_list(pods: list[Pod]) -> dict[str, Any]:
    names = sorted({p.namespace for p in pods})
    return {
        "apiVersion": "v1",
        "kind": "NamespaceList",
        "items": [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n, "labels": {"kubernetes.io/metadata.name": n}}}
            for n in names
        ],
    }


@dataclass(frozen=True)
class Edge:
    source: str
    destination: str  # "namespace/pod", or an address range "a-b" / a CIDR
    connections: str  # nca's text: "All connections" or {protocols:...,dst_ports:...} sets


def run_nca(directory: Path, policies: list[dict], pods: list[Pod], *query: str) -> subprocess.CompletedProcess:
    (directory / "np.yaml").write_text(yaml.safe_dump_all(policies))
    (directory / "pods.yaml").write_text(yaml.safe_dump(pod_list(pods)))
    (directory / "ns.yaml").write_text(yaml.safe_dump(namespace_list(pods)))
    return subprocess.run(
        [str(NCA), *query, "--pod_list", str(directory / "pods.yaml"), "--ns_list", str(directory / "ns.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=directory,
    )


LINE = re.compile(r"^(\S+) => (\S+) : (.+)$")


def connectivity(directory: Path, policies: list[dict], pods: list[Pod]) -> list[Edge]:
    done = run_nca(
        directory,
        policies,
        pods,
        "--connectivity",
        str(directory / "np.yaml"),
        "--output_format",
        "txt_no_fw_rules",
        "--print_ipv6",
    )
    if done.returncode != 0 and "=>" not in done.stdout:
        raise AssertionError(f"nca failed ({done.returncode}): {done.stdout}\n{done.stderr}")
    edges = []
    for line in done.stdout.splitlines():
        match = LINE.match(line.strip())
        if match:
            src, dst, conn = match.groups()
            edges.append(Edge(re.sub(r"\[Pod\]$", "", src), re.sub(r"\[Pod\]$", "", dst), conn))
    if not edges:
        raise AssertionError(f"nca reported no connection at all:\n{done.stdout}\n{done.stderr}")
    return edges


def in_range(address: str, text: str) -> bool:
    """Whether an address is in nca's destination text (ranges "a-b", CIDRs or single addresses)."""
    ip = ipaddress.ip_address(address)
    for part in text.split(","):
        try:
            if "/" in part:
                if ip in ipaddress.ip_network(part, strict=False):
                    return True
            elif "-" in part:
                low, high = (ipaddress.ip_address(x) for x in part.split("-", 1))
                if low.version == ip.version and low <= ip <= high:
                    return True
            elif ipaddress.ip_address(part) == ip:
                return True
        except ValueError:  # a pod ("namespace/name"), not an address
            continue
    return False


def allows(connections: str, protocol: str, port: int) -> bool:
    if connections.strip() == "All connections":
        return True
    for group in re.findall(r"\{([^}]*)\}", connections):
        fields = dict(
            re.findall(r"(protocols|dst_ports|src_ports):([^:]+?)(?=,(?:protocols|dst_ports|src_ports):|$)", group)
        )
        protocols = [p.strip() for p in fields.get("protocols", "TCP,UDP,SCTP").split(",")]
        if protocol not in protocols:
            continue
        ports = fields.get("dst_ports")
        if ports is None:
            return True
        for item in ports.split(","):
            low, _, high = item.partition("-")
            if int(low) <= port <= int(high or low):
                return True
    return False


def allowed(edges: list[Edge], source: str, destination: str, port: int, protocol: str = "TCP") -> bool:
    """Whether the analysed policies let source reach destination (a pod "ns/name", or a name of ADDRESSES)."""
    for edge in edges:
        if edge.source != source:
            continue
        if destination in ADDRESSES:
            if not in_range(ADDRESSES[destination], edge.destination):
                continue
        elif edge.destination != destination:
            continue
        if allows(edge.connections, protocol, port):
            return True
    return False
