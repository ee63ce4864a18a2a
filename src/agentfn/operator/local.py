"""Local mode: the operator's reconcile over YAML files, writing the registry file the dev stack reads.

    python -m agentfn.operator.local examples/ --out var/registry/registry.json [--watch]

The same `reconcile()` as in a cluster, so the dev stack and a cluster read agents the same way. The
file is replaced atomically and only when its bytes change (the model function reloads on change).
Each object's verdict is printed; the exit status is 1 when any object is invalid (the registry is
written all the same, without them). `--watch` rewrites whenever a file changes, until Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from . import catalog
from .config import Config
from .reconcile import API_VERSION, Reconciled, dumps, reconcile

KINDS = ("Agent", "ToolGrant")


def yaml_files(paths: list[Path]) -> list[Path]:
    found = []
    for path in paths:
        found += sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml")) if path.is_dir() else [path]
    return found


def read_objects(paths: list[Path]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The Agents and ToolGrants in the files, in file order; other kinds are skipped."""
    objects: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    for path in yaml_files(paths):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("apiVersion") == API_VERSION and doc.get("kind") in KINDS:
                objects[doc["kind"]].append(doc)
    return objects["Agent"], objects["ToolGrant"]


def write_if_changed(out: Path, text: str) -> bool:
    if out.exists() and out.read_text() == text:
        return False
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=out.parent, prefix=f".{out.name}.", delete=False) as f:
        f.write(text)
    os.replace(f.name, out)  # readers see the old file or the new one, never half of one
    return True


def run_once(paths: list[Path], out: Path, tools: catalog.Catalog) -> Reconciled:
    agents, grants = read_objects(paths)
    outcome = reconcile(tools, agents, grants)
    written = write_if_changed(out, dumps(outcome.registry))
    for v in outcome.verdicts:
        state = "Ready" if v.ready else "Invalid"
        print(f"{v.kind} {v.ref}: {state} ({v.reason}) {v.message}", file=sys.stderr if not v.ready else sys.stdout)
    print(f"registry {outcome.revision[:19]} {'written to' if written else 'unchanged in'} {out}")
    return outcome


def _stamp(paths: list[Path]) -> tuple:
    return tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in yaml_files(paths))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentfn.operator.local", description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="YAML files or folders of them (e.g. examples/)")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(Config.from_env().registry_file),
        help="the registry file (default: $AGENTFN_REGISTRY_FILE or var/registry/registry.json)",
    )
    parser.add_argument("--watch", action="store_true", help="rewrite whenever a file changes")
    parser.add_argument("--interval", type=float, default=0.5, help="--watch: seconds between looks")
    args = parser.parse_args(argv)
    tools = catalog.load()
    outcome = run_once(args.paths, args.out, tools)
    if not args.watch:
        return 0 if all(v.ready for v in outcome.verdicts) else 1
    stamp = _stamp(args.paths)
    try:
        while True:
            time.sleep(args.interval)
            now = _stamp(args.paths)
            if now != stamp:
                stamp = now
                try:
                    run_once(args.paths, args.out, tools)
                except (OSError, yaml.YAMLError) as e:  # a file caught half-saved: keep the last registry
                    print(f"not rewritten: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
