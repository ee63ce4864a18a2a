"""One engine round as telemetry sees it: the `chat {model}` span, the GenAI client duration and token usage."""

from __future__ import annotations

import time

from agentfn.shared import telemetry

from .engines import DeadlinePassed, EngineFailed, Tier, Usage


class RoundTelemetry:
    """The span and metrics of one round, from its call to the engine to its end."""

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
