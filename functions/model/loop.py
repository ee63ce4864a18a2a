"""The agent loop of one turn (L1-L4): recall, rounds of the engine, tool steps, the answer, the record.

Bounds: at most `min(4, agent's steps)` tool calls, then a round without tools; every round holds its
tokens from the caller's daily budget before the engine is called and settles after; one wall-clock
deadline (the tier's, or the agent's if shorter) over recall, engine and tools together. The caller sees
each step as it happens. The record keeps counts, names and timings, never what was said.
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

from agentfn.shared.identity import Caller
from agentfn.shared.problems import ProblemError

from . import prompt
from .engines import DeadlinePassed, EngineFailed, Text, Tier, ToolRequest, Usage
from .registry import Agent
from .services import Services
from .store import Usage as Spent
from .tools import MEMORY_TOOLS, CallContext, Outcome, problem

log = logging.getLogger("agentfn.model.turn")

MAX_CALLS = 4
PROBLEMS = "https://agentfn.dev/problems/"


def budget_problem(per_turn: bool) -> ProblemError:
    if per_turn:
        return ProblemError(429, "Too Many Requests", "this turn has spent the tokens its agent allows",
                            type=PROBLEMS + "turn-tokens")
    return ProblemError(429, "Too Many Requests", "the caller's tokens for today are spent", type=PROBLEMS + "daily-tokens")


def engine_problem(error: EngineFailed) -> ProblemError:
    detail = {"timeout": "the engine did not answer in time", "broken": "the engine broke off its reply",
              "malformed": "the engine's reply was outside the tool format"}.get(error.kind)
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
    unsettled: Spent | None = None  # the last round's tokens, settled with the next hold or the record

    def events(self) -> Iterator[tuple[str, dict[str, Any]]]:
        status, code = "cancelled", None
        try:
            yield from self._run()
            status = "ok"
        except ProblemError as error:
            status = {504: "deadline", 429: "budget"}.get(error.status, "error")
            code = error.status
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
            log.error("turn failed", extra={"event": "turn", "error_type": type(error).__name__,
                                             "generation_id": str(self.generation),
                       # Where the turn's time went (the trace a caller may read; no content in it).
                       "timing": {"ms": round((time.perf_counter() - self.started) * 1000, 1),
                                  "engine_ms": round(self.engine_ms, 1), "tools_ms": round(self.tool_ms, 1)}})
            yield "error", {"type": "about:blank", "title": "Internal Server Error", "status": 500,
                            "detail": "the turn failed; see generation_id", "generation_id": str(self.generation)}
        finally:
            self._finish(status, code, self.unsettled)

    def _finish(self, status: str, code: int | None, pending: Spent | None) -> None:
        duration = int((time.perf_counter() - self.started) * 1000)
        try:
            self.services.store.finish(self.generation, self.caller.subject, self.day, status=status, problem=code,
                                       step_log=self.step_log, duration_ms=duration, settle=pending)
        except Exception as error:  # the stream is over; the hold lapses at hold_until by itself
            log.error("record not finished", extra={"event": "turn", "error_type": type(error).__name__,
                                                     "generation_id": str(self.generation),
                       # Where the turn's time went (the trace a caller may read; no content in it).
                       "timing": {"ms": round((time.perf_counter() - self.started) * 1000, 1),
                                  "engine_ms": round(self.engine_ms, 1), "tools_ms": round(self.tool_ms, 1)}})
        log.info("turn", extra={"event": "turn", "generation_id": str(self.generation), "agent": self.agent.name,
                                "outcome": status, "status": code, "ms": duration, "count": len(self.step_log)})

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
        system = prompt.system(agent.brief, self.day.isoformat(), tools=[t for t, _ in tools.values()],
                               constrained=constrained, recalled=recalled,
                               memory_tools=bool(MEMORY_TOOLS & set(tools)))
        room = tier.context_tokens - tier.max_tokens - prompt.likely(system) - prompt.likely(
            [t.listing() for t, _ in tools.values()])
        convo: list[dict[str, Any]] = [{"role": "system", "content": system}, *prompt.fit(self.messages, max(room, 64))]
        calls_left = min(MAX_CALLS, agent.steps) if tools else 0
        answer: list[str] = []
        failed: set[tuple[str, str]] = set()
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
            try:
                for item in s.engine(tier).round(convo, offer, max_tokens, self.deadline):
                    if isinstance(item, Text):
                        round_text.append(item.text)
                        yield "delta", {"text": item.text}
                    elif isinstance(item, ToolRequest):
                        requests.append(item)
                    elif isinstance(item, Usage):
                        usage = item
            except (EngineFailed, DeadlinePassed, GeneratorExit):
                # What the engine read and wrote before it failed (or the caller left) still counts.
                self._spent(Usage(cost, prompt.estimate("".join(round_text)) if round_text else 0))
                raise
            finally:
                self.engine_ms += (time.perf_counter() - began) * 1000
            self._spent(usage or Usage(cost, prompt.estimate("".join(round_text))))
            answer.extend(round_text)
            if not offer or not requests:
                break
            # A call the model repeats after it failed this turn would fail again (small models loop on
            # one): it is not made, and the model answers without tools from here.
            taken = [r for r in requests[:calls_left] if call_key(r) not in failed]
            if not taken:
                calls_left = 0
                continue
            calls_left -= len(taken)
            yield from self._steps(taken, tools, shown, convo, "".join(round_text), constrained)
            failed |= {call_key(r) for r, logged in zip(taken, self.step_log[-len(taken):], strict=True)
                       if logged["status"] != "ok"}
        ids = [e["id"] for e in recalled]
        yield "done", {"cited": prompt.cited("".join(answer), ids), "steps": len(self.step_log),
                       "usage": {"tokens_in": self.usage.tokens_in, "tokens_out": self.usage.tokens_out,
                                 "rounds": self.rounds},
                       "generation_id": str(self.generation),
                       # Where the turn's time went (the trace a caller may read; no content in it).
                       "timing": {"ms": round((time.perf_counter() - self.started) * 1000, 1),
                                  "engine_ms": round(self.engine_ms, 1), "tools_ms": round(self.tool_ms, 1)}}

    def _spent(self, usage: Usage) -> None:
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
            self.held = s.store.round(self.generation, self.caller.subject, self.day, limit=s.limits.daily_tokens,
                                      settle=self.unsettled, want=cost + completion, least=least)
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
        return s.memory.recall(self.caller, last, prompt.MEMORY_KINDS[self.agent.memory], s.limits.recall_limit,
                               s.limits.recall_max_tokens, timeout)

    def _steps(self, taken: list[ToolRequest], tools: dict, shown: frozenset[str], convo: list[dict],
               text: str, constrained: bool) -> Iterator[Any]:
        if not constrained:
            convo.append({"role": "assistant", "content": text or None, "tool_calls": [
                {"id": r.id, "type": "function", "function": {"name": r.name, "arguments": r.raw or json.dumps(r.arguments)}}
                for r in taken]})
        for request in taken:
            n = len(self.step_log) + 1
            shown_arguments = request.arguments if request.parsed else request.raw
            yield "step", {"n": n, "tool": request.name, "arguments": shown_arguments, "status": "started"}
            outcome = self._step(request, tools, shown)
            self.tool_ms += outcome.ms
            yield "step", {"n": n, "tool": request.name, "arguments": shown_arguments, "status": outcome.status,
                           "ms": round(outcome.ms, 1), "result": outcome.result}
            # The record names only tools the table knows: a name the model made up is not kept.
            self.step_log.append({"tool": request.name if request.name in tools else "(unknown)",
                                  "status": outcome.status, "ms": round(outcome.ms, 1)})
            seen = self.services.tools.for_model(outcome)
            if constrained:
                convo.append({"role": "assistant", "content": request.raw})
                convo.append({"role": "user", "content": f"Result of {request.name}: {seen}"})
            else:
                convo.append({"role": "tool", "tool_call_id": request.id, "content": seen})

    def _step(self, request: ToolRequest, tools: dict, shown: frozenset[str]) -> Outcome:
        if request.name not in tools:
            return Outcome(False, problem(404, "No such tool", "the agent has no tool of that name", "unknown-tool"))
        if not request.parsed:
            return Outcome(False, problem(422, "Invalid arguments", "the arguments are not valid JSON", "invalid-arguments"))
        tool, access = tools[request.name]
        ctx = CallContext(self.caller, "agent", access, self.deadline, self.agent, shown)
        return self.services.tools.call(tool, request.arguments, ctx)


def call_key(request: ToolRequest) -> tuple[str, str]:
    """What makes two calls the same call: the tool and its arguments (as sent, when they did not parse)."""
    return request.name, json.dumps(request.arguments, sort_keys=True) if request.parsed else str(request.raw)
