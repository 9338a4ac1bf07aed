"""Key indexes on the real stack (Kafka, Swift, Spark): an erasure reads only the objects that may hold the key.

Each object's manifest entry carries a Bloom filter of its records' keyed hashes (core/erase/key_index.py),
made by the slice task, remade when an erasure rewrites the object or compaction merges it, and given to
objects archived without one by `matos forget --index` (core/erase/index_build.py).
"""

from __future__ import annotations

import uuid

import pytest
from helpers import produce, read_kafka, table_rows

from matos_dagster.core import reader
from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.compact.run import compact_topic
from matos_dagster.core.days import buckets
from matos_dagster.core.erase import index_build, key_index, keys, request
from matos_dagster.core.erase.rewrite import encoded_hours
from matos_dagster.core.erase.run import carry_out, one_by_one
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.records.objects import decode
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.archived import PartitionArchive
from matos_dagster.core.topics import TopicConfig
from matos_dagster.core.verify import verify_topic

SECRET = "an erasure key for the tests, 32b"
OTHER = "another erasure key, 32 bytes ok"
KEY = b"bob-19c2"
OBJECT_BYTES = 950  # about 10 of the tests' records an object


@pytest.fixture(autouse=True)
def erasure_key(monkeypatch):
    monkeypatch.setenv(keys.SETTING, SECRET)


def config(topic: str, **kw) -> TopicConfig:
    kw.setdefault("compact_min_age_s", 0.0)
    kw.setdefault("compact_grace_s", 3600.0)  # the replaced folders stay, with their own indexes
    kw.setdefault("object_bytes", OBJECT_BYTES)
    kw.setdefault("max_record_bytes", kw["object_bytes"])
    return TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}", **kw)


def load(kafka, topic: str, n: int, at: dict[int, bytes]) -> None:
    """`n` records of distinct keys `k<i>`, but the key `at[i]` at offset i."""
    produce(kafka, topic, [(at.get(i, f"k{i}".encode()), f"value {i} ".encode() * 10, []) for i in range(n)],
            partition=0)


def prefix(store, cfg) -> str:
    return layout.join(store.params.prefix, cfg.prefix)


def archive(kafka, store, spark, cfg, start: int, end: int) -> None:
    """One range: several objects (the tests' topics have small `object_bytes`), one Spark job."""
    archive_range(OffsetRange(cfg.name, 0, start, end), cfg, kafka, store, spark)


def forget(kafka, store, cfg, *raw: bytes):
    """What `matos forget` then the job do: the request in Swift, carried out."""
    ends = {cfg.name: {0: kafka.watermarks(cfg.name, [0])[0][1]}}
    req = request.make(keys.erasure_key(SECRET), list(raw), "ticket 99", ends)
    request.write(store, store.params.prefix, req)
    return carry_out(req.id, store, {cfg.name: cfg}, SECRET)


def manifests(store, cfg) -> list[dict]:
    """Every manifest of the partition, superseded folders' included."""
    p = prefix(store, cfg)
    docs = [store.get_json(layout.manifest_name(p, OffsetRange(cfg.name, 0, f.start, f.end)))
            for f in PartitionArchive(store, p, cfg.name, 0).folders_from(0)]
    return [d for d in docs if d is not None]


def holding(store, cfg, key: bytes) -> set[str]:
    """The objects listed in a manifest whose records include `key`."""
    return {o["name"] for d in manifests(store, cfg) for o in d["objects"]
            if key in decode(store.get(o["name"]), d["format"])["key"].to_pylist()}


def assert_gone(kafka, store, cfg, *gone: bytes) -> None:
    """No object holds the keys; the topic reads as Kafka without them; every manifest's hours are its objects';
    the verifier's full comparison with Kafka is clean."""
    for d in manifests(store, cfg):
        tables = [decode(store.get(o["name"]), d["format"]) for o in d["objects"]]
        assert not {k for t in tables for k in t["key"].to_pylist()} & set(gone), (d["start"], d["end"])
        summed = buckets.merge(*(buckets.from_json(encoded_hours(t)) for t in tables))
        assert d["hours"] == buckets.to_json(summed), (d["start"], d["end"])
    want = [r for r in read_kafka(kafka, cfg.name, 0) if r["key"] not in gone]
    got = table_rows(reader.read_table(store, prefix(store, cfg), cfg.name, partitions=[0]))
    assert [(r["offset"], r["key"], r["value"]) for r in got] == [(r["offset"], r["key"], r["value"]) for r in want]
    report = verify_topic(kafka, store, prefix(store, cfg), cfg, None)
    assert report.ok, report.render()


def hashes(*raw: bytes) -> set[str]:
    return {keys.keyed_hash(SECRET.encode(), k) for k in raw}


