"""How the CLI draws what the doors answer: tables of entries, agents, tools and grants; a turn's pieces.

What the platform relays is drawn as Rich `Text`, never as markup: a note, a tool's name or a model's answer
with `[/]` in it is shown as written (its control characters were taken out as it was read: client.printable).
A call (a step's card, the approval prompt, a tool's name anywhere) is drawn with its format characters escaped
(client.escaped): what the person approves reads as what runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from rich.console import Group
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .client import escaped

ID_PREFIX = 8  # characters of an entry id shown; any unambiguous prefix is accepted back
SUMMARY = 160  # characters of a tool's result shown on its card


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def tool_name(event: dict) -> str:
    """A step's tool as a card and a prompt name it."""
    return escaped(str(event.get("tool", "?")))


def short(value: Any, width: int = SUMMARY) -> str:
    text = " ".join(as_text(value).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def entries(found: Iterable[dict]) -> Table:
    table = Table(show_edge=False, header_style="bold")
    for column in ("id", "kind", "text", "source", "updated"):
        table.add_column(column, overflow="fold")
    for e in found:
        table.add_row(
            *cells(
                e["id"][:ID_PREFIX],
                e["kind"],
                e["text"],
                e.get("source") or "",
                (e.get("updated_at") or e.get("created_at") or "")[:19].replace("T", " "),
            )
        )
    return table


def cells(*values: Any) -> list[Text]:
    """A table row's cells as text (a str cell would be read as markup)."""
    return [Text(str(v)) for v in values]


def entry(e: dict, title: str) -> Panel:
    return Panel(
        Text(e["text"]),
        title=Text(f"{title} {e['id']}"),
        subtitle=Text(f"{e['kind']} · {e.get('source') or ''}".rstrip(" ·")),
        title_align="left",
        subtitle_align="right",
    )


def kinds(counted: dict[str, int]) -> str:
    """ "2 facts, 1 preference, 0 episodes"."""
    return ", ".join(plural(n, kind) for kind, n in counted.items())


def receipt(r: dict) -> Text:
    """What forgetting everything deleted, by kind, and when; then what stays of the person, and why."""
    total = f"{r['total']} {'entry' if r['total'] == 1 else 'entries'}"
    shown = Text.assemble(f"forgot {total}: {kinds(r['deleted'])}", (f"  at {r['at'][:19].replace('T', ' ')} UTC", "dim"))
    if r.get("stays"):
        shown.append("\nwhat stays (no text of yours):")
        for item in r["stays"]:
            shown.append(f"\n  {item['record']}: {item['holds']}")
            shown.append(f"\n    why: {item['why']}; until: {item['until']}", "dim")
    return shown


def agents(found: Iterable[dict]) -> Group:
    """One block per agent, so that it reads at 80 columns: the name, tier and memory; the brief; tools; limits.
    Continuation lines are indented: the first word of an unindented line is always an agent's name."""
    blocks: list[Any] = []
    for a in found:
        limits = a.get("limits") or {}
        if blocks:
            blocks.append(Text())
        blocks.append(Text.assemble((a["name"], "bold"), (f"  {a['tier']} tier · memory: {a['memory']}", "dim")))
        rows = Table.grid(padding=(0, 2))
        rows.add_column(style="dim", no_wrap=True)
        rows.add_column()
        rows.add_row(Text("brief"), Text(a["brief"]))
        rows.add_row(Text("tools"), Text(escaped(", ".join(a["tools"]))))
        rows.add_row(
            Text("limits"),
            Text(
                f"{plural(limits.get('steps', 0), 'step')}, {limits.get('tokensPerTurn', '')} tokens and "
                f"{limits.get('deadlineSeconds', '')} s a turn"
            ),
        )
        blocks.append(Padding(rows, (0, 0, 0, 2)))
    return Group(*blocks)


def tools(found: Iterable[dict]) -> Table:
    table = Table(show_edge=False, header_style="bold")
    for column in ("tool", "description", "arguments"):
        table.add_column(column, overflow="fold")
    for t in found:
        properties = (t.get("input_schema") or {}).get("properties") or {}
        required = set((t.get("input_schema") or {}).get("required") or [])
        table.add_row(
            *cells(
                escaped(t["name"]),
                t.get("description", ""),
                escaped(", ".join(f"{k}{'' if k in required else '?'}" for k in properties)),
            )
        )
    return table


def grants(header: Iterable[str], found: Iterable[Iterable[str]]) -> Table:
    table = Table(show_edge=False, header_style="bold")
    for column in header:
        table.add_column(column.lower(), overflow="fold")
    for row in found:
        table.add_row(*cells(*row))
    return table


STATUS_STYLE = {
    "started": "yellow",
    "ok": "green",
    "error": "red",
    "needs_approval": "magenta",
    "declined": "red",
    "repeat": "dim",
}
NOT_RUN = {"needs_approval": "needs your approval", "declined": "declined", "repeat": "a repeat: not run again"}


def step(event: dict) -> Panel:
    """A tool step as a card: name, arguments, status (started -> ok/error), time, a short result. Everything of the
    call on it is `escaped`: a format character shows as its escape."""
    status = event.get("status", "")
    arguments = event.get("arguments", {})
    if status == "needs_approval":  # the person approves exactly these arguments: shown whole
        shown = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False, indent=2)
        lines = [Text("arguments", style="dim"), Text(escaped(shown))]
        note = event.get("note")
        if isinstance(note, dict):  # forget: the note it deletes, beside its id
            said = f"{note.get('kind') or 'note'}: {note.get('text', '')}"
            lines.append(Text.assemble(("note      ", "dim"), escaped(said)))
    else:
        lines = [Text.assemble(("arguments ", "dim"), short(escaped(as_text(arguments))))]
    flow = Text.assemble(("status    ", "dim"), ("started", STATUS_STYLE["started"]))
    if status in NOT_RUN:
        flow = Text.assemble(("status    ", "dim"), (NOT_RUN[status], STATUS_STYLE[status]))
        if status == "repeat":
            flow.append(f" (the result of step {event.get('repeat_of', '?')})", "dim")
    elif status != "started":
        flow.append(" -> ")
        flow.append(status, STATUS_STYLE.get(status, ""))
        flow.append(f"  {event.get('ms', 0):g} ms", "dim")
    lines.append(flow)
    if "result" in event:
        result = event["result"]
        if status == "error" and isinstance(result, dict) and "title" in result:
            result = f"{result['title']}: {result.get('detail', '')}".rstrip(": ")
        lines.append(Text.assemble(("result    ", "dim"), short(escaped(as_text(result)))))
    return Panel(
        Group(*lines),
        title=Text.assemble(f"step {event.get('n', '?')} · ", (tool_name(event), "bold")),
        title_align="left",
        border_style=STATUS_STYLE.get(status, ""),
        expand=False,
    )


