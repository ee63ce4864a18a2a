"""The step rules of a turn: what happens to each tool call the model asks for, before and after it runs.

Before a call runs: a call identical to one already made in the turn (same tool, same canonical arguments) is
not made again, the model is given the earlier result marked as already done; the memory tools (`remember`,
`forget`) at most once a turn; `forget` only an id shown in the turn; `open_page` only an offered URL
(offered.py); a tool that changes state, unless its grant waives approval, waits for the person's approval
(approvals.py), which ends the turn. The approvals a request carries run first, as the turn's first steps; a
declined one is told to the model and not run. Results reach the model in the `tool` role, delimited, as data.
Each step is streamed as it happens; the record keeps its tool's name, status and time, never what it said.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Protocol

from agentfn.shared import telemetry
from agentfn.shared.contract import MEMORY_TOOLS, STEP
from agentfn.shared.identity import Caller
from agentfn.shared.problems import ProblemError

from . import prompt
from .approvals import Approval, canonical
from .engines import ToolRequest
from .generation import Generation
from .offered import Offered
from .registry import Agent
from .services import Services
from .tool_table import CallContext, ToolResult, executed, problem


class TurnView(Protocol):
    """What the steps read of the turn they run in (loop.py's `Turn`), and the time its tools take, which they add.
    A protocol, not that `Turn`: loop.py imports this module."""

    services: Services
    caller: Caller
    agent: Agent
    messages: list[dict[str, str]]
    generation: Generation
    deadline: float  # time.monotonic()
    tool_ms: float


def call_key(request: ToolRequest) -> tuple[str, str]:
    """What makes two calls the same call: the tool and its canonical arguments (as sent, when they did not parse)."""
    return request.name, canonical(request.arguments) if request.parsed else str(request.raw)


DECLINED = problem(403, "Declined", "the person declined this call; do not ask for it again in this turn", "declined")
ONCE = problem(409, "Once per turn", "this tool may be called once in a turn", "once-per-turn")


class Steps:
    """The tool steps of one turn: each call asked, answered, refused, repeated or run (by the module's rules),
    streamed and recorded."""

    def __init__(
        self, turn: TurnView, tools: dict, notes: dict[str, dict], convo: list[dict], constrained: bool, offered: Offered
    ):
        self.turn, self.tools, self.convo, self.constrained = turn, tools, convo, constrained
        self.notes = notes  # the notes recalled for the turn, by id: the ones shown to the model
        self.shown = frozenset(notes)
        self.offered = offered
        self.made: dict[tuple[str, str], tuple[int, ToolResult]] = {}
        self.once: set[str] = set()
        self.pending: list[int] = []
        self.repeated = False

    # --- the calls the model asked for in a round ----------------------------------------------------

    def asked(self, taken: list[ToolRequest], text: str) -> Iterator[Any]:
        self.repeated = False
        self._assistant(taken, text)
        for request in taken:
            yield from self._one(request)

    def answered(self, approvals: list[Approval]) -> Iterator[Any]:
        """The person's answers: the approved calls run (the asking turn checked their rules), the declined do not."""
        requests = [
            ToolRequest(f"approved_{i}", a.tool, a.arguments, canonical(a.arguments)) for i, a in enumerate(approvals)
        ]
        if self.constrained:
            for r in requests:
                r.raw = json.dumps({"tool": r.name, "arguments": r.arguments}, ensure_ascii=False)
        self._assistant(requests, "")
        for approval, request in zip(approvals, requests, strict=True):
            if approval.approve:
                yield from self._one(request, approved=True)
                continue
            n = self._n()
            arguments = request.arguments
            yield "step", {"n": n, "tool": request.name, "arguments": arguments, "status": "declined"}
            self._record(request, "declined", 0.0)
            outcome = ToolResult(False, DECLINED)
            self.made[call_key(request)] = (n, outcome)
            self._tell(request, n, self.turn.services.tools.for_model(outcome))

    def _one(self, request: ToolRequest, approved: bool = False) -> Iterator[Any]:
        turn, n = self.turn, self._n()
        arguments = request.arguments if request.parsed else request.raw
        key = call_key(request)
        if key in self.made:
            earlier_n, earlier = self.made[key]
            self.repeated = True
            yield (
                "step",
                {
                    "n": n,
                    "tool": request.name,
                    "arguments": arguments,
                    "status": "repeat",
                    "repeat_of": earlier_n,
                    "ms": 0.0,
                    "result": earlier.result,
                },
            )
            self._record(request, "repeat", 0.0)
            self._tell(request, n, turn.services.tools.for_model(earlier, already_done=earlier_n))
            return
        refusal, run_with = self._rules(request, approved)
        arguments = request.arguments if request.parsed else request.raw  # as the rules read them: what would run
        if refusal is None and not approved and self._needs_approval(request):
            try:
                token = turn.services.approvals.issue(
                    turn.caller, turn.agent.name, request.name, request.arguments, turn.generation.id, turn.messages
                )
            except ProblemError as unavailable:
                refusal = {**unavailable.to_dict()}
            else:
                asked = {"n": n, "tool": request.name, "arguments": arguments, "status": "needs_approval", "approval": token}
                if request.name == "forget":
                    # The person approves deleting a note, not an id: its text as this turn recalled it (a forget
                    # asks only for an id shown in the turn), streamed to the person and never logged.
                    note = self.notes[request.arguments["id"]]
                    asked["note"] = {"id": note["id"], "kind": note.get("kind"), "text": note["text"]}
                yield "step", asked
                self._record(request, "needs_approval", 0.0)
                self.made[key] = (
                    n,
                    ToolResult(
                        False, problem(403, "Awaiting approval", "the person has not answered yet", "needs-approval")
                    ),
                )
                self.pending.append(n)
                return
        yield "step", {"n": n, "tool": request.name, "arguments": arguments, "status": "started"}
        with executed(self._named(request), STEP, n) as done:
            outcome = ToolResult(False, refusal) if refusal is not None else self._call(request, run_with, approved, n)
            done(outcome)
        turn.tool_ms += outcome.ms
        yield (
            "step",
            {
                "n": n,
                "tool": request.name,
                "arguments": arguments,
                "status": outcome.status,
                "ms": round(outcome.ms, 1),
                "result": outcome.result,
            },
        )
        self._record(request, outcome.status, outcome.ms)
        self.made[key] = (n, outcome)
        if outcome.ok and request.name == "open_page":
            self.offered.opened(outcome.result)
        self._tell(request, n, turn.services.tools.for_model(outcome))

    # --- the rules -----------------------------------------------------------------------------------

    def _rules(self, request: ToolRequest, approved: bool) -> tuple[dict | None, Any]:
        """The problem the model is given instead of running the call (None: it may run), and the arguments to run."""
        if request.name not in self.tools:
            return problem(404, "No such tool", "the agent has no tool of that name", "unknown-tool"), None
        if not request.parsed:
            return problem(422, "Invalid arguments", "the arguments are not valid JSON", "invalid-arguments"), None
        tool, _ = self.tools[request.name]
        invalid = self.turn.services.tools.invalid(tool, request.arguments)
        if invalid is not None:
            return invalid, None
        if request.name in MEMORY_TOOLS:
            if request.name in self.once:
                return ONCE, None
            self.once.add(request.name)
        if request.name == "forget" and not approved:
            # A note is cited by its id's first characters: the model may forget it by them too.
            heads = [i for i in self.shown if len(request.arguments["id"]) >= 8 and i.startswith(request.arguments["id"])]
            if request.arguments["id"] not in self.shown and len(heads) == 1:
                request.arguments = {**request.arguments, "id": heads[0]}
        if request.name == "forget" and not approved and request.arguments["id"] not in self.shown:
            return problem(404, "Not shown", "forget takes the id of a note shown in this turn", "not-shown"), None
        if request.name == "open_page":
            resolved, refused = self.offered.resolve(request.arguments)
            return refused, resolved
        return None, request.arguments

    def _needs_approval(self, request: ToolRequest) -> bool:
        tool, access = self.tools[request.name]
        return tool.changes_state and not access.waived

    def _call(self, request: ToolRequest, arguments: Any, approved: bool, n: int) -> ToolResult:
        turn = self.turn
        tool, access = self.tools[request.name]
        # An approved forget's id was shown in the turn that asked (its token says so).
        shown = self.shown | {arguments["id"]} if approved and request.name == "forget" else self.shown
        ctx = CallContext(turn.caller, STEP, access, turn.deadline, turn.agent, shown, (str(turn.generation.id), n))
        return turn.services.tools.call(tool, arguments, ctx)

    # --- what is streamed, recorded and told ---------------------------------------------------------

    def _n(self) -> int:
        return len(self.turn.generation.step_log) + 1

    def _named(self, request: ToolRequest) -> str:
        # The record (and a trace) names only tools the table knows: a name the model made up is not kept.
        return request.name if request.name in self.tools else "(unknown)"

    def _record(self, request: ToolRequest, status: str, ms: float) -> None:
        known = self.tools.get(request.name)
        self.turn.generation.step_log.append(
            {"tool": self._named(request), "status": status, "ms": round(ms, 1), "grant": known[1].grant if known else None}
        )
        telemetry.record("agentfn.steps", 1, {"gen_ai.tool.name": self._named(request), "agentfn.status": status})

    def _assistant(self, requests: list[ToolRequest], text: str) -> None:
        """The model's own message asking for the calls (native mode: one message with all of them)."""
        if not self.constrained:
            self.convo.append(
                {
                    "role": "assistant",
                    "content": text or None,
                    "tool_calls": [
                        {
                            "id": r.id,
                            "type": "function",
                            "function": {"name": r.name, "arguments": r.raw or json.dumps(r.arguments)},
                        }
                        for r in requests
                    ],
                }
            )

    def _tell(self, request: ToolRequest, n: int, seen: str) -> None:
        """The result, in the `tool` role in both modes: data from a tool, never the person's words."""
        told = prompt.delimited("result", seen, step=n, tool=request.name)
        if self.constrained:
            self.convo.append({"role": "assistant", "content": request.raw})
            self.convo.append({"role": "tool", "content": told})
        else:
            self.convo.append({"role": "tool", "tool_call_id": request.id, "content": told})
