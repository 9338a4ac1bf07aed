"""OpenTelemetry spans of a batch run's phases, only where asked for.

When the `opentelemetry-sdk` package is installed (the `otel` extra) and an OTLP endpoint is set
(`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, OpenTelemetry's own
variables), each batch run's phases (checks, Spark job, manifests, commits) are spans of one
trace. A process that set a tracer provider of its own keeps it; otherwise one is set that exports
over OTLP/HTTP (`opentelemetry-exporter-otlp-proto-http`). Without the package or the endpoint a
span is a no-op, and nothing else changes. No Dagster imports.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any, Iterator

log = logging.getLogger(__name__)
ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
NAME = "matos_dagster"

_tracer: Any = None
_decided = False


def tracer() -> Any:
    """The tracer of the spans, or None when tracing is off (decided once per process)."""
    global _tracer, _decided
    if _decided:
        return _tracer
    _decided = True
    if not any(os.environ.get(name) for name in ENDPOINTS):
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
    except ImportError:
        log.info("an OTLP endpoint is set but opentelemetry-sdk is not installed: no spans "
                 "(pip install 'matos-dagster[otel]')")
        return None
    if not isinstance(trace.get_tracer_provider(), TracerProvider):  # nobody set one: ours, to the endpoint
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError:
            log.info("opentelemetry-exporter-otlp-proto-http is not installed: no spans "
                     "(pip install 'matos-dagster[otel]')")
            return None
        provider = TracerProvider(resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME",
                                                                                             "matos-dagster")}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
    _tracer = trace.get_tracer(NAME)
    return _tracer


def reset() -> None:
    """Decide again at the next span (after the environment or the tracer provider changed)."""
    global _tracer, _decided
    _tracer, _decided = None, False


@contextlib.contextmanager
def span(name: str, **attributes: Any) -> Iterator[None]:
    """A span named `matos.<name>` with these attributes, when tracing is on; nothing otherwise."""
    t = tracer()
    if t is None:
        yield
        return
    with t.start_as_current_span(f"matos.{name}", attributes={k: v for k, v in attributes.items() if v is not None}):
        yield
