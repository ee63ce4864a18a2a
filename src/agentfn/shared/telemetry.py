"""Traces and metrics (OpenTelemetry), exported over OTLP/HTTP when the standard variables name a collector.

On when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `..._METRICS_ENDPOINT`) is set
and `OTEL_SDK_DISABLED` is not `true`; the other `OTEL_EXPORTER_OTLP_*` variables (headers, timeout, certificate)
are the exporter's own. Off, nothing of OpenTelemetry is imported and every call here returns at once: no
exporter, no processor, no span objects.

Names follow the OpenTelemetry semantic conventions v1.41.0, GenAI part (development status): spans
`invoke_agent {agent}`, `chat {model}`, `execute_tool {tool}`, memory's `search_memory` / `update_memory` /
`delete_memory`; metrics `gen_ai.client.operation.duration` and `gen_ai.client.token.usage`. The latest
experimental GenAI conventions are the only ones emitted, as `OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`
(set for the process when unset) asks of any GenAI instrumentation in it.

No content, ever: a span or a metric carries only the attribute keys in `ATTRIBUTES` (anything else is
dropped here, whatever a caller of this module passes), exceptions are never recorded (their messages may
quote data), and the content-capture switches of GenAI instrumentations are not read. The subject appears
only as `user.hash`, the pseudonym the logs use. Only W3C `traceparent` is carried between parts (no
baggage), and never to the web pages the page fetcher opens.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .settings import Settings, setting

SEMCONV = "1.41.0"
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV}"
SCOPE = "agentfn"

# Every attribute key a span or a data point may carry: names, counts, outcomes, timings; no text of anyone's.
ATTRIBUTES = frozenset(
    {
        # GenAI (v1.41.0)
        "gen_ai.operation.name",
        "gen_ai.provider.name",
        "gen_ai.agent.name",
        "gen_ai.request.model",
        "gen_ai.request.max_tokens",
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "gen_ai.token.type",
        "gen_ai.tool.name",
        "gen_ai.tool.type",
        "gen_ai.tool.call.id",
        "gen_ai.conversation.id",
        # general conventions
        "error.type",
        "user.hash",
        "http.request.method",
        "http.route",
        "http.response.status_code",
        # the platform's own
        "agentfn.generation.id",
        "agentfn.tier",
        "agentfn.channel",
        "agentfn.outcome",
        "agentfn.status",
        "agentfn.limit",
        "agentfn.step",
        "agentfn.rounds",
        "agentfn.steps",
        "agentfn.memory.kind",
        "agentfn.memory.entries",
        "agentfn.page.bytes",
        "agentfn.page.cached",
    }
)

# Metric name -> (kind, unit, description, explicit bucket boundaries or None).
DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]
METRICS: dict[str, tuple[str, str, str, list[float] | None]] = {
    "gen_ai.client.operation.duration": (
        "histogram",
        "s",
        "GenAI operation duration (engine rounds, tool executions)",
        DURATION_BUCKETS,
    ),
    "gen_ai.client.token.usage": ("histogram", "{token}", "Tokens read and written by the engine, per round", TOKEN_BUCKETS),
    "agentfn.turns": ("counter", "{turn}", "Turns of an agent, by outcome", None),
    "agentfn.steps": ("counter", "{step}", "Tool steps of turns, by tool and status", None),
    "agentfn.budget.refusals": (
        "counter",
        "{refusal}",
        "Refused for a budget: the caller's day of tokens, a turn's cap, the day's runs",
        None,
    ),
    "agentfn.recall.duration": ("histogram", "s", "Memory's recall, from request to answer", DURATION_BUCKETS),
    "agentfn.recall.entries": ("histogram", "{entry}", "Entries a recall returned", [0, 1, 2, 3, 4, 5, 10, 20]),
    "agentfn.pages": ("counter", "{page}", "Pages the page fetcher opened, by outcome", None),
    "agentfn.runs": ("counter", "{run}", "Sandboxed code runs, by the limit that stopped them (none: ran to its end)", None),
}


@dataclass(frozen=True)
class TelemetrySettings(Settings):
    """The OpenTelemetry SDK's standard names; the exporter itself reads the headers (and its timeout and
    certificate)."""

    endpoint: str = setting(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "",
        "the collector's OTLP/HTTP base URL (`/v1/traces`, `/v1/metrics` added)",
        shown="(none: nothing exported)",
    )
    traces_endpoint: str = setting(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "", "the traces' full URL (only traces are exported when only it is set)"
    )
    metrics_endpoint: str = setting(
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "", "the metrics' full URL (only metrics are exported when only it is set)"
    )
    headers: str = setting(
        "OTEL_EXPORTER_OTLP_HEADERS",
        "",
        "headers for the collector, e.g. an API key (the chart's `telemetry.headersSecret`; read by the exporter)",
    )
    service_name: str | None = setting(
        "OTEL_SERVICE_NAME", None, "the service name of the spans and metrics", shown="`agentfn-<part>`"
    )
    semconv_opt_in: str = setting(
        "OTEL_SEMCONV_STABILITY_OPT_IN",
        "gen_ai_latest_experimental",
        "the GenAI conventions' version emitted: the latest experimental one (v1.41.0); set when unset",
    )
    sdk_disabled: bool = setting("OTEL_SDK_DISABLED", False, "`true`: export nothing even with an endpoint", shown="`false`")


_state: dict[str, Any] = {}  # set by `setup` in this process: tracer, meter, instruments, propagator


def enabled() -> bool:
    return bool(_state)


def setup(service: str, env: Mapping[str, str] | None = None) -> bool:
    """Start exporting for this process, if the environment names a collector; True when on. Idempotent."""
    env = os.environ if env is None else env
    if _state:
        return True
    settings = TelemetrySettings.from_env(env)
    base = settings.endpoint.rstrip("/")
    traces = settings.traces_endpoint or (base + "/v1/traces" if base else "")
    metrics = settings.metrics_endpoint or (base + "/v1/metrics" if base else "")
    if settings.sdk_disabled or not (traces or metrics):
        return False
    os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", settings.semconv_opt_in)
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    # One instance per process (gunicorn workers each export their own series).
    resource = Resource.create(
        {
            "service.name": settings.service_name or f"agentfn-{service}",
            "service.namespace": "agentfn",
            "service.instance.id": uuid.uuid4().hex,
        }
    )
    state: dict[str, Any] = {"propagator": TraceContextTextMapPropagator()}
    if traces:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces)))
        state["tracer_provider"] = provider
        state["tracer"] = provider.get_tracer(SCOPE, schema_url=SCHEMA_URL)
    if metrics:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View

        views = [
            View(instrument_name=name, aggregation=ExplicitBucketHistogramAggregation(buckets))
            for name, (_, _, _, buckets) in METRICS.items()
            if buckets
        ]
        provider = MeterProvider(
            resource=resource,
            views=views,
            metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=metrics))],
        )
        meter = provider.get_meter(SCOPE, schema_url=SCHEMA_URL)
        state["meter_provider"] = provider
        state["instruments"] = {
            name: (meter.create_histogram if kind == "histogram" else meter.create_counter)(
                name, unit=unit, description=text
            )
            for name, (kind, unit, text, _) in METRICS.items()
        }
    _state.update(state)
    return True


def clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Only the allowed keys, only plain values: the one gate between the platform's code and an exporter."""
    return {
        k: v for k, v in attributes.items() if k in ATTRIBUTES and v is not None and isinstance(v, (str, bool, int, float))
    }


