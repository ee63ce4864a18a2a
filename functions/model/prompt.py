"""What the model is shown: the agent's brief, the tools (in constrained mode), the recalled notes with
their ids and the instruction to cite them (M4); and what comes back: which recalled ids the answer cites.
"""

from __future__ import annotations

import json
from typing import Any

CHARS_PER_TOKEN = 3  # conservative for English and Croatian text: estimates err towards holding more
MEMORY_KINDS = {"preferences": ["preference", "episode"], "facts": ["fact", "preference", "episode"]}


def estimate(value: Any) -> int:
    """Tokens a prompt or a text will cost, before the engine says; errs high."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=lambda o: o.__dict__)
    return len(text) // CHARS_PER_TOKEN + 8


def memory_block(recalled: list[dict[str, Any]]) -> str:
    lines = ["What you remember about this person (their own notes):"]
    for entry in recalled:
        when = f", {entry['date']}" if entry.get("kind") == "episode" and entry.get("date") else ""
        lines.append(f"[{entry['id']}] {entry['kind']}{when}: {entry['text']}")
    lines.append(f"When your answer uses one of these notes, cite it by writing its id in square brackets, "
                 f"like [{recalled[0]['id']}]. Cite only these ids.")
    return "\n".join(lines)


def system(brief: str, today: str, *, tools: list, constrained: bool, recalled: list[dict], memory_tools: bool) -> str:
    parts = [brief.strip(), f"Today is {today}."]
    if tools and constrained:
        listing = "\n".join(f"- {t.name}: {t.description} Arguments: {json.dumps(t.input_schema, separators=(',', ':'))}"
                            for t in tools)
        parts.append(f"Tools you may call:\n{listing}\nReply with one JSON object: "
                     '{"tool": NAME, "arguments": {...}} to call a tool, or {"answer": "..."} to answer the person.')
    elif constrained:
        parts.append('Reply with one JSON object: {"answer": "..."}.')
    if recalled:
        parts.append(memory_block(recalled))
    if memory_tools:
        parts.append("Keep a note (remember) or forget one (forget, by the id it is shown with) only when the person "
                     "asks you to.")
    return "\n\n".join(parts)


def fit(messages: list[dict[str, str]], tokens: int) -> list[dict[str, str]]:
    """The newest messages that fit in `tokens` (the last one always: the route refused it if it cannot fit)."""
    kept, used = [], 0
    for message in reversed(messages):
        cost = estimate(message["content"]) + 4
        if kept and used + cost > tokens:
            break
        kept.append(message)
        used += cost
    kept.reverse()
    while kept and kept[0]["role"] != "user" and len(kept) > 1:  # a conversation the engine reads starts with the person
        kept.pop(0)
    return kept


def cited(answer: str, recalled_ids: list[str]) -> list[str]:
    """The recalled ids the answer names, in the order it first names them; never an id not recalled."""
    lowered = answer.lower()
    found = [(lowered.find(i.lower()), i) for i in recalled_ids]
    return [i for position, i in sorted(found) if position >= 0]

