"""A small OpenTelemetry trace receiver (OTLP over HTTP, protobuf) for the benches: the spans a
process exports to it, where `env` points the process (core/tracing.py exports a batch run's phases
when OTEL_EXPORTER_OTLP_ENDPOINT is set). Needs opentelemetry-proto (the otel extra)."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Span:
    name: str  # without the project's "matos." prefix (core/tracing.py)
    start: float  # epoch seconds
    end: float
    pid: int | None = None  # of the process that exported it
    attributes: dict = field(default_factory=dict)


class Receiver:
    """An OTLP/HTTP trace receiver on 127.0.0.1 (protobuf, optionally gzip): the spans it was sent."""

    def __init__(self):
        self.spans: list[Span] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
                    ExportTraceServiceRequest,
                    ExportTraceServiceResponse,
                )

                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.spans += spans_of(ExportTraceServiceRequest.FromString(body))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):  # not a line per export on the bench's output
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def env(self) -> dict[str, str]:
        """The environment that makes a process export its spans here, soon after they end, with its PID."""
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{self._server.server_address[1]}",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_BSP_SCHEDULE_DELAY": "200",
                "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS": "otel,process"}

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()


def spans_of(request) -> list[Span]:
    """The spans of an ExportTraceServiceRequest."""
    out = []
    for rs in request.resource_spans:
        pid = _attributes(rs.resource.attributes).get("process.pid")
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(Span(s.name.removeprefix("matos."), s.start_time_unix_nano / 1e9, s.end_time_unix_nano / 1e9,
                                int(pid) if pid is not None else None, _attributes(s.attributes)))
    return out


def _attributes(kvs) -> dict:
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in kvs if kv.value.WhichOneof("value")}
