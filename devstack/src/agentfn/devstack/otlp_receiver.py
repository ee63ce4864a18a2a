"""TEST DOUBLE of an OpenTelemetry collector (outside this project): an OTLP/HTTP receiver on loopback.

It takes `POST /v1/traces` and `POST /v1/metrics` as binary protobuf (the exporters' default), decodes them
with the official `opentelemetry-proto` messages, and keeps what arrived: spans (with their service) and
metric data points (name, attributes, value), for the tests to read.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flask import Flask, Response, request
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest, ExportTraceServiceResponse
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from agentfn.devstack.harness.servers import Served


def value_of(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value_of(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


def attributes(kvs) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in kvs}


@dataclass
class Span:
    service: str
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    status: int  # 0 unset, 1 ok, 2 error
    status_message: str
    events: list[tuple[str, dict[str, Any]]]
    scope: str
    schema_url: str


@dataclass
class Point:
    service: str
    metric: str
    unit: str
    attributes: dict[str, Any]
    value: float  # a sum's value, a histogram's count
    total: float | None = None  # a histogram's sum


@dataclass
class Received:
    spans: list[Span] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)  # every body as it came (decompressed), for a scan of all of it


def create_app(received: Received, lock: threading.Lock) -> Flask:
    app = Flask("otlp_receiver")

    def body() -> bytes:
        data = request.get_data()
        return gzip.decompress(data) if request.headers.get("Content-Encoding") == "gzip" else data

    @app.post("/v1/traces")
    def traces():
        data = body()
        message = ExportTraceServiceRequest.FromString(data)
        spans = []
        for rs in message.resource_spans:
            service = attributes(rs.resource.attributes).get("service.name", "")
            for ss in rs.scope_spans:
                for s in ss.spans:
                    spans.append(
                        Span(
                            service,
                            s.name,
                            s.kind,
                            s.trace_id.hex(),
                            s.span_id.hex(),
                            s.parent_span_id.hex(),
                            attributes(s.attributes),
                            s.status.code,
                            s.status.message,
                            [(e.name, attributes(e.attributes)) for e in s.events],
                            ss.scope.name,
                            ss.schema_url,
                        )
                    )
        with lock:
            received.raw.append(data)
            received.spans.extend(spans)
        return Response(ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf")

    @app.post("/v1/metrics")
    def metrics():
        data = body()
        message = ExportMetricsServiceRequest.FromString(data)
        points = []
        for rm in message.resource_metrics:
            service = attributes(rm.resource.attributes).get("service.name", "")
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    kind = m.WhichOneof("data")
                    for p in getattr(m, kind).data_points:
                        if kind == "histogram":
                            points.append(Point(service, m.name, m.unit, attributes(p.attributes), p.count, p.sum))
                        else:
                            points.append(
                                Point(
                                    service,
                                    m.name,
                                    m.unit,
                                    attributes(p.attributes),
                                    p.as_int if p.WhichOneof("value") == "as_int" else p.as_double,
                                )
                            )
        with lock:
            received.raw.append(data)
            received.points.extend(points)
        return Response(ExportMetricsServiceResponse().SerializeToString(), content_type="application/x-protobuf")

    return app


class Receiver(Served):
    def __init__(self):
        self.received, self.lock = Received(), threading.Lock()
        super().__init__(create_app(self.received, self.lock))

    def spans(self, trace_id: str | None = None) -> list[Span]:
        with self.lock:
            return [s for s in self.received.spans if trace_id is None or s.trace_id == trace_id]

    def points(self) -> list[Point]:
        with self.lock:
            return list(self.received.points)

    def raw(self) -> bytes:
        with self.lock:
            return b"".join(self.received.raw)

    def wait_for(self, check: Callable[[], Any], timeout: float = 20) -> Any:
        """Poll until `check()` is truthy (exporters send in batches), and return it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = check()
            if found:
                return found
            time.sleep(0.1)
        raise AssertionError(f"the receiver did not get what was awaited in {timeout}s")