def recalled(found: list[dict], cited: Iterable[str]) -> Table:
    """The entries recalled for the turn, the ones the answer cites marked ✓."""
    cited = set(cited)
    table = Table(title="recalled", title_justify="left", title_style="dim", show_edge=False, header_style="dim")
    for column in ("", "id", "kind", "text", "similarity"):
        table.add_column(column, overflow="fold")
    for e in found:
        similarity = e.get("similarity")
        table.add_row(
            *cells(
                "✓" if e["id"] in cited else "",
                e["id"][:ID_PREFIX],
                e["kind"] + (f" {e['date']}" if e.get("date") else ""),
                short(e["text"], 200),
                f"{similarity:.2f}" if isinstance(similarity, int | float) else "",
            )
        )
    return table


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def done(event: dict) -> Text:
    usage, timing = event.get("usage") or {}, event.get("timing") or {}
    parts = [
        f"{usage.get('tokens_in', 0)} in / {usage.get('tokens_out', 0)} out tokens",
        plural(usage.get("rounds", 0), "round"),
        plural(event.get("steps", 0), "step"),
        f"{timing.get('ms', 0) / 1000:.2f} s (engine {timing.get('engine_ms', 0) / 1000:.2f} s, "
        f"tools {timing.get('tools_ms', 0) / 1000:.2f} s)",
        f"generation {event.get('generation_id', '?')}",
    ]
    return Text(" · ".join(parts), style="dim")
