"""The banner `agentfn up` prints once every door answers: where each door is, how to get a token and chat, the
engine, and the stack's resident memory (proportional, per part, read from /proc)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from . import images
from .parts import BIN, HOST, PORTS, TOUR, Part
from .pods import container_name, in_container

if TYPE_CHECKING:
    from agentfn.devstack import weights

    from .postgres import EmbeddedPostgres


def resident(parts: list[Part], postgres: EmbeddedPostgres, from_images: bool) -> dict[str, int]:
    """Proportional resident memory (PSS, shared pages split) of each part's processes, and Postgres's."""
    pids = {part.name: part.process.pid for part in parts if part.process}
    for part in (part for part in parts if in_container(part, from_images)):  # its processes are the container's
        pids[part.name] = images.pid(container_name(part)) or pids[part.name]
    if postgres.pid():
        pids["postgres"] = postgres.pid()
    return {name: sum(pss(p) for p in process_tree(pid)) for name, pid in pids.items()}


def show(
    console: Console,
    memory: dict[str, int],
    *,
    since: float,
    model: weights.Model | None,
    warming: bool,
    from_images: bool,
    var: Path,
) -> None:
    """The banner; `since` is when the stack began starting, `warming` whether the engine's prompt cache still is."""
    gateway = f"http://{HOST}:{PORTS['gateway']}"
    biggest = ", ".join(f"{name} {size / 2**20:.0f}" for name, size in sorted(memory.items(), key=lambda kv: -kv[1])[:5])
    agentfn = os.path.relpath(BIN / "agentfn") if (BIN / "agentfn").is_relative_to(Path.cwd()) else BIN / "agentfn"
    console.rule(f"[bold]agentfn is up[/] in {time.monotonic() - since:.1f} s")
    for name, value in (
        (
            "gateway",
            f"{gateway}   (the public doors: /v1/entries, /v1/recall, /v1/agents, /v1/tools, /mcp; "
            "/v1/admin for the group platform-admins)",
        ),
        ("workbench", f"{gateway}/   (in a browser: sign in at the dev issuer's page, as anyone)"),
        ("token", f"export AGENTFN_TOKEN=$({agentfn} token {TOUR[0]} --groups {TOUR[1]})"),
        ("chat", f"{agentfn} chat code-reviewer"),
        (
            "engine",
            f"{model.alias} offline on llama.cpp (AGENTFN_ENGINE_MODEL={model.name})"
            + (
                "; reading each agent's system prompt once (a turn meanwhile waits for it, and is told so)"
                if warming
                else ""
            )
            if model
            else f"{os.environ.get('AGENTFN_TIER_FAST_MODEL', 'default')} at {os.environ['AGENTFN_TIER_FAST_URL']}",
        ),
        ("memory", f"{sum(memory.values()) / 2**20:.0f} MiB resident (MiB: {biggest}, ...)"),
        *(
            [("images", "each function and the operator from its image (agentfn images), as the chart runs them")]
            if from_images
            else []
        ),
        ("data", f"{var}   logs: {var / 'logs'}   agents: examples/ (edit to update)"),
        ("stop", "Ctrl-C"),
    ):
        console.print(f"{name:10} {value}", soft_wrap=True, highlight=False)


def process_tree(root: int) -> list[int]:
    """`root` and every descendant, from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    return tree


def pss(pid: int) -> int:
    """Bytes of proportional set size of one process (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