def test_an_erasure_reads_only_the_objects_whose_index_may_hold_the_key_and_those_without_one_or_of_another_key(
        kafka, swift, spark, new_topic, monkeypatch):
    cfg = config(new_topic())
    load(kafka, cfg.name, 80, {5: KEY, 25: KEY, 41: KEY, 72: KEY})
    with swift.store() as store:
        monkeypatch.delenv(keys.SETTING)
        archive(kafka, store, spark, cfg, 0, 20)  # no erasure key: no index
        monkeypatch.setenv(keys.SETTING, OTHER)
        archive(kafka, store, spark, cfg, 20, 30)  # an index of another erasure key (before a rotation)
        monkeypatch.setenv(keys.SETTING, SECRET)
        archive(kafka, store, spark, cfg, 30, 80)
        docs = manifests(store, cfg)
        objects = [o for d in docs for o in d["objects"]]
        unindexed = [o for o in objects if not o.get("key_index")]
        other = [o for o in objects if o.get("key_index", {}).get("key_id") == keys.key_id(OTHER.encode())]
        mine = [o for o in objects if o.get("key_index", {}).get("key_id") == keys.key_id(SECRET.encode())]
        assert len(unindexed) >= 2 and len(other) >= 1 and len(mine) >= 5
        assert len(unindexed) + len(other) + len(mine) == len(objects)
        held = holding(store, cfg, KEY) & {o["name"] for o in mine}
        assert len(held) == 2  # offsets 41 and 72

        done = forget(kafka, store, cfg, KEY)

        assert done.records == 4
        # Read: the objects without an index, those of another key (offset 25's among them), those whose index holds KEY.
        read = len(unindexed) + len(other) + len(held)
        assert sum(p.objects_read for p in done.partitions) == read
        assert sum(p.objects_skipped for p in done.partitions) == len(objects) - read
        assert done.record["objects_read"] == read and done.record["objects_skipped"] == len(objects) - read
        assert done.record["bytes_read"] > done.record["bytes_written"] > 0
        assert_gone(kafka, store, cfg, KEY)


def test_the_index_is_made_again_when_an_erasure_rewrites_an_object_and_compaction_merges_objects(
        kafka, swift, spark, new_topic):
    # Small objects: a compacted range holds several, of which the next erasure reads one.
    cfg = config(new_topic(), compact_bytes=3000, object_bytes=400)
    k17 = b"k17"  # a key of one record
    load(kafka, cfg.name, 40, {3: KEY, 33: KEY})
    with swift.store() as store:
        archive(kafka, store, spark, cfg, 0, 20)
        archive(kafka, store, spark, cfg, 20, 40)
        forget(kafka, store, cfg, KEY)
        rewritten = [o for d in manifests(store, cfg) for o in d["objects"] if ".e" in o["name"].rpartition("/")[2]]
        assert len(rewritten) == 2
        for o in rewritten:  # remade from the records left: without KEY, with each of the others
            assert not key_index.may_hold(o.get("key_index"), keys.key_id(SECRET.encode()), hashes(KEY))
            for k in decode(store.get(o["name"]), "parquet")["key"].to_pylist():
                assert key_index.may_hold(o["key_index"], keys.key_id(SECRET.encode()), hashes(k))

        compacted = compact_topic(cfg, kafka.committed(cfg.name, [0], cfg.group), store, spark)
        assert [g for p in compacted.partitions for g in p.groups] == [(0, 40)]
        merged = [d for d in manifests(store, cfg) if "replaces" in d]
        assert sum(len(d["objects"]) for d in merged) >= 6
        assert all(o.get("key_index") for d in merged for o in d["objects"])

        done = forget(kafka, store, cfg, k17)

        assert done.records == 1
        # The merged object holding offset 17, and the superseded range [0, 20)'s (still inside the grace period).
        assert sum(p.objects_read for p in done.partitions) == 2
        assert_gone(kafka, store, cfg, KEY, k17)


def test_forget_index_gives_objects_archived_without_one_an_index_once_and_a_run_again_ends_the_same(
        kafka, swift, spark, new_topic, monkeypatch, tmp_path):
    from dagster import DagsterInstance

    from matos_dagster.core.topic_set import TopicSet
    from matos_dagster.jobs.forget import forget_job

    cfg = config(new_topic())
    load(kafka, cfg.name, 60, {14: KEY})
    with swift.store() as store:
        monkeypatch.delenv(keys.SETTING)
        archive(kafka, store, spark, cfg, 0, 30)
        archive(kafka, store, spark, cfg, 30, 60)
        monkeypatch.setenv(keys.SETTING, SECRET)
        before = manifests(store, cfg)
        assert not any(o.get("key_index") for d in before for o in d["objects"])

        with DagsterInstance.ephemeral() as instance:
            result = forget_job(TopicSet([cfg])).execute_in_process(
                run_config={"ops": {"forget_keys": {"config": {"index_topics": [cfg.name]}}}}, instance=instance,
                resources={"swift": swift})
        assert result.success and result.output_for_node("forget_keys") == sum(len(d["objects"]) for d in before) >= 6
        indexed = manifests(store, cfg)
        # Only the entries gained an index: the objects and every other field are as they were.
        assert [{**d, "objects": [{k: v for k, v in o.items() if k != "key_index"} for o in d["objects"]]}
                for d in indexed] == before
        assert all(o.get("key_index", {}).get("key_id") == keys.key_id(SECRET.encode()) for d in indexed for o in d["objects"])

        # Killed before its last manifest: run again, it reads that range's object only and ends the same.
        store.put_json(layout.manifest_name(prefix(store, cfg), OffsetRange(cfg.name, 0, 30, 60)), before[-1])
        again = index_build.index_topics(store, {cfg.name: cfg}, SECRET, one_by_one)
        assert [(p.objects_indexed, p.objects_had, p.manifests_written) for p in again] == [
            (len(before[-1]["objects"]), len(before[0]["objects"]), 1)]
        assert manifests(store, cfg) == indexed
        nothing = index_build.index_topics(store, {cfg.name: cfg}, SECRET, one_by_one)
        assert [(p.objects_indexed, p.manifests_written, p.bytes_read) for p in nothing] == [(0, 0, 0)]

        done = forget(kafka, store, cfg, KEY)

        assert done.records == 1 and sum(p.objects_read for p in done.partitions) == 1
        assert_gone(kafka, store, cfg, KEY)
