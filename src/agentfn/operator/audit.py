"""Audit: who may call what, from the registry, one row per agent, tool and channel.

    python -m agentfn.operator.audit [REGISTRY_FILE | -]     # default: $AGENTFN_REGISTRY_FILE
    kubectl get configmap agentfn-registry -o jsonpath='{.data.registry\\.json}' | python -m agentfn.operator.audit -

The rows are built in `agentfn.shared.grants` (its docstring says the columns), the code `agentfn audit` and
the model function's `GET /v1/admin/grants` use too. The same rows follow from `kubectl get agents,toolgrants`:
a Ready grant's Agents, Subjects, Groups, Channels, Daily and Approval columns.
"""

from __future__ import annotations

import argparse
import json
import sys

from agentfn.shared.grants import HEADER, Row, records, rows, table

from .config import Config

__all__ = ["HEADER", "Row", "main", "records", "rows", "table"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentfn.operator.audit", description=__doc__.split("\n")[0])
    parser.add_argument(
        "registry",
        nargs="?",
        default=Config.from_env().registry_file,
        help="the registry file, or - for standard input",
    )
    parser.add_argument("--json", action="store_true", help="rows as JSON objects")
    args = parser.parse_args(argv)
    text = sys.stdin.read() if args.registry == "-" else open(args.registry).read()
    found = rows(json.loads(text))
    if args.json:
        print(json.dumps(records(found), indent=2))
    else:
        print(table(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
