"""One generation's life: a turn, a session's end, or a tool called alone or over MCP, from record to close.

`Generation` is a context manager over the model function's store: entering opens the record (running),
`hold` settles the last round's tokens and holds the next round's from the caller's daily budget, and
leaving closes the record with the status of whatever ended it (a return, a problem, an engine's failure,
the deadline, the caller leaving a stream), settling what the last round spent. The first thing that ended
it wins: a failure its door caught and reported (`failed`) is not overwritten by the caller leaving after.

`Generation.round` is one engine round inside it (`Round`): held before the engine is called, streamed,
and settled after, however it ended.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

from agentfn.shared.problems import ProblemError, problem_type

from . import prompt
from .engines import Cited, DeadlinePassed, Engine, EngineFailed, Text, ToolRequest, Usage
from .round_telemetry import RoundTelemetry
from .store import Spent, Store, today

DEADLINE = ProblemError(504, "Deadline", "the turn's deadline passed", type=problem_type("deadline"))


def budget_problem(per_turn: bool) -> ProblemError:
    if per_turn:
        return ProblemError(
            429, "Too Many Requests", "this turn has spent the tokens its agent allows", type=problem_type("turn-tokens")
        )
    return ProblemError(
        429, "Too Many Requests", "the caller's tokens for today are spent", type=problem_type("daily-tokens")
    )


def engine_problem(error: EngineFailed) -> ProblemError:
    detail = {
        "timeout": "the engine did not answer in time",
        "broken": "the engine broke off its reply",
        "malformed": "the engine's reply was outside the tool format",
    }.get(error.kind)
    if error.kind == "status":
        detail = f"the engine answered HTTP {error.status}"
    status = 504 if error.kind == "timeout" else 503 if error.status == 429 else 502
    return ProblemError(status, "Engine failed", detail or "the engine failed", type=problem_type("engine"))


def as_problem(error: BaseException) -> ProblemError | None:
    """The problem a caller is told for what ended a generation; None for an error with nothing to tell (a 500)."""
    if isinstance(error, ProblemError):
        return error
    if isinstance(error, DeadlinePassed):
        return DEADLINE
    if isinstance(error, EngineFailed):
        return engine_problem(error)
    return None


def ended_by(error: BaseException | None) -> tuple[str, int | None]:
    """The record's status and problem (an HTTP status) for what ended a generation; None: it returned."""
    if error is None:
        return "ok", None
    if isinstance(error, GeneratorExit):
        return "cancelled", None  # the caller left the stream
    if isinstance(error, DeadlinePassed):
        return "deadline", 504
    if isinstance(error, EngineFailed):
        return "error", engine_problem(error).status
    if isinstance(error, ProblemError):
        return {504: "deadline", 429: "budget"}.get(error.status, "error"), error.status
    return "error", 500


