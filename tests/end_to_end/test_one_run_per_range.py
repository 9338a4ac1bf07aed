"""One run at a time archives in a topic partition, whatever started the runs (issue 21.1).

Dagster's queue limits runs per partition key only for queued runs; a CLI materialisation
runs in its own process. Here the other run is a run record the test holds STARTED on the
same instance, with the claim an archive run writes: the archive run must wait for it, write
nothing meanwhile, and archive once it ends.
"""

from __future__ import annotations

import threading
import time
import uuid

from dagster import DagsterInstance, DagsterRun, DagsterRunStatus, MetadataValue, materialize
from helpers import check_archive, manifests, produce

from matos_dagster.assets.archive import CLAIM_TAG, RANGE_TAG, TOPIC_PARTITION_TAG, archive_asset
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.topics import TopicConfig
from matos_dagster.turns import TURN_TAG


def wait_for(condition, what: str, timeout_s: float = 300):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_an_archive_run_waits_while_another_run_archives_in_its_partition(
        tmp_path, kafka, new_topic, swift, spark_resource):
    topic = new_topic(partitions=2)
    produce(kafka, topic, [(b"k", f"v{i}".encode(), [], i % 2) for i in range(40)])
    cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}")
    key = OffsetRange(topic, 0, 0, 20).key
    with DagsterInstance.local_temp(str(tmp_path)) as instance:
        instance.add_dynamic_partitions(cfg.partitions_name, [key, OffsetRange(topic, 1, 0, 20).key])
        # Another run (say the sensor's) claimed topic/0 a moment ago and is still going.
        other = instance.add_run(DagsterRun(
            job_name="other", run_id=str(uuid.uuid4()), status=DagsterRunStatus.STARTED,
            tags={"dagster/partition": key, "dagster/sensor_name": "lag_test", TOPIC_PARTITION_TAG: f"{topic}/0",
                  RANGE_TAG: f"{topic}/0 [0, 20)", CLAIM_TAG: f"{time.time() - 1:.6f}", TURN_TAG: "1"}))
        resources = {"kafka": kafka, "swift": swift, "spark": spark_resource}
        results = {}

        def archive(k):
            results[k] = materialize([archive_asset(cfg)], partition_key=k, instance=instance,
                                     resources=resources, raise_on_error=False)

        waiting = threading.Thread(target=archive, args=(key,))
        waiting.start()
        try:
            def says_it_waits():
                return any(f"run {other.run_id} (launched by sensor lag_test) is archiving {topic}/0 [0, 20)"
                           in (e.user_message or "") for r in instance.get_runs() if r.job_name != "other"
                           for e in instance.all_logs(r.run_id))
            wait_for(says_it_waits, "the archive run to say that it waits for the other run")
            # Another partition is not held up meanwhile.
            archive(OffsetRange(topic, 1, 0, 20).key)
            assert results[OffsetRange(topic, 1, 0, 20).key].success
            with swift.store() as store:
                assert [m["partition"] for m in manifests(store, topic)] == [1]  # nothing of topic/0 yet
            assert waiting.is_alive()
        finally:
            instance.report_run_failed(instance.get_run_by_id(other.run_id))
            waiting.join(600)
        assert not waiting.is_alive()
        result = results[key]
        assert result.success
        (mat,) = result.asset_materializations_for_node(cfg.asset_name)
        assert mat.metadata["waited_for_other_runs_s"].value > 0
        assert mat.metadata["records"].value == 20
        run = instance.get_run_by_id(result.run_id)
        assert run.tags[RANGE_TAG] == f"{topic}/0 [0, 20)" and run.tags[TOPIC_PARTITION_TAG] == f"{topic}/0"
    with swift.store() as store:
        assert check_archive(kafka, store, topic, cfg.group) == {0: 20, 1: 20}


def _stamps(store, names) -> dict[str, str]:
    """Swift's X-Timestamp of each object: a new one for every PUT, even of the same bytes."""
    conn = store.params.connect()
    try:
        return {n: conn.head_object(store.container, n)["x-timestamp"] for n in names}
    finally:
        conn.close()


