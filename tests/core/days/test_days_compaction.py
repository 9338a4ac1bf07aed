"""A day keeps its records when the ranges holding it are compacted, also when the evaluation had
read only part of them: the compacted range, which reaches below where the evaluation stood, is
read from there on (real Kafka, Swift and Spark)."""

import time
import uuid

from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.compact.run import compact_partition
from matos_dagster.core.days import evaluate, windows
from matos_dagster.core.days.completeness import Rules
from matos_dagster.core.days.read import read_window
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift.archived import PartitionArchive
from matos_dagster.core.topics import TopicConfig

H, DAY = windows.HOUR_MS, windows.DAY_MS
D1 = windows.start_of(int(time.time() * 1000), DAY) - 3 * DAY
RULES = Rules(length_ms=DAY, allowed_lateness_ms=0, idle_ms=10**12)


def test_a_day_spanning_a_compaction_holds_the_same_records(kafka, swift, spark, new_topic):
    name = new_topic()
    stamps = [D1 + 20 * H + i * H // 2 for i in range(30)]  # D1 20:00 to D2 10:30, a record each half hour
    p = kafka.producer()
    for i, ts in enumerate(stamps):
        p.produce(name, key=b"k", value=f"v{i}".encode(), partition=0, timestamp=ts)
    assert p.flush(30) == 0
    # Record bytes 3 (v0-v9) or 4: [0, 6) and [6, 16) reach 50 bytes together, and merge into [0, 16).
    cfg = TopicConfig(name, group=f"g-{uuid.uuid4().hex[:6]}", compact_bytes=50, compact_min_age_s=0.0)
    d1 = windows.key(D1, DAY)
    in_d1 = sorted(f"v{i}".encode() for i, ts in enumerate(stamps) if ts < D1 + DAY)
    with swift.store() as store:
        prefix = store.params.prefix
        archive_range(OffsetRange(name, 0, 0, 6), cfg, kafka, store, spark)  # D1 20:00 to 22:30: D1 goes on
        assert evaluate.evaluate(store, prefix, name, RULES, {0: 30}, int(time.time() * 1000)) == []
        for a, b in ((6, 16), (16, 30)):
            archive_range(OffsetRange(name, 0, a, b), cfg, kafka, store, spark)
        compact_partition(cfg, 0, 30, store, prefix, spark)
        assert [e.span for e in PartitionArchive(store, prefix, name, 0).entries_from(6)][0] == (0, 16)

        done = evaluate.evaluate(store, prefix, name, RULES, {0: 30}, int(time.time() * 1000))
        assert [w.key for w in done] == [d1]
        (part,) = evaluate.summary(done[0].doc).values()
        assert (part["records"], part["first_offset"], part["last_offset"]) == (len(in_d1), 0, len(in_d1) - 1)
        assert sorted(read_window(store, prefix, name, d1)["value"].to_pylist()) == in_d1
