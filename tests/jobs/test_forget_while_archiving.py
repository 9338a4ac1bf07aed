"""An erasure while the lag sensor's runs archive the same partition, records being produced all along.

The archiver thread launches `archive_ranges` runs as the lag sensor requests them (each tick, the
partition from its committed offset to its log end, added to the topic's asset first) on one Dagster
instance. One of them, its range read from Kafka (the key's records among it, the ledger read before
the request) but its manifest not written yet, is held in its turn until the forget job has claimed
the partition: the erasure waits for it, then erases what it wrote; later runs leave the key out by
the ledger.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from dagster import DagsterInstance
from helpers import produce, read_kafka, table_rows

from matos_dagster.core import reader
from matos_dagster.core.archive import batch
from matos_dagster.core.erase import keys, request
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.records.objects import decode
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.archived import PartitionArchive
from matos_dagster.core.topic_set import TopicSet
from matos_dagster.core.topics import TopicConfig
from matos_dagster.core.verify import verify_topic
from matos_dagster.jobs.archive_ranges import archive_ranges_job, ranges_config
from matos_dagster.jobs.forget import forget_job
from matos_dagster.turns import BATCH_TAG

SECRET = "an erasure key for the tests, 32b"
KEY = b"carol-19"


@pytest.mark.slow
def test_an_erasure_while_archive_runs_write_the_partition_leaves_no_record_of_the_key_and_every_other_once(
        kafka, swift, spark_resource, new_topic, tmp_path, monkeypatch):
    monkeypatch.setenv(keys.SETTING, SECRET)
    topic = new_topic()
    cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}")
    resources = {"kafka": kafka, "swift": swift, "spark": spark_resource}
    archive_job, erase_job = archive_ranges_job(TopicSet([cfg])), forget_job(TopicSet([cfg]))
    stop_producing, stop_archiving = threading.Event(), threading.Event()
    sent = [0]
    failures: list[str] = []
    hold, holding = threading.Event(), threading.Event()
    real = batch.write_manifest

    def held(*args, **kwargs):
        if hold.is_set() and not holding.is_set():
            # Its range read from Kafka with the ledger of before the request, its manifest not written:
            # held until the erasure has claimed the partition and says it waits (or, were there no
            # turns, until the erasure has ended without it).
            holding.set()
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and not any(
                    r.is_finished or any("this run waits for it to end" in (e.user_message or "")
                                         for e in instance.all_logs(r.run_id))
                    for r in instance.get_runs() if r.tags.get("kind") == "erasure"):
                time.sleep(0.2)
        return real(*args, **kwargs)

    monkeypatch.setattr(batch, "write_manifest", held)

    def producer():
        while not stop_producing.is_set():
            i = sent[0]
            produce(kafka, topic, [(KEY if n % 5 == 2 else f"k{n}".encode(), f"v{n}".encode(), [])
                                   for n in range(i, i + 5)], partition=0)
            sent[0] += 5
            time.sleep(0.3)

    def committed() -> int:
        return kafka.committed(topic, [0], cfg.group)[0] or 0

    def tick(instance) -> None:
        start, end = committed(), kafka.watermarks(topic, [0])[0][1]
        if end > start:
            r = OffsetRange(topic, 0, start, end)
            instance.add_dynamic_partitions(cfg.partitions_name, [r.key])
            result = archive_job.execute_in_process(run_config=ranges_config([r]), instance=instance,
                                                    resources=resources, raise_on_error=False)
            if not result.success:
                failures.append(r.key)

    with DagsterInstance.local_temp(str(tmp_path)) as instance:

        def archiver():
            while not stop_archiving.is_set():
                tick(instance)

        threads = [threading.Thread(target=producer), threading.Thread(target=archiver)]
        for t in threads:
            t.start()
        try:
            while committed() < 20:
                time.sleep(0.2)
            hold.set()  # the next archive run to write a manifest stays in its turn before it
            assert holding.wait(300)
            with swift.store() as store:
                log_end = kafka.watermarks(topic, [0])[0][1]
                req = request.make(keys.erasure_key(SECRET), [KEY], "ticket 77", {topic: {0: log_end}})
                request.write(store, store.params.prefix, req)
            erased = erase_job.execute_in_process(run_config={"ops": {"forget_keys": {"config": {"request": req.id}}}},
                                                  instance=instance, resources={"swift": swift})
            assert erased.success
            said = [e.user_message for e in instance.all_logs(erased.run_id)]
            assert any("this run waits for it to end" in m for m in said), said
            time.sleep(1.5)  # archive runs after the erasure, the key's later records among theirs
        finally:
            stop_producing.set()
            threads[0].join(60)
            while committed() < kafka.watermarks(topic, [0])[0][1] and not failures:
                time.sleep(0.2)
            stop_archiving.set()
            threads[1].join(300)
        batches = [r for r in instance.get_runs() if r.tags.get(BATCH_TAG) == "true"]
    assert not failures and len(batches) >= 3

    end = kafka.watermarks(topic, [0])[0][1]
    assert end > log_end
    kafka_rows = read_kafka(kafka, topic, 0)
    gone = [r["offset"] for r in kafka_rows if r["key"] == KEY and r["offset"] < log_end]
    assert gone and any(r["key"] == KEY for r in kafka_rows if r["offset"] >= log_end)
    with swift.store() as store:
        prefix = layout.join(store.params.prefix, cfg.prefix)
        for o in store.list(prefix + "/"):
            if o["name"].endswith(".parquet"):
                table = decode(store.get(o["name"]), "parquet")
                held = [off for k, off in zip(table["key"].to_pylist(), table["offset"].to_pylist()) if k == KEY]
                assert all(off >= log_end for off in held), (o["name"], held)
        archive = PartitionArchive(store, prefix, topic, 0)
        assert sorted(off for e in archive.all() for off in archive.read(e).get("erased", [])) == gone
        got = table_rows(reader.read_table(store, prefix, topic, partitions=[0]))
        want = [r for r in kafka_rows if r["offset"] not in set(gone)]
        assert [(r["offset"], r["key"], r["value"]) for r in got] == [(r["offset"], r["key"], r["value"]) for r in want]
        report = verify_topic(kafka, store, prefix, cfg, None)  # `matos verify --audit-all`: every record compared
        assert report.ok, report.render()
        assert report.compared == len(want)
