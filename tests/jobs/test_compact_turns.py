"""Compaction takes each partition's turn, as archive runs and erasures do: it never switches a merge
in, nor deletes a replaced folder, in a partition another run is writing in."""

from __future__ import annotations

import threading
import time
import uuid

from dagster import DagsterInstance, DagsterRunStatus
from dagster._core.test_utils import create_run_for_test
from helpers import produce

from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import layout
from matos_dagster.core.topics import TopicConfig
from matos_dagster.jobs.compact import compact_job
from matos_dagster.turns import TOPIC_PARTITION_TAG, TURN_TAG, claim

HELD_S = 6


def test_compaction_waits_for_an_erasure_holding_the_partitions_turn_and_holds_it_itself_while_it_merges(
        kafka, swift, spark_resource, new_topic, tmp_path):
    topic = new_topic()
    cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}", compact_bytes=1500, compact_min_age_s=0.0)
    produce(kafka, topic, [(f"k{i}".encode(), f"value {i} ".encode() * 10, []) for i in range(20)], partition=0)
    with swift.store() as store:
        for a in (0, 10):
            archive_range(OffsetRange(topic, 0, a, a + 10), cfg, kafka, store, spark_resource.spark_session)
        merged = layout.manifest_name(layout.join(store.params.prefix, cfg.prefix), OffsetRange(topic, 0, 0, 20))
        with DagsterInstance.local_temp(str(tmp_path)) as instance:
            # An erasure of the partition in its turn (jobs/forget.py claims so, partition by partition).
            eraser = create_run_for_test(instance, status=DagsterRunStatus.STARTED, tags={"kind": "erasure"})
            claim(instance, eraser.run_id, {f"{topic}/0"}, {TOPIC_PARTITION_TAG: f"{topic}/0"})
            seen: dict = {}

            def compact():
                seen["result"] = compact_job([cfg]).execute_in_process(
                    run_config={"ops": {"compact_archive": {"config": {"topic": topic}}}}, instance=instance,
                    resources={"kafka": kafka, "swift": swift, "spark": spark_resource}, raise_on_error=False)

            runner = threading.Thread(target=compact)
            runner.start()
            try:
                deadline = time.monotonic() + HELD_S
                while time.monotonic() < deadline:
                    assert store.get_json(merged) is None, "compaction switched in while an erasure held the turn"
                    time.sleep(0.5)
                (compaction,) = [r for r in instance.get_runs() if r.run_id != eraser.run_id]
                # It waits, having claimed the partition: a run claiming now (an archive run) orders after it.
                assert compaction.status == DagsterRunStatus.STARTED
                assert compaction.tags[TOPIC_PARTITION_TAG] == f"{topic}/0" and compaction.tags[TURN_TAG] == "2"
            finally:
                instance.report_run_failed(instance.get_run_by_id(eraser.run_id), "the erasure's turn ends")
                runner.join(300)
            result = seen["result"]
            assert result.success
            assert store.get_json(merged) is not None
            said = [e.user_message for e in instance.all_logs(result.run_id)]
            assert any(f"run {eraser.run_id}" in m and f"is erasing in {topic}/0" in m for m in said), said
            # The turn is released once the partition is compacted: the run names no partition any more.
            assert instance.get_run_by_id(result.run_id).tags[TOPIC_PARTITION_TAG] == ""
