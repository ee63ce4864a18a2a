"""The agent loop of one turn (L1-L4): recall, rounds of the engine, tool steps, the answer, the record.

Bounds: at most `min(4, agent's steps)` tool calls, then a round without tools; every round holds its
tokens from the caller's daily budget before the engine is called and settles after; one wall-clock
deadline (the tier's, or the agent's if shorter) over recall, engine and tools together. The caller sees
each step as it happens. The record keeps counts, names and timings, never what was said.

The steps' rules (`Steps`): a call that changes state waits for the person's approval (approvals.py) and
ends the turn; the approvals a request carries run first; a call made once in the turn is not made again;
`remember` and `forget` once a turn; `open_page` only to an offered URL (offered.py). Results reach the
model in the `tool` role, delimited, as data.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from agentfn.shared import telemetry
from agentfn.shared.app import subject_hash
from agentfn.shared.identity import Caller
from agentfn.shared.problems import ProblemError

from . import prompt
from .approvals import Approval, canonical
from .engines import DeadlinePassed, EngineFailed, Text, Tier, ToolRequest, Usage
from .offered import Offered, written
from .registry import Agent
from .services import Services
from .store import Usage as Spent
from .tools import MEMORY_TOOLS, CallContext, Outcome, executed, problem

log = logging.getLogger("agentfn.model.turn")

MAX_CALLS = 4
ONCE_PER_TURN = frozenset({"remember", "forget"})
PROBLEMS = "https://agentfn.dev/problems/"


def budget_problem(per_turn: bool) -> ProblemError:
    if per_turn:
        return ProblemError(
            429, "Too Many Requests", "this turn has spent the tokens its agent allows", type=PROBLEMS + "turn-tokens"
        )
    return ProblemError(429, "Too Many Requests", "the caller's tokens for today are spent", type=PROBLEMS + "daily-tokens")


def engine_problem(error: EngineFailed) -> ProblemError:
    detail = {
        "timeout": "the engine did not answer in time",
        "broken": "the engine broke off its reply",
        "malformed": "the engine's reply was outside the tool format",
    }.get(error.kind)
    if error.kind == "status":
        detail = f"the engine answered HTTP {error.status}"
    status = 504 if error.kind == "timeout" else 503 if error.status == 429 else 502
    return ProblemError(status, "Engine failed", detail or "the engine failed", type=PROBLEMS + "engine")


DEADLINE = ProblemError(504, "Deadline", "the turn's deadline passed", type=PROBLEMS + "deadline")


@dataclass
class Turn:
    """A turn the door accepted: its agent, tier, record row and first round's held tokens."""

    services: Services
    caller: Caller
    agent: Agent
    tier: Tier
    messages: list[dict[str, str]]
    generation: uuid.UUID
    day: date
    deadline: float  # time.monotonic()
    held: int
    started: float = field(default_factory=time.perf_counter)
    # Filled while running; the benchmark reads them.
    engine_ms: float = 0.0
    tool_ms: float = 0.0
    step_log: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage = field(default_factory=lambda: Usage(0, 0))
    rounds: int = 0
    usage_of_round: Usage = field(default_factory=lambda: Usage(0, 0))
    unsettled: Spent | None = None  # the last round's tokens, settled with the next hold or the record
    approvals: list[Approval] = field(default_factory=list)  # checked and used up by the door
    span: telemetry.Span = telemetry.OFF
    parent: Any = None  # the trace context of the request that started the turn (its stream runs after it)
    refusal: str | None = None  # the kind of problem that ended the turn (a budget's: turn-tokens, daily-tokens)

    def events(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """The turn's events; the turn is one span (`invoke_agent`), its rounds and steps its children."""
        self.span = telemetry.start(
            f"invoke_agent {self.agent.name}",
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": self.agent.name,
                "gen_ai.request.model": self.tier.model,
                "agentfn.tier": self.tier.name,
                "agentfn.generation.id": str(self.generation),
                "user.hash": subject_hash(self.caller.subject),
            },
            parent=self.parent,
        )
        try:
            yield from telemetry.within(self.span, self._events())
        finally:
            self.span.end()

    def _events(self) -> Iterator[tuple[str, dict[str, Any]]]:
        status, code = "cancelled", None
        try:
            yield from self._run()
            status = "ok"
        except ProblemError as error:
            status = {504: "deadline", 429: "budget"}.get(error.status, "error")
            code = error.status
            self.refusal = telemetry.error_type(error.type, error.status)
            yield "error", {**error.to_dict(), "generation_id": str(self.generation)}
        except DeadlinePassed:
            status, code = "deadline", 504
            yield "error", {**DEADLINE.to_dict(), "generation_id": str(self.generation)}
        except EngineFailed as error:
            failed = engine_problem(error)
            status, code = "error", failed.status
            yield "error", {**failed.to_dict(), "generation_id": str(self.generation)}
        except Exception as error:  # the message of an arbitrary exception may quote the conversation
            status, code = "error", 500
            log.error(
                "turn failed",
                extra={
                    "event": "turn",
                    "error_type": type(error).__name__,
                    "generation_id": str(self.generation),
                    # Where the turn's time went (the trace a caller may read; no content in it).
                    "timing": {
                        "ms": round((time.perf_counter() - self.started) * 1000, 1),
                        "engine_ms": round(self.engine_ms, 1),
                        "tools_ms": round(self.tool_ms, 1),
                    },
                },
            )
            yield (
                "error",
                {
                    "type": "about:blank",
                    "title": "Internal Server Error",
                    "status": 500,
                    "detail": "the turn failed; see generation_id",
                    "generation_id": str(self.generation),
                },
            )
        finally:
            self._finish(status, code, self.unsettled)

    def _finish(self, status: str, code: int | None, pending: Spent | None) -> None:
        duration = int((time.perf_counter() - self.started) * 1000)
        try:
            self.services.store.finish(
                self.generation,
                self.caller.subject,
                self.day,
                status=status,
                problem=code,
                step_log=self.step_log,
                duration_ms=duration,
                settle=pending,
            )
        except Exception as error:  # the stream is over; the hold lapses at hold_until by itself
            log.error(
                "record not finished",
                extra={
                    "event": "turn",
                    "error_type": type(error).__name__,
                    "generation_id": str(self.generation),
                    # Where the turn's time went (the trace a caller may read; no content in it).
                    "timing": {
                        "ms": round((time.perf_counter() - self.started) * 1000, 1),
                        "engine_ms": round(self.engine_ms, 1),
                        "tools_ms": round(self.tool_ms, 1),
                    },
                },
            )
        log.info(
            "turn",
            extra={
                "event": "turn",
                "generation_id": str(self.generation),
                "agent": self.agent.name,
                "outcome": status,
                "status": code,
                "ms": duration,
                "count": len(self.step_log),
            },
        )
        self.span.attrs(
            {
                "agentfn.outcome": status,
                "gen_ai.usage.input_tokens": self.usage.tokens_in,
                "gen_ai.usage.output_tokens": self.usage.tokens_out,
                "agentfn.rounds": self.rounds,
                "agentfn.steps": len(self.step_log),
            }
        )
        if status not in ("ok", "cancelled"):
            self.span.fail(self.refusal or status)
        telemetry.record("agentfn.turns", 1, {"gen_ai.agent.name": self.agent.name, "agentfn.outcome": status})
        if status == "budget":
            telemetry.record(
                "agentfn.budget.refusals", 1, {"gen_ai.agent.name": self.agent.name, "agentfn.limit": self.refusal}
            )

    # --- the loop --------------------------------------------------------------------------------------

    def _run(self) -> Iterator[Any]:
        s, agent, tier = self.services, self.agent, self.tier
        recalled: list[dict[str, Any]] = []
        if agent.memory != "none" and s.memory.configured:
            found = self._recall()
            recalled = found or []
            # Memory not answering does not end the turn; the caller is told it went without.
            yield "recall", {"entries": recalled} if found is not None else {"entries": [], "unavailable": True}
        shown = frozenset(e["id"] for e in recalled)
        tools = s.tools.for_agent(agent, self.caller, self.deadline)
        constrained = tier.tool_mode == "constrained"
        system = prompt.system(
            agent.brief,
            self.day.isoformat(),
            tools=[t for t, _ in tools.values()],
            constrained=constrained,
            memory_tools=bool(MEMORY_TOOLS & set(tools)),
        )
        notes = prompt.memory_block(recalled) if recalled else ""
        room = (
            tier.context_tokens
            - tier.max_tokens
            - prompt.likely(system + notes)
            - prompt.likely([t.listing() for t, _ in tools.values()])
        )
        convo: list[dict[str, Any]] = [
            {"role": "system", "content": system},
            *prompt.with_notes(prompt.fit(self.messages, max(room, 64)), recalled),
        ]
        steps = Steps(self, tools, shown, convo, constrained, Offered(written(self.messages)))
        calls_left = min(MAX_CALLS, agent.steps) if tools else 0
        if self.approvals:
            # The person's answers to the last turn's asks: the approved calls run first, as this turn's steps.
            yield from steps.answered(self.approvals)
            calls_left = max(0, calls_left - len(self.approvals))
        answer: list[str] = []
        first = True
        while True:
            if time.monotonic() >= self.deadline:
                raise DeadlinePassed()
            offer = [t for t, _ in tools.values()] if calls_left > 0 else None
            # Constrained mode lists the tools in the system text, already in the conversation.
            listed = [t.listing() for t in offer] if offer and not constrained else []
            cost = prompt.estimate(convo) + (prompt.estimate(listed) if listed else 0)
            max_tokens = self._hold(cost, prompt.likely(convo) + (prompt.likely(listed) if listed else 0), first)
            first = False
            round_text: list[str] = []
            requests: list[ToolRequest] = []
            usage = None
            began = time.perf_counter()
            chat = Round(tier, max_tokens)
            try:
                for item in s.engine(tier).round(convo, offer, max_tokens, self.deadline):
                    if isinstance(item, Text):
                        round_text.append(item.text)
                        yield "delta", {"text": item.text}
                    elif isinstance(item, ToolRequest):
                        requests.append(item)
                    elif isinstance(item, Usage):
                        usage = item
            except (EngineFailed, DeadlinePassed, GeneratorExit) as error:
                # What the engine read and wrote before it failed (or the caller left) still counts.
                self._spent(Usage(cost, prompt.estimate("".join(round_text)) if round_text else 0))
                chat.end(self.usage_of_round, error)
                raise
            finally:
                self.engine_ms += (time.perf_counter() - began) * 1000
            self._spent(usage or Usage(cost, prompt.estimate("".join(round_text))))
            chat.end(self.usage_of_round, None)
            answer.extend(round_text)
            if not offer or not requests:
                break
            taken = requests[:calls_left]
            calls_left -= len(taken)
            yield from steps.asked(taken, "".join(round_text))
            if steps.pending:
                break  # the person answers first: the turn ends here, and the next one carries the approvals
            if steps.repeated:
                # A model that repeats a call is stuck: it has the earlier result; from here it answers.
                calls_left = 0
        ids = [e["id"] for e in recalled]
        yield (
            "done",
            {
                "cited": prompt.cited("".join(answer), ids),
                "steps": len(self.step_log),
                "pending": steps.pending,
                "usage": {"tokens_in": self.usage.tokens_in, "tokens_out": self.usage.tokens_out, "rounds": self.rounds},
                "generation_id": str(self.generation),
                # Where the turn's time went (the trace a caller may read; no content in it).
                "timing": {
                    "ms": round((time.perf_counter() - self.started) * 1000, 1),
                    "engine_ms": round(self.engine_ms, 1),
                    "tools_ms": round(self.tool_ms, 1),
                },
            },
        )

    def _spent(self, usage: Usage) -> None:
        self.usage_of_round = usage
        self.usage = Usage(self.usage.tokens_in + usage.tokens_in, self.usage.tokens_out + usage.tokens_out)
        self.rounds += 1
        self.unsettled = Spent(usage.tokens_in, usage.tokens_out, 1)

    def _hold(self, cost: int, likely: int, first: bool) -> int:
        """Hold this round's tokens (settling the last round's); the completion tokens the round may write.

        The caller's day is held at `cost`, a bound on what the engine may count; the agent's tokens per
        turn are checked at the `likely` count, as a turn's cap is passed by at most one round anyway.
        """
        s = self.services
        per_turn_left = self.agent.tokens_per_turn - self.usage.tokens_in - self.usage.tokens_out
        completion = min(self.tier.max_tokens, per_turn_left - likely)
        if completion < s.limits.min_completion:
            raise budget_problem(per_turn=True)
        least = cost + s.limits.min_completion
        if not (first and self.held >= least):
            self.held = s.store.round(
                self.generation,
                self.caller.subject,
                self.day,
                limit=s.limits.daily_tokens,
                settle=self.unsettled,
                want=cost + completion,
                least=least,
            )
            self.unsettled = None
            if not self.held:
                raise budget_problem(per_turn=False)
        return max(s.limits.min_completion, min(completion, self.held - cost))

    def _recall(self) -> list[dict[str, Any]] | None:
        """The entries recalled for the person's last message (as the caller), None if memory did not answer."""
        last = next((m["content"] for m in reversed(self.messages) if m["role"] == "user"), "")
        s = self.services
        timeout = min(5.0, self.deadline - time.monotonic())
        if timeout <= 0:
            return None
        return s.memory.recall(
            self.caller,
            last,
            prompt.MEMORY_KINDS[self.agent.memory],
            s.limits.recall_limit,
            s.limits.recall_max_tokens,
            timeout,
        )