class Generation:
    """The record and the budget of one generation; `with Generation(...) as generation:` opens and closes it."""

    def __init__(
        self,
        store: Store,
        *,
        kind: str,
        channel: str,
        subject: str,
        agent: str | None = None,
        tier: str | None = None,
        hold_seconds: float,
        daily_tokens: int = 0,
        min_completion: int = 0,
        conversation: str | None = None,
    ):
        self.store, self.subject, self.daily_tokens = store, subject, daily_tokens
        self.min_completion = min_completion  # a round that could write fewer tokens than this is not run
        self.day = today()
        self.started = time.perf_counter()
        self.id: uuid.UUID = store.open(
            kind=kind,
            channel=channel,
            subject=subject,
            agent=agent,
            tier=tier,
            hold_seconds=hold_seconds,
            day=self.day,
            conversation=conversation,
        )
        self.step_log: list[dict[str, Any]] = []
        self.used = Usage(0, 0)  # all rounds together, as the caller is told
        self.rounds = 0
        self.engine_ms = 0.0  # all rounds together, from the call to the engine to the round's end
        self.held = 0  # tokens held and taken by no round yet: the first round's, when its generation was accepted
        self.unsettled: Spent | None = None  # the last round's tokens, settled with the next hold or the close
        self.status: str | None = None
        self.problem: int | None = None
        self.closed = False

    def __enter__(self) -> Generation:
        return self

    def __exit__(self, kind, error, trace) -> None:
        if error is not None and self.status is None:
            self.status, self.problem = ended_by(error)
        self.close()

    # --- while it runs ---------------------------------------------------------------------------------

    def hold(self, want: int, least: int) -> int:
        """Settle the last round, then hold up to `want` tokens for the next: the tokens held, or the day's
        budget problem when fewer than `least` are left (the round may not run)."""
        held = self.store.round(
            self.id, self.subject, self.day, limit=self.daily_tokens, settle=self.unsettled, want=want, least=least
        )
        self.unsettled = None
        if not held:
            raise budget_problem(per_turn=False)
        self.held = held
        return held

    def round(
        self,
        engine: Engine,
        convo: list[dict[str, Any]],
        offer: list | None,
        deadline: float,
        *,
        cost: int,
        completion: int,
        traced: bool = False,
        notes: list[str] | None = None,
        address: str | None = None,
    ) -> Round:
        """One round of `engine` over `convo` (offering the tools `offer`, showing the notes of ids `notes`), whose
        prompt may cost `cost` tokens and whose reply may run to `completion`; `traced`: its `chat` span and metrics
        recorded (a turn's rounds)."""
        return Round(self, engine, convo, offer, deadline, cost, completion, traced, notes, address)

    def spent(self, usage: Usage) -> None:
        """One round's tokens, as the engine counted them (or as estimated when it could not say)."""
        self.used = Usage(self.used.tokens_in + usage.tokens_in, self.used.tokens_out + usage.tokens_out)
        self.rounds += 1
        self.unsettled = Spent(usage.tokens_in, usage.tokens_out, 1)

    def failed(self, error: BaseException) -> None:
        """It ended with this error, caught and reported by its door (a stream's `error` event)."""
        if self.status is None:
            self.status, self.problem = ended_by(error)

    def ended(self, status: str, problem: int | None) -> None:
        """It ended with this status without an error raised (a tool call whose outcome is a problem)."""
        if self.status is None:
            self.status, self.problem = status, problem

    @property
    def ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000

    # --- the close -------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the record once: status, problem, steps, duration; the last round's tokens settled, the hold let go."""
        if self.closed:
            return
        self.closed = True
        if self.status is None:
            self.status = "ok"
        self.store.finish(
            self.id,
            self.subject,
            self.day,
            status=self.status,
            problem=self.problem,
            step_log=self.step_log,
            duration_ms=int(self.ms),
            settle=self.unsettled,
        )


class Round:
    """One engine round of a generation: `with generation.round(...) as r:`, then `for text in r:`.

    Entering holds its tokens and settles the last round's: the ones held as the generation was accepted if they
    are enough, else a new hold from the caller's day (its budget problem when too few are left); the engine may
    write the completion asked for, as far as the hold covers it. Iterating streams the engine's text, keeping
    its tool requests and usage. Leaving settles what the round spent: the engine's count, or an estimate of what
    it read and wrote (also when an error or the consumer leaving cut it short).
    """

    def __init__(
        self,
        generation: Generation,
        engine: Engine,
        convo: list[dict[str, Any]],
        offer: list | None,
        deadline: float,
        cost: int,
        completion: int,
        traced: bool,
        notes: list[str] | None = None,
        address: str | None = None,
    ):
        self.generation, self.engine, self.convo, self.offer = generation, engine, convo, offer
        self.deadline, self.cost, self.completion, self.traced = deadline, cost, completion, traced
        self.notes, self.address = notes, address
        self.pieces: list[str] = []
        self.requests: list[ToolRequest] = []
        self.cited: list[str] | None = None  # what the engine said its answer used (constrained mode), if it said
        self.usage: Usage | None = None

    def __enter__(self) -> Round:
        g, cost = self.generation, self.cost
        least = cost + g.min_completion
        held = g.held if g.held >= least else g.hold(cost + self.completion, least)
        g.held = 0
        self.max_tokens = max(g.min_completion, min(self.completion, held - cost))
        self.began = time.perf_counter()
        self.telemetry = RoundTelemetry(self.engine.tier, self.max_tokens) if self.traced else None
        self.stream = self.engine.round(
            self.convo, self.offer, self.max_tokens, self.deadline, notes=self.notes, address=self.address
        )
        return self

    def __iter__(self) -> Iterator[str]:
        for item in self.stream:
            if isinstance(item, Text):
                self.pieces.append(item.text)
                yield item.text
            elif isinstance(item, ToolRequest):
                self.requests.append(item)
            elif isinstance(item, Cited):
                self.cited = item.ids
            elif isinstance(item, Usage):
                self.usage = item

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def __exit__(self, kind, error, trace) -> None:
        self.stream.close()  # a consumer that left lets the engine's reply go now, not when it is collected
        g = self.generation
        g.engine_ms += (time.perf_counter() - self.began) * 1000
        if error is None:
            spent = self.usage or Usage(self.cost, prompt.estimate(self.text))
        else:  # what the engine read and wrote before it failed (or the consumer left) still counts
            spent = Usage(self.cost, prompt.estimate(self.text) if self.pieces else 0)
        g.spent(spent)
        if self.telemetry is not None:
            self.telemetry.end(spent, error)
