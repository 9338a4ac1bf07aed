"""A batch run's phases as OpenTelemetry spans, when the SDK is installed and an OTLP endpoint is set;
without the endpoint, no span at all. Spans are caught by the SDK's in-memory exporter."""

from __future__ import annotations

import pytest
from helpers import produce
from samples import config

from matos_dagster.core import tracing
from matos_dagster.core.archive.batch import archive_batch
from matos_dagster.core.offsets.ranges import OffsetRange

otel = pytest.importorskip("opentelemetry.sdk.trace", reason="opentelemetry-sdk (the test extra) is not installed")
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

EXPORTED = InMemorySpanExporter()


@pytest.fixture
def spans(monkeypatch):
    """The spans the process exports; the SDK's provider is set once per process (OpenTelemetry's rule)."""
    if not isinstance(trace.get_tracer_provider(), otel.TracerProvider):
        provider = otel.TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTED))
        trace.set_tracer_provider(provider)
    EXPORTED.clear()
    for name in tracing.ENDPOINTS:
        monkeypatch.delenv(name, raising=False)
    tracing.reset()
    yield EXPORTED
    tracing.reset()


def test_a_batch_runs_checks_spark_job_manifests_and_commits_are_spans_of_one_trace(
        kafka, swift, spark, new_topic, spans, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    topic = new_topic()
    produce(kafka, topic, [(None, b"v", [])] * 20)
    with swift.store() as store:
        done = archive_batch([(OffsetRange(topic, 0, 0, 20), config(topic))], kafka, store, spark)
    assert done.outcomes[0].ok
    got = {s.name: s for s in spans.get_finished_spans()}
    root = got["matos.archive_batch"]
    assert root.attributes["ranges"] == 1
    for phase in ("matos.checks", "matos.spark_job", "matos.manifests", "matos.commits"):
        assert got[phase].parent is not None and got[phase].parent.span_id == root.context.span_id, phase
        assert got[phase].context.trace_id == root.context.trace_id
    assert got["matos.spark_job"].attributes["slices"] >= 1
    order = sorted(("matos.checks", "matos.spark_job", "matos.manifests", "matos.commits"),
                   key=lambda n: got[n].start_time)
    assert order == ["matos.checks", "matos.spark_job", "matos.manifests", "matos.commits"]


def test_without_an_otlp_endpoint_a_batch_run_makes_no_span(kafka, swift, spans):
    with swift.store() as store:  # a topic Kafka lacks: refused in its checks, no Spark needed
        done = archive_batch([(OffsetRange("no-such-topic", 0, 0, 5), config("no-such-topic"))], kafka, store, None)
    assert done.outcomes[0].refused
    assert spans.get_finished_spans() == ()