class Round:
    """One engine round as telemetry sees it: the `chat {model}` span, the GenAI client duration and token usage."""

    def __init__(self, tier: Tier, max_tokens: int):
        self.began = time.perf_counter()
        self.common = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",  # the engines' API
            "gen_ai.request.model": tier.model,
        }
        self.span = telemetry.start(
            f"chat {tier.model}", {**self.common, "gen_ai.request.max_tokens": max_tokens, "agentfn.tier": tier.name}
        )

    def end(self, usage: Usage, error: BaseException | None) -> None:
        failed = None
        if isinstance(error, EngineFailed):
            failed = error.kind
        elif isinstance(error, DeadlinePassed):
            failed = "deadline"
        self.span.attrs({"gen_ai.usage.input_tokens": usage.tokens_in, "gen_ai.usage.output_tokens": usage.tokens_out})
        if failed:
            self.span.fail(failed)
        self.span.end()
        telemetry.record(
            "gen_ai.client.operation.duration", time.perf_counter() - self.began, {**self.common, "error.type": failed}
        )
        for kind, count in (("input", usage.tokens_in), ("output", usage.tokens_out)):
            telemetry.record("gen_ai.client.token.usage", count, {**self.common, "gen_ai.token.type": kind})


def call_key(request: ToolRequest) -> tuple[str, str]:
    """What makes two calls the same call: the tool and its canonical arguments (as sent, when they did not parse)."""
    return request.name, canonical(request.arguments) if request.parsed else str(request.raw)


