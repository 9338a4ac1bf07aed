"""The metrics exporter on a real Kafka, Swift and Dagster instance: what a scrape of /metrics says of an
archive, and that a scrape never waits on a Kafka that does not answer beyond its timeout."""

from __future__ import annotations

import base64
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid

import pytest
from dagster import instance_for_test
from helpers import produce
from prometheus_client.parser import text_string_to_metric_families

from matos_dagster.core import topics as topics_file
from matos_dagster.core.kafka import many
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import layout
from matos_dagster.exporter import serve_metrics
from matos_dagster.resources import KafkaResource
from matos_dagster.sensors.monitor import monitor_sensor
from dagster import build_sensor_context

AGE_S = 300  # the records are stamped this long ago


@pytest.fixture
def instance():
    with instance_for_test() as instance:
        yield instance


class Archived:
    """A topic of 2 partitions of 10 records stamped AGE_S ago: [0, 6) of partition 0 archived (a manifest in
    Swift, offset 6 committed), nothing of partition 1; the monitor's verdict of it reported."""

    def __init__(self, kafka, swift, instance, new_topic):
        self.topic = new_topic(partitions=2)
        self.group = f"g-{uuid.uuid4().hex[:6]}"
        self.topics = topics_file.parse({"topics": [{"name": self.topic, "batch": {"age_s": 60}}]},
                                        default_group=self.group)
        stamp = int((time.time() - AGE_S) * 1000)
        for p in (0, 1):
            produce(kafka, self.topic, [(b"k", b"v", [])] * 10, partition=p, timestamp=stamp)
        with swift.store() as store:
            store.put_json(layout.manifest_name(store.params.prefix, OffsetRange(self.topic, 0, 0, 6)),
                           {"topic": self.topic, "partition": 0, "start": 0, "end": 6, "objects": []})
        many.commit(kafka, self.group, {(self.topic, 0): 6})
        sensor = monitor_sensor(self.topics, 300, 30)
        result = sensor(build_sensor_context(instance=instance, sensor_name=sensor.name,
                                             resources={"kafka": kafka, "swift": swift}))
        for e in result.asset_events:
            instance.report_runless_asset_event(e)


def scrape(url: str, auth: tuple[str, str] | None = None, context=None) -> str:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    with urllib.request.urlopen(request, timeout=30, context=context) as r:
        return r.read().decode()


def values(text: str) -> dict[tuple, float]:
    """{(sample name, (label, value) pairs sorted): value} of an exposition."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def of(vals: dict, name: str, **labels) -> float:
    want = {k: str(v) for k, v in labels.items()}
    found = [v for (n, ls), v in vals.items() if n == name and want.items() <= dict(ls).items()]
    assert len(found) == 1, f"{name} {labels}: {found}"
    return found[0]


@pytest.fixture
def served(kafka, swift, instance, new_topic):
    archived = Archived(kafka, swift, instance, new_topic)
    server = serve_metrics(archived.topics, kafka, instance=instance, address="127.0.0.1", port=0, timeout_s=5)
    try:
        yield archived, server
    finally:
        server.stop()
        server.collector.close()


def test_a_scrape_gives_each_partitions_offsets_lag_in_records_and_seconds_and_the_monitors_verdict(served):
    archived, server = served
    vals = values(scrape(server.url))
    t = archived.topic
    assert of(vals, "matos_up", component="kafka") == 1 and of(vals, "matos_up", component="dagster") == 1
    assert of(vals, "matos_committed_offset", topic=t, partition=0) == 6
    assert of(vals, "matos_committed_offset", topic=t, partition=1) == -1
    assert of(vals, "matos_log_end_offset", topic=t, partition=1) == 10
    assert of(vals, "matos_lag_records", topic=t, partition=0) == 4
    assert of(vals, "matos_lag_records", topic=t, partition=1) == 10
    for p in (0, 1):  # the age of the first record waiting: stamped AGE_S ago
        assert AGE_S - 5 <= of(vals, "matos_lag_seconds", topic=t, partition=p) <= AGE_S + 120
        assert of(vals, "matos_monitor_verdict", topic=t, partition=p) in (0, 1, 2)
        assert of(vals, "matos_lost_offsets", topic=t, partition=p) == 0
    assert of(vals, "matos_batch_max_age_seconds", topic=t) == 60
    assert 0 <= of(vals, "matos_monitor_verdict_age_seconds", topic=t) < 120
    # Every metric has its HELP, and a later scrape's lag in seconds has grown with the clock.
    assert all(f.documentation for f in text_string_to_metric_families(scrape(server.url)))
    time.sleep(1.1)
    later = values(scrape(server.url))
    assert of(later, "matos_lag_seconds", topic=t, partition=1) > of(vals, "matos_lag_seconds", topic=t, partition=1)


def test_a_scrape_serves_the_last_known_values_with_up_0_when_kafka_does_not_answer_within_the_timeout(served):
    archived, server = served
    first = values(scrape(server.url))
    with socket.socket() as s:  # a port nobody listens on: a Kafka that never answers
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    side = server.collector.components["kafka"].__self__
    side.kafka = KafkaResource(bootstrap_servers=f"127.0.0.1:{dead}", timeout_s=30)
    server.collector.timeout_s = 1.0
    t0 = time.monotonic()
    text = scrape(server.url)
    took = time.monotonic() - t0
    vals = values(text)
    assert took < 3, f"the scrape waited {took:.1f} s"
    assert of(vals, "matos_up", component="kafka") == 0 and of(vals, "matos_up", component="dagster") == 1
    assert of(vals, "matos_scrape_errors_total", component="kafka") == 1
    t = archived.topic
    assert of(vals, "matos_lag_records", topic=t, partition=1) == of(first, "matos_lag_records", topic=t, partition=1)


def test_promtool_accepts_the_exposition(served):
    if shutil.which("promtool") is None:
        pytest.skip("promtool is not installed (Debian: apt-get install --no-install-recommends prometheus)")
    _, server = served
    p = subprocess.run(["promtool", "check", "metrics"], input=scrape(server.url), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