def error_type(problem_type: str | None, status: int | None = None) -> str:
    """A short, low-cardinality kind of error: a problem type's last segment (`daily-limit`), else the status."""
    if problem_type and problem_type != "about:blank":
        return problem_type.rstrip("/").rsplit("/", 1)[-1][:64]
    return str(status or "error")


# --- spans ---------------------------------------------------------------------------------------------


class Span:
    """A started span, or (tracing off) nothing: `attrs`, `fail` and `end` are safe either way."""

    __slots__ = ("_span",)

    def __init__(self, span: Any = None):
        self._span = span

    def attrs(self, attributes: Mapping[str, Any]) -> None:
        if self._span is not None:
            self._span.set_attributes(clean(attributes))

    def fail(self, error_type: str) -> None:
        """Mark the span failed with a kind of error (a problem's type, a status); never an exception's message."""
        if self._span is not None:
            from opentelemetry.trace import Status, StatusCode

            self._span.set_attribute("error.type", error_type)
            self._span.set_status(Status(StatusCode.ERROR))

    def end(self) -> None:
        if self._span is not None:
            self._span.end()


OFF = Span()


def start(name: str, attributes: Mapping[str, Any], kind: str = "internal", parent: Any = None) -> Span:
    """A span started under the current one (or `parent`, a context) and not made current; `end` it."""
    tracer = _state.get("tracer")
    if tracer is None:
        return OFF
    from opentelemetry.trace import SpanKind

    return Span(
        tracer.start_span(
            name,
            context=parent,
            kind=getattr(SpanKind, kind.upper()),
            attributes=clean(attributes),
            record_exception=False,
            set_status_on_exception=False,
        )
    )


