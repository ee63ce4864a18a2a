"""The agent loop of one turn (L1-L4): recall, rounds of the engine, tool steps, the answer, the record.

Bounds: at most `min(4, agent's steps)` tool calls, then a round without tools; every round holds its
tokens from the caller's daily budget before the engine is called and settles after; one wall-clock
deadline (the tier's, or the agent's if shorter) over recall, engine and tools together. The caller sees
each step as it happens. The record keeps counts, names and timings, never what was said.

The turn is accepted (`begin`) before its stream starts; its stream (`Turn.events`) runs the rounds. What
happens to each tool call the model asks for is the step rules' (steps.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from agentfn.shared import telemetry
from agentfn.shared.contract import MEMORY_TOOLS, STEP
from agentfn.shared.identity import Caller
from agentfn.shared.problems import ProblemError
from agentfn.shared.pseudonym import conversation_hash, subject_hash

from . import prompt
from .approvals import Approval, refused
from .citations import cited
from .engines import DeadlinePassed, Tier
from .generation import Generation, as_problem, budget_problem
from .grounding import about_the_person, stands
from .language import UNNOTED, answer_language, form_of_address
from .offered import Offered, written
from .registry import Agent
from .services import Services
from .steps import Steps

log = logging.getLogger("agentfn.model.turn")

MAX_CALLS = 4
TOOL_OVERHEAD = 600  # tokens the tool list and instructions may add to the first round's prompt


def begin(services: Services, caller: Caller, agent: Agent, messages: list[dict[str, str]], asked: list[dict]) -> Turn:
    """A turn accepted before its stream starts: its record opened and its first round's tokens held (a spent day
    is a plain 429), the approvals it carries used up. Raises the problem that refuses it, its record closed so."""
    s = services
    tier = s.tier(agent.tier)
    seconds = min(tier.deadline, agent.deadline_seconds)
    deadline = time.monotonic() + seconds
    if prompt.likely(messages[-1]["content"]) > tier.context_tokens - tier.max_tokens - TOOL_OVERHEAD:
        raise ProblemError(413, "Content Too Large", "the last message does not fit the tier's context")
    approvals = checked_approvals(s, caller, agent, messages, asked)
    with ExitStack() as closing:
        generation = closing.enter_context(
            Generation(
                s.store,
                kind="turn",
                channel=STEP,
                subject=caller.subject,
                agent=agent.name,
                tier=tier.name,
                hold_seconds=seconds + 30,
                daily_tokens=s.limits.daily_tokens,
                min_completion=s.limits.min_completion,
                conversation=conversation_hash(agent.name, messages),
            )
        )
        # The first round's prompt before recall and the tools: the messages that fit, the brief, and room for the rest.
        overhead = TOOL_OVERHEAD + (s.limits.recall_max_tokens if agent.memory != "none" else 0)
        try:
            cost, completion = round_budget(
                s, agent, tier, [prompt.fit(messages, tier.context_tokens), agent.brief], overhead=overhead
            )
            generation.hold(cost + completion, cost + s.limits.min_completion)  # the first round's
        except ProblemError as refusal:
            record_turn(agent.name, "budget", telemetry.error_type(refusal.type, refusal.status))
            raise
        if approvals and not s.store.use_approvals(caller.subject, [(a.jti, a.expires) for a in approvals]):
            raise refused(409, "approval-used", "an approval in the request was used before; each is good once")
        closing.pop_all()  # from here the turn's stream closes the record
    return Turn(s, caller, agent, tier, messages, generation, deadline, approvals=approvals, parent=telemetry.current())


def round_budget(
    s: Services, agent: Agent, tier: Tier, prompts: list[Any], *, overhead: int = 0, used: int = 0
) -> tuple[int, int]:
    """A round's cost and completion tokens, its prompt being `prompts` and `overhead` tokens more, when the turn has
    used `used` tokens; the per-turn budget's problem when fewer than the least completion worth a round are left.

    The caller's day is held at the cost, a bound on what the engine may count; the agent's tokens per turn are
    checked at the likely count, as a turn's cap is passed by at most one round anyway.
    """
    cost = sum(prompt.estimate(p) for p in prompts) + overhead
    likely = sum(prompt.likely(p) for p in prompts) + overhead
    completion = min(tier.max_tokens, agent.tokens_per_turn - used - likely)
    if completion < s.limits.min_completion:
        raise budget_problem(per_turn=True)
    return cost, completion


def record_turn(agent: str, outcome: str, refusal: str | None) -> None:
    """A turn's metrics: the turn by its outcome, and a budget's refusal by the limit that refused it."""
    telemetry.record("agentfn.turns", 1, {"gen_ai.agent.name": agent, "agentfn.outcome": outcome})
    if outcome == "budget":
        telemetry.record("agentfn.budget.refusals", 1, {"gen_ai.agent.name": agent, "agentfn.limit": refusal})


def checked_approvals(
    s: Services, caller: Caller, agent: Agent, messages: list[dict[str, str]], items: list[dict]
) -> list[Approval]:
    """Every approval checked before anything of the turn runs (its use comes after the budget's hold)."""
    approvals = s.approvals.check(caller, agent.name, messages, items)
    granted = agent.granted_tools(caller)
    for i, approval in enumerate(approvals):
        if approval.tool not in granted:
            raise refused(403, "approval-not-granted", f"approvals[{i}]: the agent is no longer granted {approval.tool}")
    if len(approvals) > agent.steps:
        raise refused(422, "approvals-too-many", f"the agent takes at most {agent.steps} steps in a turn")
    return approvals


@dataclass
class Turn:
    """A turn the door accepted: its agent, tier and generation (record and budget, the first round's tokens held)."""

    services: Services
    caller: Caller
    agent: Agent
    tier: Tier
    messages: list[dict[str, str]]
    generation: Generation
    deadline: float  # time.monotonic()
    tool_ms: float = 0.0  # filled by the steps
    approvals: list[Approval] = field(default_factory=list)  # checked and used up by the door
    span: telemetry.Span = telemetry.OFF
    parent: Any = None  # the trace context of the request that started the turn (its stream runs after it)
    refusal: str | None = None  # the kind of problem that ended the turn (a budget's: turn-tokens, daily-tokens)

    @property
    def step_log(self) -> list[dict[str, Any]]:
        return self.generation.step_log

    def timing(self) -> dict[str, float]:
        """Where the turn's time went (the trace a caller may read; no content in it)."""
        return {
            "ms": round(self.generation.ms, 1),
            "engine_ms": round(self.generation.engine_ms, 1),
            "tools_ms": round(self.tool_ms, 1),
        }

    def events(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """The turn's events; the turn is one span (`invoke_agent`), its rounds and steps its children."""
        self.span = telemetry.start(
            f"invoke_agent {self.agent.name}",
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": self.agent.name,
                "gen_ai.request.model": self.tier.model,
                "agentfn.tier": self.tier.name,
                "agentfn.generation.id": str(self.generation.id),
                "user.hash": subject_hash(self.caller.subject),
            },
            parent=self.parent,
        )
        try:
            yield from telemetry.within(self.span, self._events())
        finally:
            self.span.end()

    def _events(self) -> Iterator[tuple[str, dict[str, Any]]]:
        gen_id = str(self.generation.id)
        try:
            with self.generation:
                try:
                    yield from self._run()
                except Exception as error:
                    self.generation.failed(error)
                    told = as_problem(error)
                    if isinstance(error, ProblemError):
                        self.refusal = telemetry.error_type(error.type, error.status)
                    if told is None:  # the message of an arbitrary exception may quote the conversation
                        log.error(
                            "turn failed",
                            extra={
                                "event": "turn",
                                "error_type": type(error).__name__,
                                "generation_id": gen_id,
                                "timing": self.timing(),
                            },
                        )
                        told = ProblemError(500, "Internal Server Error", "the turn failed; see generation_id")
                    yield "error", {**told.to_dict(), "generation_id": gen_id}
        except Exception as error:  # the record did not close: the stream is over; the hold lapses at hold_until
            log.error(
                "record not finished",
                extra={
                    "event": "turn",
                    "error_type": type(error).__name__,
                    "generation_id": gen_id,
                    "timing": self.timing(),
                },
            )
        finally:
            self._told()

    # --- the rounds ------------------------------------------------------------------------------------

    def _run(self) -> Iterator[Any]:
        s, agent, tier = self.services, self.agent, self.tier
        recalled: list[dict[str, Any]] = []
        if agent.memory != "none" and s.memory.configured:
            found = self._recall()
            recalled = found or []
            # Memory not answering does not end the turn; the caller is told it went without.
            yield "recall", {"entries": recalled} if found is not None else {"entries": [], "unavailable": True}
        tools, system = opening(s, self.caller, agent, tier, self.deadline, self.generation.day.isoformat())
        # The engine may be reading this very prompt ahead of the turns: then it is read once, not twice side by side.
        s.warming.wait(tier.name, system, self.deadline - time.monotonic())
        constrained = tier.tool_mode == "constrained"
        # The answer's language and what to call the person, told to the model before the person's message with the notes
        # (and the name held by the reply's grammar): a small model answers a Croatian question in English, or ignores a
        # preference, unless it is told in so many words.
        speak, address = answer_language(self.messages, recalled), form_of_address(recalled)
        room = (
            tier.context_tokens
            - tier.max_tokens
            - prompt.likely(system + prompt.frame(recalled, speak, constrained, address))
            - prompt.likely([t.listing() for t, _ in tools.values()])
        )
        convo: list[dict[str, Any]] = [
            {"role": "system", "content": system},
            *prompt.with_notes(prompt.fit(self.messages, max(room, 64)), recalled, speak, constrained, address),
        ]
        notes = {e["id"]: e for e in recalled}
        steps = Steps(self, tools, notes, convo, constrained, Offered(written(self.messages)))
        calls_left = min(MAX_CALLS, agent.steps) if tools else 0
        if self.approvals:
            # The person's answers to the last turn's asks: the approved calls run first, as this turn's steps.
            yield from steps.answered(self.approvals)
            calls_left = max(0, calls_left - len(self.approvals))
        answer: list[str] = []
        declared: list[str] | None = None
        # An answer to a question about the person is held back until it is checked (grounding.py); others stream.
        question = self.messages[-1]["content"]
        guarded = agent.memory != "none" and about_the_person(question)
        while True:
            if time.monotonic() >= self.deadline:
                raise DeadlinePassed()
            offer = [t for t, _ in tools.values()] if calls_left > 0 else None
            # Constrained mode lists the tools in the system text, already in the conversation.
            listed = [t.listing() for t in offer] if offer and not constrained else []
            used = self.generation.used
            cost, completion = round_budget(
                s, agent, tier, [convo, listed] if listed else [convo], used=used.tokens_in + used.tokens_out
            )
            with self.generation.round(
                s.engine(tier),
                convo,
                offer,
                self.deadline,
                cost=cost,
                completion=completion,
                traced=True,
                notes=list(notes) or None,
                address=address,
            ) as r:
                for text in r:
                    if not guarded:
                        yield "delta", {"text": text}
            answer.append(r.text)
            declared = r.cited if r.cited is not None else declared
            if not offer or not r.requests:
                break
            taken = r.requests[:calls_left]
            calls_left -= len(taken)
            yield from steps.asked(taken, r.text)
            if steps.pending:
                break  # the person answers first: the turn ends here, and the next one carries the approvals
            if steps.repeated:
                # A model that repeats a call is stuck: it has the earlier result; from here it answers.
                calls_left = 0
        said = "".join(answer)
        used_notes = cited(said, recalled, declared, self.messages)
        if guarded:
            # What the turn showed besides the notes: the conversation before, and what its tools answered.
            earlier = [*self.messages[:-1], *(m for m in convo if m["role"] == "tool")]
            if said.strip() and not stands(said, question, recalled, used_notes, earlier):
                said, used_notes = UNNOTED.get(speak or "", UNNOTED["en"]), []
            if said:
                yield "delta", {"text": said}
        used = self.generation.used
        yield (
            "done",
            {
                "cited": used_notes,
                "steps": len(self.step_log),
                "pending": steps.pending,
                "usage": {"tokens_in": used.tokens_in, "tokens_out": used.tokens_out, "rounds": self.generation.rounds},
                "generation_id": str(self.generation.id),
                "timing": self.timing(),
            },
        )

    # --- helpers ---------------------------------------------------------------------------------------

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

    def _told(self) -> None:
        """The turn's end in the log, its span and its metrics."""
        status, code = self.generation.status, self.generation.problem
        log.info(
            "turn",
            extra={
                "event": "turn",
                "generation_id": str(self.generation.id),
                "agent": self.agent.name,
                "outcome": status,
                "status": code,
                "ms": int(self.generation.ms),
                "count": len(self.step_log),
                "timing": self.timing(),
            },
        )
        self.span.attrs(
            {
                "agentfn.outcome": status,
                "gen_ai.usage.input_tokens": self.generation.used.tokens_in,
                "gen_ai.usage.output_tokens": self.generation.used.tokens_out,
                "agentfn.rounds": self.generation.rounds,
                "agentfn.steps": len(self.step_log),
            }
        )
        if status not in ("ok", "cancelled"):
            self.span.fail(self.refusal or status)
        record_turn(self.agent.name, status, self.refusal)


def opening(
    s: Services, caller: Caller, agent: Agent, tier: Tier, deadline: float, day: str
) -> tuple[dict[str, tuple[Any, Any]], str]:
    """The tools the agent may call for this caller, and the system prompt of its turns (the same all day for them: the
    prefix an engine's prompt cache keeps)."""
    tools = s.tools.for_agent(agent, caller, deadline)
    system = prompt.system(
        agent.brief,
        day,
        tools=[t for t, _ in tools.values()],
        constrained=tier.tool_mode == "constrained",
        memory_tools=bool(MEMORY_TOOLS & set(tools)),
        notes=agent.memory != "none",
        context_tokens=tier.context_tokens,
    )
    return tools, system
