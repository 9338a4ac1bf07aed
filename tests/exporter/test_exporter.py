"""The metrics exporter on a real Kafka, Swift and Dagster instance: what a scrape of /metrics says of an
archive, and that a scrape never waits on a Kafka that does not answer beyond its timeout."""

from __future__ import annotations

import shutil
import ssl
import socket
import subprocess
import time
import urllib.error

import pytest
from dagster import DagsterRun, DagsterRunStatus
from helpers import missing
from metrics_stack import AGE_S, expiry_record, of, record_compact_run, record_tick, scrape, values
from prometheus_client.parser import text_string_to_metric_families

from matos_dagster.core.erase import keys, request
from matos_dagster.core.erase.rewrite import PartitionErased
from matos_dagster.core.erase.run import record_of
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.runs import estate, heartbeat, policy
from matos_dagster.core.runs.policy import PartitionState
from matos_dagster.core.swift import layout
from matos_dagster.dagster_compat import RUN_KEY_TAG
from matos_dagster.exporter import serve_metrics
from matos_dagster.resources import KafkaResource
from matos_dagster.turns import BATCH_TAG

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
    assert of(vals, "matos_windows_complete_until_timestamp_seconds", topic=t) == 1704499200  # 2024-01-06T00:00Z
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
    # It gives up after 5 s: long after the scrape's timeout, and soon enough for the fixture's close to wait.
    side.kafka = KafkaResource(bootstrap_servers=f"127.0.0.1:{dead}", timeout_s=5)
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
        missing("promtool (Debian: apt-get install --no-install-recommends prometheus)")
    _, server = served
    p = subprocess.run(["promtool", "check", "metrics"], input=scrape(server.url), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


def test_the_lag_sensors_cursor_and_ticks_give_the_partitions_waiting_for_an_operator_and_the_oldest_range_waiting(
        served, instance):
    archived, server = served
    t = archived.topic
    now_ms = time.time() * 1000
    states = {  # partition 0's range failed its last attempt (given up); partition 1's failed its first, asked again 30 s ago
        (t, 0): PartitionState(next=10, key=OffsetRange(t, 0, 6, 10).key, attempt=policy.MAX_ATTEMPTS, done=False,
                               committed=6, requested_ms=now_ms - 600_000, run="rk-0", stopped=True),
        (t, 1): PartitionState(next=10, key=OffsetRange(t, 1, 0, 10).key, attempt=1, done=False,
                               requested_ms=now_ms - 30_000, run="rk-1"),
    }
    for i in (0, 1):
        instance.add_run(DagsterRun(job_name="archive_ranges", run_id=f"{i:08d}-0000-0000-0000-000000000000",
                                    tags={RUN_KEY_TAG: f"rk-{i}"}, status=DagsterRunStatus.FAILURE))
    record_tick(instance, "lag", estate.write_cursor(states, {}), took_s=1.5, ago_s=10)
    record_tick(instance, "monitor", None, took_s=4.0, ago_s=20)
    vals = values(scrape(server.url))
    assert of(vals, "matos_waiting_for_operator", topic=t, partition=0) == 1
    assert of(vals, "matos_waiting_for_operator", topic=t, partition=1) == 0
    assert 30 <= of(vals, "matos_oldest_range_waiting_seconds") < 90  # partition 1's: 0's waits for an operator
    assert of(vals, "matos_sensor_tick_duration_seconds", sensor="lag") == pytest.approx(1.5)
    assert 10 <= of(vals, "matos_sensor_tick_age_seconds", sensor="lag") < 70
    assert of(vals, "matos_sensor_tick_duration_seconds", sensor="monitor") == pytest.approx(4.0)


def test_with_tls_and_basic_auth_a_scrape_without_the_password_is_refused(kafka, instance, archived, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    server = serve_metrics(archived.topics, kafka, instance=instance, address="127.0.0.1", port=0,
                           tls_cert=str(cert), tls_key=str(key), user="prometheus", password="s3cret")
    try:
        context = ssl.create_default_context(cafile=str(cert))
        assert server.url.startswith("https://")
        with pytest.raises(urllib.error.HTTPError) as refused:
            scrape(server.url, context=context)
        assert refused.value.code == 401
        with pytest.raises(urllib.error.HTTPError):
            scrape(server.url, ("prometheus", "wrong"), context=context)
        vals = values(scrape(server.url, ("prometheus", "s3cret"), context=context))
        assert of(vals, "matos_lag_records", topic=archived.topic, partition=1) == 10
    finally:
        server.stop()
        server.collector.close()


def test_batch_runs_created_and_ended_since_the_exporter_started_are_counted_once_each(served, instance):
    archived, server = served
    first = values(scrape(server.url))
    assert of(first, "matos_ranges_requested_total") == 0 and of(first, "matos_runs_dead_total") == 0

    def run(i: int, status, ranges: int, **tags) -> None:
        instance.add_run(DagsterRun(job_name="archive_ranges", run_id=f"{i:08d}-1111-0000-0000-000000000000",
                                    status=status, tags={BATCH_TAG: "true", "matos/ranges": str(ranges), **tags}))

    run(1, DagsterRunStatus.NOT_STARTED, 4)  # queued (a queued run needs a code location to be made here)
    run(2, DagsterRunStatus.FAILURE, 3)
    run(3, DagsterRunStatus.FAILURE, 2, **{heartbeat.TAG: f"{time.time() - 3600:.3f}"})  # its beat stopped long ago
    run(4, DagsterRunStatus.STARTED, 1)
    for _ in range(2):  # a second scrape counts nothing again
        vals = values(scrape(server.url))
        assert of(vals, "matos_ranges_requested_total") == 4 + 3 + 2 + 1
        assert of(vals, "matos_ranges_failed_total") == 3 + 2  # none of theirs archived
        assert of(vals, "matos_runs_dead_total") == 1
        assert of(vals, "matos_runs", state="queued") == 1 and of(vals, "matos_runs", state="in_progress") == 1
        assert of(vals, "matos_archived_records_total", topic=archived.topic, partition=0) == 0


def test_the_records_erased_and_expired_are_counted_per_partition_from_the_archives_records(served, swift):
    archived, server = served
    t = archived.topic
    scrape(server.url)  # the partitions Kafka has, found
    first = values(scrape(server.url))
    assert [of(first, "matos_records_erased_total", topic=t, partition=p) for p in (0, 1)] == [0, 0]
    assert not [k for k in first if k[0] == "matos_records_expired_total"], "none expired: no series"
    # Two erasures' records, as the forget job writes them when done (core/erase/run.py): the second
    # also erased a record of partition 0 in an earlier log of the topic. And an expiry's record.
    with swift.store() as store:
        base = store.params.prefix
        for offsets, earlier in (({1, 3}, []), ({5}, [PartitionErased(t, 0, {0}, incarnation=2)])):
            req = request.make(keys.erasure_key("an erasure key for the tests, 32b"), [b"alice"], "ticket", {t: {0: 6}})
            outcomes = [PartitionErased(t, 0, offsets), PartitionErased(t, 1, set()), *earlier]
            store.put_json(layout.erasure_record_name(base, req.id), record_of(req, "run", outcomes))
        store.put_json(layout.join(base, "_expiry", "records", "e1.json"), expiry_record(t, {1: 7}))
    cached = values(scrape(server.url))  # Swift's records are listed at most once a minute
    assert of(cached, "matos_records_erased_total", topic=t, partition=0) == 0
    server.collector.components["swift"].__self__.read_at = float("-inf")  # a minute later
    vals = values(scrape(server.url))
    assert of(vals, "matos_records_erased_total", topic=t, partition=0) == 2 + 1 + 1
    assert of(vals, "matos_records_erased_total", topic=t, partition=1) == 0
    assert of(vals, "matos_records_expired_total", topic=t, partition=1) == 7
    assert not [k for k in vals if k[0] == "matos_records_expired_total" and ("partition", "0") in k[1]]
    assert of(vals, "matos_up", component="swift") == 1


def test_the_compaction_backlog_counts_from_where_the_latest_compact_run_left_each_partition_unmerged(
        served, instance):
    archived, server = served
    t = archived.topic
    # No compact run yet: partition 0's archive, [0, 6) and committed, is all unmerged; 1 committed nothing.
    assert of(values(scrape(server.url)), "matos_compaction_backlog_offsets", topic=t) == 6
    record_compact_run(instance, {t: {"0": 4}})  # it merged [0, 4): the ranges from 4 on wait
    assert of(values(scrape(server.url)), "matos_compaction_backlog_offsets", topic=t) == 6 - 4
    record_compact_run(instance, {t: {"0": 6}, "another": {"0": 2}})
    assert of(values(scrape(server.url)), "matos_compaction_backlog_offsets", topic=t) == 0
