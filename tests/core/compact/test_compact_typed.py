"""Compacting a typed topic: objects of schema versions V1 and V2 merge into objects of one schema.

Typed ranges are written by hand into Swift (typed_samples.py); the merge runs in this process
(`merge_group`) and, for the whole protocol, as Spark tasks (`compact_partition`). The raw
columns must be the records' bytes, unchanged; an untyped group's objects must be exactly
what compaction always wrote.
"""

from __future__ import annotations

import io
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
from helpers import table_rows
from typed_samples import VALUE, put_range, raw_rows, typed_schema

from matos_dagster.core.compact.merge import MergeJob, merge_group
from matos_dagster.core.compact.run import compact_partition
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.reader import read_table
from matos_dagster.core.records import unify
from matos_dagster.core.records.objects import decode, encode
from matos_dagster.core.records.schema import SCHEMA
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.archived import PartitionArchive
from matos_dagster.core.swift.manifest import Manifest
from matos_dagster.core.topics import TopicConfig

TOPIC = "orders"
TYPED = ["value_schema_id", "value_data", "value_error"]


def job(store, lo: int, hi: int, docs: list[dict]) -> MergeJob:
    r = OffsetRange(TOPIC, 0, lo, hi)
    return MergeJob(r, layout.range_dir("kafka", r), tuple(o for d in docs for o in d["objects"]), "parquet",
                    store.params)


def summed(docs: list[dict]) -> dict:
    return {k: sum(d["typed"]["value"][k] for d in docs if "typed" in d) for k in ("decoded", "failed", "nulls")}


def test_a_group_of_v1_and_v2_objects_merges_into_one_object_of_the_unified_schema(swift):
    with swift.store() as store:
        store.check()
        docs = [put_range(store, "kafka", TOPIC, 0, 0, 10, 1, per_object=5),
                put_range(store, "kafka", TOPIC, 0, 10, 20, 2, per_object=5)]
        inputs = [decode(store.get(o["name"]), "parquet") for d in docs for o in d["objects"]]

        (entry,) = merge_group(job(store, 0, 20, docs))

        data = store.get(entry["name"])
        merged = pq.read_table(io.BytesIO(data))
        assert merged.schema.names == SCHEMA.names + TYPED
        assert merged.schema.field("value_data").type == VALUE[2]
        assert merged.schema.field("value_data").metadata[b"reader_schema_id"] == b"2"
        assert table_rows(unify.raw(decode(data, "parquet"))) == table_rows(raw_rows(TOPIC, 0, 0, 20))
        assert merged.select(TYPED).equals(unify.concat(inputs).select(TYPED).combine_chunks())
        assert (entry["records"], entry["first_offset"], entry["last_offset"]) == (20, 0, 19)
        assert entry["typed"]["value"] == {"format": "avro", "reader_schema_id": 2, "schema_ids": [1, 2],
                                           **summed(docs)}
        # A retry writes the same bytes.
        assert merge_group(job(store, 0, 20, docs))[0]["md5"] == entry["md5"]

        # Untyped then typed: the untyped rows' typed columns are null, and count for no side.
        mixed = [put_range(store, "kafka", TOPIC, 0, 20, 30, 0), put_range(store, "kafka", TOPIC, 0, 30, 40, 1)]
        (entry,) = merge_group(job(store, 20, 40, mixed))
        merged = decode(store.get(entry["name"]), "parquet")
        assert merged.schema.equals(typed_schema(1))
        assert merged.select(TYPED).slice(0, 10).to_pylist() == [dict.fromkeys(TYPED)] * 10
        assert entry["typed"]["value"]["schema_ids"] == [1]
        assert {k: entry["typed"]["value"][k] for k in ("decoded", "failed", "nulls")} == summed(mixed)


def test_an_untyped_groups_merged_object_is_byte_for_byte_what_compaction_always_wrote(swift):
    with swift.store() as store:
        store.check()
        docs = [put_range(store, "kafka", TOPIC, 0, a, a + 10, 0, per_object=4) for a in (0, 10, 20)]
        inputs = [decode(store.get(o["name"]), "parquet") for d in docs for o in d["objects"]]

        (entry,) = merge_group(job(store, 0, 30, docs))

        assert store.get(entry["name"]) == encode(pa.concat_tables(inputs).combine_chunks(), "parquet")
        assert decode(store.get(entry["name"]), "parquet").schema.equals(SCHEMA, check_metadata=True)
        assert "typed" not in entry


def test_compacting_a_typed_partition_keeps_every_record_and_reads_the_same(swift, spark):
    cfg = TopicConfig(name=TOPIC, group=f"g-{uuid.uuid4().hex[:8]}", compact_bytes=200, compact_min_age_s=0.0)
    with swift.store() as store:
        store.check()
        for lo, version in ((0, 1), (10, 1), (20, 2), (30, 2), (40, 2)):
            put_range(store, "kafka", TOPIC, 0, lo, lo + 10, version, per_object=5)
        before = read_table(store, "kafka", TOPIC)
        assert before.schema.field("value_data").type == VALUE[2]

        done = compact_partition(cfg, 0, 50, store, "kafka", spark)

        assert done.groups and done.records == sum(b - a for a, b in done.groups)
        assert done.objects_after < done.objects_before
        archive = PartitionArchive(store, "kafka", TOPIC, 0)
        spans = [e.span for e in archive.all()]
        assert any(b - a > 10 for a, b in spans), spans
        for a, b in done.groups:
            doc = archive.read(next(e for e in archive.all() if e.span == (a, b)))
            Manifest.from_json(doc)  # a manifest readers take
            assert doc["typed"]["value"]["format"] == "avro"
            assert doc["typed"]["value"]["decoded"] + doc["typed"]["value"]["failed"] + \
                doc["typed"]["value"]["nulls"] == doc["records"]
        after = read_table(store, "kafka", TOPIC)
        assert after.equals(before)
