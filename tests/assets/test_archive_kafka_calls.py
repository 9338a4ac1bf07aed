"""What one archive run asks Kafka: its partition and committed offset once, not once per range.

The run checks the partition and reads the committed offset once (archive.check); the offset-order
walk's plan and each archive_range then start from that, or from what the range before left
(archive.in_turn). Real Kafka, Swift and Spark, through the asset as Dagster runs it; the calls are
counted by a KafkaResource that notes each question before asking it.
"""

from __future__ import annotations

import time
import uuid
from typing import ClassVar

import pytest
from dagster import DagsterInstance, materialize
from helpers import produce

from matos_dagster.assets.archive import archive_asset
from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.topics import TopicConfig
from matos_dagster.resources import KafkaResource


class CountingKafka(KafkaResource):
    """The real resource; each question to Kafka noted in `calls` with its seconds (Dagster copies
    resources, so the notes are the class's)."""

    calls: ClassVar[list[tuple[str, float]]] = []

    def _noted(self, name, call, *args, **kw):
        t0 = time.perf_counter()
        try:
            return call(*args, **kw)
        finally:
            CountingKafka.calls.append((name, time.perf_counter() - t0))

    def check_partition(self, *a, **kw):
        return self._noted("check_partition", super().check_partition, *a, **kw)

    def watermarks(self, *a, **kw):
        return self._noted("watermarks", super().watermarks, *a, **kw)

    def committed(self, *a, **kw):
        return self._noted("committed", super().committed, *a, **kw)

    def commit(self, *a, **kw):
        return self._noted("commit", super().commit, *a, **kw)


@pytest.fixture
def instance(tmp_path):
    with DagsterInstance.local_temp(str(tmp_path)) as instance:
        yield instance


def test_a_run_checks_its_partition_once_and_each_range_starts_from_the_offset_the_one_before_left(
        kafka, new_topic, swift, spark_resource, instance):
    """Range 3 archived out of order (its manifest there, the offset committed at 10: a hole at [10, 20)),
    then the run of 3 with 2 registered and pending: it archives 2 first, whose commit passes over 3
    (to 30), so 3 is only verified, from the offset 2's archive_range left, without asking Kafka again."""
    topic = new_topic()
    produce(kafka, topic, [(b"k", f"v{i}".encode(), []) for i in range(30)])
    cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}")
    one, two, three = (OffsetRange(topic, 0, a, a + 10) for a in (0, 10, 20))
    with swift.store() as store:
        archive_range(one, cfg, kafka, store, spark_resource.spark_session)
        assert archive_range(three, cfg, kafka, store, spark_resource.spark_session).committed_after == 10

    instance.add_dynamic_partitions(cfg.partitions_name, [one.key, two.key, three.key])
    counting = CountingKafka(bootstrap_servers=kafka.bootstrap_servers, timeout_s=kafka.timeout_s)
    CountingKafka.calls.clear()
    result = materialize([archive_asset(cfg)], partition_key=three.key, instance=instance,
                         resources={"kafka": counting, "swift": swift, "spark": spark_resource})
    (mat,) = result.asset_materializations_for_node(cfg.asset_name)
    assert mat.metadata["archived_first"].value == [two.key]
    assert mat.metadata["committed_offset"].value == 30
    # 3 started from the offset 2 left (30), not from the 10 the run read first: verified, not rewritten.
    assert mat.metadata["already_archived"].value is True and mat.metadata["records_written"].value == 0

    calls = [name for name, _ in CountingKafka.calls]
    assert calls == [
        "check_partition", "committed",  # the run's one check (the walk's plan starts from it)
        "watermarks", "committed", "commit", "committed",  # 2: its log end; advance's read, commit, read-back
        "watermarks",  # 3: its log end only (archived and committed: nothing to commit)
    ], calls  # before: a check_partition and a committed more per range (11 calls, not 7)
    for name in ("check_partition", "committed"):  # what a call saved costs (not asserted: the load varies)
        took = sorted(s for n, s in CountingKafka.calls if n == name)
        print(f"{name}: {len(took)} call(s), {', '.join(f'{s * 1000:.1f} ms' for s in took)}")