def test_a_run_of_a_range_already_archived_only_verifies_it_and_rewrites_nothing(
        tmp_path, kafka, new_topic, swift, spark_resource):
    """What a run that waited for another run of the same range does once that run archived it."""
    from matos_dagster.resources import SparkResource

    topic = new_topic()
    produce(kafka, topic, [(b"k", f"v{i}".encode(), []) for i in range(30)])
    cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}", slice_records=10)
    key = OffsetRange(topic, 0, 0, 30).key
    with DagsterInstance.local_temp(str(tmp_path)) as instance:
        instance.add_dynamic_partitions(cfg.partitions_name, [key])
        first = materialize([archive_asset(cfg)], partition_key=key, instance=instance,
                            resources={"kafka": kafka, "swift": swift, "spark": spark_resource})
        (mat,) = first.asset_materializations_for_node(cfg.asset_name)
        assert mat.metadata["records_written"].value == 30 and not mat.metadata["already_archived"].value
        # Typed for Dagster's plots (ints and floats plot; times are timestamps): see assets/archive.metadata.
        assert mat.metadata["lag_behind_log_end"] == MetadataValue.int(0)  # it archived up to the log end
        assert mat.metadata["start"] == MetadataValue.int(0) and mat.metadata["end"] == MetadataValue.int(30)
        assert isinstance(mat.metadata["seconds_after_newest_record"], type(MetadataValue.float(0.0)))
        assert mat.metadata["seconds_after_newest_record"].value >= 0
        assert isinstance(mat.metadata["archived_at"], type(MetadataValue.timestamp(0.0)))
        with swift.store() as store:
            (doc,) = manifests(store, topic)
            names = [o["name"] for o in doc["objects"]] + [mat.metadata["manifest"].value]
            assert len(names) == 4
            before = _stamps(store, names)
        # No Spark at all for the second run: it must not need one (a session would fail to connect).
        nowhere = SparkResource(master="sc://127.0.0.1:9")
        second = materialize([archive_asset(cfg)], partition_key=key, instance=instance,
                             resources={"kafka": kafka, "swift": swift, "spark": nowhere}, raise_on_error=False)
        assert second.success, [e.message for e in second.all_events if e.is_failure]
        (again,) = second.asset_materializations_for_node(cfg.asset_name)
        meta = again.metadata
        assert meta["already_archived"].value is True and meta["verified_existing_archive"].value is True
        assert meta["records_written"].value == 0 and meta["records_per_s"].value == 0
        assert meta["records"].value == 30 and meta["objects"].value == 3  # the range it verified
        assert "seconds_after_newest_record" not in meta
        logs = [e.user_message for e in instance.all_logs(second.run_id)]
        assert any("already archived" in m and "nothing rewritten" in m for m in logs), logs
    with swift.store() as store:
        assert _stamps(store, names) == before, "an object or the manifest was written again"
        assert check_archive(kafka, store, topic, cfg.group) == {0: 30}


def test_a_range_archived_but_not_yet_committed_is_archived_again(kafka, new_topic, swift, spark):
    """A manifest alone is not "already archived": after a crash before the commit, the rerun writes and commits."""
    from matos_dagster.core.archive.range_run import archive_range

    topic = new_topic()
    produce(kafka, topic, [(b"k", f"v{i}".encode(), []) for i in range(10)])
    cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}")
    r = OffsetRange(topic, 0, 0, 10)
    with swift.store() as store:
        archive_range(r, cfg, kafka, store, spark)
        kafka.commit(topic, {0: 0}, cfg.group)  # as if the run died between its manifest and its commit
        again = archive_range(r, cfg, kafka, store, spark)
        assert not again.already_archived and again.records_written == 10
        assert again.committed_after == 10
        assert check_archive(kafka, store, topic, cfg.group) == {0: 10}


def test_a_run_writes_its_claim_before_its_heartbeat_thread_writes_anything(tmp_path, kafka, swift, monkeypatch):
    """Dagster's add_run_tags rewrites a run's whole tag set from what it read, so a beat written by
    the heartbeat thread while the claim is written can drop the claim (seen: a run without its
    `matos/range` tag), and another run would not wait for it. The claim must come first."""
    from matos_dagster.core.runs import heartbeat
    from matos_dagster.resources import SparkResource

    cfg = TopicConfig(name=f"no-such-topic-{uuid.uuid4().hex[:8]}", group="g")
    key = OffsetRange(cfg.name, 0, 0, 10).key
    writes: list[set[str]] = []
    with DagsterInstance.local_temp(str(tmp_path)) as instance:
        real = instance.add_run_tags

        def recorded(run_id, tags):
            writes.append(set(tags))
            return real(run_id, tags)

        monkeypatch.setattr(instance, "add_run_tags", recorded)
        instance.add_dynamic_partitions(cfg.partitions_name, [key])
        result = materialize([archive_asset(cfg)], partition_key=key, instance=instance, raise_on_error=False,
                             resources={"kafka": kafka, "swift": swift, "spark": SparkResource(master="sc://127.0.0.1:9")})
    assert not result.success  # the topic does not exist: refused after the claim and the first beat
    claims = [i for i, w in enumerate(writes) if CLAIM_TAG in w]
    beats = [i for i, w in enumerate(writes) if heartbeat.TAG in w]
    assert claims and beats and claims[0] < beats[0], writes