def delimited(name: str, n: int, seen: str) -> str:
    """A result as the model reads it: between markers it cannot close from inside (`</` is written `<\\/`, as
    JSON allows), so a page or a note cannot end the result and speak as the platform."""
    return f'<result step="{n}" tool="{name}">\n' + seen.replace("</", "<\\/") + "\n</result>"


DECLINED = problem(403, "Declined", "the person declined this call; do not ask for it again in this turn", "declined")
ONCE = problem(409, "Once per turn", "this tool may be called once in a turn", "once-per-turn")


class Steps:
    """The tool steps of one turn: each call asked, answered, refused, repeated or run, streamed and recorded.

    Rules, before a call runs: a call identical to one already made in the turn (same tool, same canonical
    arguments) is not made again, the model is given the earlier result marked as already done; `remember`
    and `forget` at most once a turn; `forget` only an id shown in the turn; `open_page` only an offered URL
    (offered.py); a tool that changes state, unless its grant waives approval, waits for the person.
    """

    def __init__(
        self, turn: Turn, tools: dict, shown: frozenset[str], convo: list[dict], constrained: bool, offered: Offered
    ):
        self.turn, self.tools, self.shown, self.convo, self.constrained = turn, tools, shown, convo, constrained
        self.offered = offered
        self.made: dict[tuple[str, str], tuple[int, Outcome]] = {}
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
            outcome = Outcome(False, DECLINED)
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
        if refusal is None and not approved and self._needs_approval(request):
            try:
                token = turn.services.approvals.issue(
                    turn.caller, turn.agent.name, request.name, request.arguments, turn.generation
                )
            except ProblemError as unavailable:
                refusal = {**unavailable.to_dict()}
            else:
                yield (
                    "step",
                    {"n": n, "tool": request.name, "arguments": arguments, "status": "needs_approval", "approval": token},
                )
                self._record(request, "needs_approval", 0.0)
                self.made[key] = (
                    n,
                    Outcome(False, problem(403, "Awaiting approval", "the person has not answered yet", "needs-approval")),
                )
                self.pending.append(n)
                return
        yield "step", {"n": n, "tool": request.name, "arguments": arguments, "status": "started"}
        with executed(self._named(request), "agent", n) as done:
            outcome = Outcome(False, refusal) if refusal is not None else self._call(request, run_with, approved, n)
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
        if request.name in ONCE_PER_TURN:
            if request.name in self.once:
                return ONCE, None
            self.once.add(request.name)
        if request.name == "forget" and not approved and request.arguments["id"] not in self.shown:
            return problem(404, "Not shown", "forget takes the id of a note shown in this turn", "not-shown"), None
        if request.name == "open_page":
            resolved, refused = self.offered.resolve(request.arguments)
            return refused, resolved
        return None, request.arguments

    def _needs_approval(self, request: ToolRequest) -> bool:
        tool, access = self.tools[request.name]
        return tool.changes_state and not access.waived

    def _call(self, request: ToolRequest, arguments: Any, approved: bool, n: int) -> Outcome:
        turn = self.turn
        tool, access = self.tools[request.name]
        # An approved forget's id was shown in the turn that asked (its token says so).
        shown = self.shown | {arguments["id"]} if approved and request.name == "forget" else self.shown
        ctx = CallContext(turn.caller, "agent", access, turn.deadline, turn.agent, shown, (str(turn.generation), n))
        return turn.services.tools.call(tool, arguments, ctx)

    # --- what is streamed, recorded and told ---------------------------------------------------------

    def _n(self) -> int:
        return len(self.turn.step_log) + 1

    def _named(self, request: ToolRequest) -> str:
        # The record (and a trace) names only tools the table knows: a name the model made up is not kept.
        return request.name if request.name in self.tools else "(unknown)"

    def _record(self, request: ToolRequest, status: str, ms: float) -> None:
        known = self.tools.get(request.name)
        self.turn.step_log.append(
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
        if self.constrained:
            self.convo.append({"role": "assistant", "content": request.raw})
            self.convo.append({"role": "tool", "content": delimited(request.name, n, seen)})
        else:
            self.convo.append({"role": "tool", "tool_call_id": request.id, "content": delimited(request.name, n, seen)})