@contextmanager
def span(name: str, attributes: Mapping[str, Any], kind: str = "internal") -> Iterator[Span]:
    """A span current for the block. An exception leaving the block marks it failed by its kind (a problem's type, a
    refusal's kind) or its class, never its message."""
    started = start(name, attributes, kind)
    if started is OFF:
        yield OFF
        return
    from opentelemetry import context, trace

    token = context.attach(trace.set_span_in_context(started._span))
    try:
        yield started
    except BaseException as error:
        if not isinstance(error, GeneratorExit):
            kind = getattr(error, "kind", None)
            if not isinstance(kind, str):
                problem_type = getattr(error, "type", None)
                kind = (
                    error_type(problem_type, getattr(error, "status", None))
                    if isinstance(problem_type, str)
                    else type(error).__name__
                )
            started.fail(kind)
        raise
    finally:
        context.detach(token)
        started.end()


def within(current: Span, items: Iterator[Any]) -> Iterator[Any]:
    """A generator's items, its code run with `current` as the current span, and nothing else's between items
    (a streamed turn runs in pieces, interleaved with the server writing them out)."""
    if current is OFF:
        yield from items
        return
    from opentelemetry import context, trace

    ctx = trace.set_span_in_context(current._span)
    while True:
        token = context.attach(ctx)
        try:
            item = next(items)
        except StopIteration:
            return
        finally:
            context.detach(token)
        try:
            yield item
        except GeneratorExit:  # the reader left: the turn's own clean-up runs now, under its span
            token = context.attach(ctx)
            try:
                items.close()
            finally:
                context.detach(token)
            raise


def extract(headers: Mapping[str, str]) -> Any:
    """The caller's trace context from `traceparent` (W3C), or None."""
    propagator = _state.get("propagator")
    return propagator.extract(headers) if propagator is not None and "traceparent" in headers else None


def inject(headers: MutableMapping[str, str]) -> None:
    """`traceparent` for the current span, onto an internal call's headers."""
    propagator = _state.get("propagator")
    if propagator is not None and "tracer" in _state:
        propagator.inject(headers)


def annotate(attributes: Mapping[str, Any]) -> None:
    """Set attributes on the current span (a door's work adds what it learnt to its request's span)."""
    if "tracer" in _state:
        from opentelemetry import trace

        trace.get_current_span().set_attributes(clean(attributes))


def current() -> Any:
    """The current trace context, to start spans under later (a streamed answer runs after its request's code)."""
    if "tracer" not in _state:
        return None
    from opentelemetry import context

    return context.get_current()


def attach(parent_span: Span) -> Any:
    if parent_span is OFF:
        return None
    from opentelemetry import context, trace

    return context.attach(trace.set_span_in_context(parent_span._span))


def detach(token: Any) -> None:
    if token is not None:
        from opentelemetry import context

        context.detach(token)


# --- metrics -------------------------------------------------------------------------------------------


def record(name: str, value: float, attributes: Mapping[str, Any]) -> None:
    """Add to a counter or record into a histogram of `METRICS`; nothing when metrics are off."""
    instruments = _state.get("instruments")
    if instruments is None:
        return
    instrument = instruments[name]
    if METRICS[name][0] == "histogram":
        instrument.record(value, clean(attributes))
    else:
        instrument.add(value, clean(attributes))
