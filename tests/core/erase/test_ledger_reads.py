"""A batch of many ranges reads each topic's erasure ledger once, not once a range, and applies it to each."""

from __future__ import annotations

from helpers import produce
from samples import config

from matos_dagster.core.archive.batch import archive_batch
from matos_dagster.core.erase import keys, ledger, request
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import layout

SECRET = "an erasure key for the tests, 32b"
KEY = b"bob-42"


def test_a_batch_reads_each_topics_erasure_ledger_once_and_leaves_the_key_out_of_every_range(
        kafka, swift, spark, new_topic, monkeypatch):
    monkeypatch.setenv(keys.SETTING, SECRET)
    topic = new_topic(partitions=2)
    for p in (0, 1):
        produce(kafka, topic, [(KEY if i % 4 == 1 else f"k{i}".encode(), b"v", []) for i in range(20)], partition=p)
    cfg = config(topic)
    reads = []
    real = ledger.read
    monkeypatch.setattr(ledger, "read", lambda *a: reads.append(a[1:]) or real(*a))
    with swift.store() as store:
        prefix = layout.join(store.params.prefix, cfg.prefix)
        req = request.make(keys.erasure_key(SECRET), [KEY], "t", {topic: {0: 20, 1: 20}})
        ledger.add(store, prefix, topic, req)
        reads.clear()
        items = [(OffsetRange(topic, p, a, a + 10), cfg) for p in (0, 1) for a in (0, 10)]

        done = archive_batch(items, kafka, store, spark)

    assert [o.error for o in done.outcomes] == [None] * 4
    assert reads == [(prefix, topic)]  # four ranges, one read (it was one a range)
    for o in done.outcomes:
        erased = [i for i in range(o.range.start, o.range.end) if i % 4 == 1]
        assert o.archived.manifest["erased"] == erased
        assert o.archived.manifest["records"] == 10 - len(erased)
