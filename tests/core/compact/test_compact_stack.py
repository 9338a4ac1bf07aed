"""Compaction on the real stack (Kafka, Swift, Spark): small ranges become large objects, exactly once.

Each test archives a partition as many small ranges with the product's own archive_range,
compacts it, and checks, with the product's reader and verifier and with Kafka itself, that
every offset is in exactly one effective entry and every record is the same record, every
field. Fault tests kill a compaction process at each step of the protocol (MATOS_FAULT
points in core/compact/run.py) and let the next run finish it. Damage tests spoil a source range in
Swift and show that compaction refuses it before the switch and leaves it for the verifier.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import pyarrow as pa
import pytest
from helpers import produce, read_kafka, table_rows

from matos_dagster.core import reader, verify
from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.compact.merge import CompactionError
from matos_dagster.core.compact.run import compact_partition, compact_topic, cursor_name
from matos_dagster.core.monitor import report as monitor
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.offsets.spans import coverage
from matos_dagster.core.records.objects import decode, encode
from matos_dagster.core.settings import PROJECT_ROOT
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.archived import PartitionArchive
from matos_dagster.core.topics import TopicConfig
from matos_dagster.core.verify import verify_topic

RANGE_RECORDS = 10


def config(topic: str, **kw) -> TopicConfig:
    kw.setdefault("compact_bytes", 4000)  # about 3 small ranges of 10 records
    kw.setdefault("compact_min_age_s", 0.0)
    kw.setdefault("compact_grace_s", 3600.0)
    return TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}", **kw)


def load(kafka, topic: str, n: int, first: int = 0) -> None:
    # Every field varies: keys (one null), values (one null), repeated and null headers, timestamps.
    rows = []
    for i in range(first, first + n):
        key = None if i % 7 == 3 else f"k{i}".encode()
        value = None if i % 11 == 5 else (f"value {i} ".encode() * 10)
        headers = [("i", str(i).encode()), ("i", None), ("h\u00e9", b"\x00\xff")] if i % 2 else []
        rows.append((key, value, headers))
    produce(kafka, topic, rows, partition=0)


def archive_small(kafka, store, spark, cfg: TopicConfig, start: int, end: int) -> None:
    for a in range(start, end, RANGE_RECORDS):
        archive_range(OffsetRange(cfg.name, 0, a, min(a + RANGE_RECORDS, end)), cfg, kafka, store, spark)


def prefix(store, cfg) -> str:
    return layout.join(store.params.prefix, cfg.prefix)


def effective_spans(store, cfg) -> list[tuple[int, int]]:
    return [e.span for e in PartitionArchive(store, prefix(store, cfg), cfg.name, 0).all()]


def judge(store, cfg: TopicConfig, end: int, known=None) -> monitor.PartitionReport:
    """The monitor's evaluation of partition 0 (incremental from `known`, or from scratch), all archived to `end`."""
    archive = PartitionArchive(store, prefix(store, cfg), cfg.name, 0)
    report = monitor.evaluate_partition(cfg, 0, 0, end, end, monitor.read_entries(archive, known, end),
                                        None, [], time.time(), known)
    assert (report.status, report.ahwm, report.gaps, report.overlaps, report.lost) == (monitor.OK, end, [], [], []), \
        report.reasons
    return report


def assert_exactly_once(kafka, store, cfg: TopicConfig, end: int) -> list[tuple[int, int]]:
    """One effective entry per offset of [0, end); the reader returns Kafka's records once each."""
    found = effective_spans(store, cfg)
    cov = coverage(found)
    assert (cov.first, cov.contiguous_end, cov.gaps, cov.overlaps) == (0, end, (), ()), found
    rows = table_rows(reader.read_table(store, prefix(store, cfg), cfg.name, partitions=[0]))
    assert rows == read_kafka(kafka, cfg.name, 0, 0, end)
    # A window from inside a compacted range, and one over the middle: still once each.
    for lo, hi in ((5, end), (13, 27)):
        part = table_rows(reader.read_table(store, prefix(store, cfg), cfg.name, partitions=[0], start=lo, end=hi))
        assert [r["offset"] for r in part] == list(range(lo, hi))
    report = verify_topic(kafka, store, prefix(store, cfg), cfg, None)
    assert report.ok, report.render()
    return found


def folders(store, cfg) -> list[tuple[int, int]]:
    """Every range folder in Swift that still holds an object, manifest or not."""
    return [f.span for f in PartitionArchive(store, prefix(store, cfg), cfg.name, 0).folders_from(0)]


# JSON Lines in make test-all (slow): the merge decodes and encodes whatever the format, every field of
# any record survives JSON Lines (tests/core/records/test_record_properties.py) and the merged objects'
# sizes are measured alike (tests/core/compact/test_compact.py), in make test.
@pytest.mark.parametrize("fmt", ["parquet", pytest.param("jsonl", marks=pytest.mark.slow)])
def test_compaction_merges_small_ranges_and_keeps_every_record_as_it_was(kafka, swift, spark, new_topic, fmt):
    topic = new_topic()
    cfg = config(topic, format=fmt)
    load(kafka, topic, 120)
    with swift.store() as store:
        store.check()
        archive_small(kafka, store, spark, cfg, 0, 120)
        before = assert_exactly_once(kafka, store, cfg, 120)
        assert len(before) == 12
        known = judge(store, cfg, 120).known  # what the monitor remembers before compacting
        committed = kafka.committed(topic, [0], cfg.group)

        done = compact_topic(cfg, committed, store, spark)

        part = done.partitions[0]
        after = assert_exactly_once(kafka, store, cfg, 120)
        # The monitor sees compacted ranges as sound, both from what it remembered and from scratch.
        judge(store, cfg, 120, known)
        judge(store, cfg, 120)
        assert part.groups and all(g in after for g in part.groups)
        assert len(after) < len(before)
        assert part.ranges_merged == sum(1 for s in before if any(a <= s[0] and s[1] <= b for a, b in part.groups))
        assert part.objects_after < part.objects_before
        assert part.records == sum(b - a for a, b in part.groups)  # no holes in this topic
        doc = store.get_json(layout.manifest_name(prefix(store, cfg), OffsetRange(topic, 0, *part.groups[0])))
        assert doc["format"] == fmt and doc["replaces"] and [tuple(s) for s in doc["replaces"]] == [
            s for s in before if part.groups[0][0] <= s[0] and s[1] <= part.groups[0][1]]
        # The replaced folders are still there (grace period), superseded, not effective.
        assert set(before) <= set(folders(store, cfg))
        # Committing and archiving go on from the committed offset as before.
        assert kafka.committed(topic, [0], cfg.group) == committed
        # A second run has nothing left to merge: compacted ranges are never merged again.
        again = compact_topic(cfg, committed, store, spark).partitions[0]
        assert again.groups == [] and again.folders_deleted == 0
        assert effective_spans(store, cfg) == after


def test_replaced_folders_are_deleted_only_after_the_grace_period(kafka, swift, spark, new_topic):
    topic = new_topic()
    cfg = config(topic, compact_grace_s=600.0)
    load(kafka, topic, 60)
    with swift.store() as store:
        store.check()
        archive_small(kafka, store, spark, cfg, 0, 60)
        committed = kafka.committed(topic, [0], cfg.group)
        mark = judge(store, cfg, 60).known  # the monitor's mark, written before compaction
        archive = PartitionArchive(store, prefix(store, cfg), topic, 0)
        first = compact_partition(cfg, 0, committed[0], store, prefix(store, cfg), spark)
        merged = effective_spans(store, cfg)
        assert first.groups
        assert monitor.start_from(archive, None, mark, 60) == (mark, monitor.FROM_MARK)  # still holds
        # Within the grace period: nothing deleted, however often compaction runs.
        assert compact_partition(cfg, 0, committed[0], store, prefix(store, cfg), spark).folders_deleted == 0
        replaced = [s for s in folders(store, cfg) if s not in merged]
        assert replaced
        # Later than the grace period after the switch: every replaced folder goes, nothing else.
        import time
        later = compact_partition(cfg, 0, committed[0], store, prefix(store, cfg), spark, now=time.time() + 601)
        assert later.folders_deleted == len(replaced)
        assert folders(store, cfg) == merged
        assert_exactly_once(kafka, store, cfg, 60)
        # The monitor's mark holds after the clean-up too, and judges as a full read (judge asserts OK, 60).
        assert monitor.start_from(archive, None, mark, 60) == (mark, monitor.FROM_MARK)
        judge(store, cfg, 60, mark)
        # The cursor moved past everything compacted and cleaned up: the next walk starts there.
        cursor = store.get_json(cursor_name(prefix(store, cfg), topic, 0))
        assert cursor["from"] >= first.groups[-1][1]


def test_archiving_goes_on_while_a_compaction_runs(kafka, swift, spark, new_topic):
    topic = new_topic()
    cfg = config(topic)
    load(kafka, topic, 200)
    with swift.store() as store:
        store.check()
        archive_small(kafka, store, spark, cfg, 0, 100)
        committed = kafka.committed(topic, [0], cfg.group)
        errors: list[BaseException] = []

        def compact():
            try:
                with swift.store() as own:
                    compact_topic(cfg, committed, own, spark)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        t = threading.Thread(target=compact)
        t.start()
        try:
            archive_small(kafka, store, spark, cfg, 100, 200)  # at and after the committed offset
        finally:
            t.join()
        assert not errors, errors
        assert kafka.committed(topic, [0], cfg.group) == {0: 200}
        spans = assert_exactly_once(kafka, store, cfg, 200)
        assert any(b - a > RANGE_RECORDS for a, b in spans if b <= 100)  # compaction did merge
        assert all(b - a == RANGE_RECORDS for a, b in spans if a >= 100)  # new ranges untouched


def test_two_compactions_of_one_partition_at_once_leave_one_entry_per_offset(kafka, swift, spark, new_topic):
    topic = new_topic()
    cfg = config(topic)
    load(kafka, topic, 90)
    with swift.store() as store:
        store.check()
        archive_small(kafka, store, spark, cfg, 0, 90)
        committed = kafka.committed(topic, [0], cfg.group)
    results, errors = [], []
    start = threading.Barrier(2)

    def compact():
        try:
            with swift.store() as own:
                start.wait(60)
                results.append(compact_partition(cfg, 0, committed[0], own, prefix(own, cfg), spark))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=compact) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # Both planned the same groups: each group was switched by one of them, or by both with
    # the same bytes; never two different ranges over the same offsets.
    assert results[0].groups or results[1].groups
    with swift.store() as store:
        spans = assert_exactly_once(kafka, store, cfg, 90)
        assert set(results[0].groups + results[1].groups) <= set(spans)


# -- faults: kill the compaction at each step, then let the next run finish ------------------

_RUN = """
import json, os, sys
from matos_dagster.core.compact.run import compact_topic
from matos_dagster.resources import SparkResource, SwiftResource
from matos_dagster.core.topics import TopicConfig

a = json.loads(sys.argv[1])
swift = SwiftResource(auth_url=a["auth_url"], user=a["user"], key=os.environ["MATOS_SWIFT_KEY"],
                      container=a["container"], prefix="kafka", retries=2)
spark = SparkResource(master=a["master"], conf=a["conf"]).spark_session
with swift.store() as store:
    done = compact_topic(TopicConfig(**a["topic"]), {0: a["committed"]}, store, spark, now=a["now"])
print(json.dumps({"groups": done.partitions[0].groups}))
spark.stop()
"""


def run_compaction_process(swift, cfg: TopicConfig, committed: int, fault: str, now: float,
                           master: str) -> subprocess.CompletedProcess:
    """The compaction in a process of its own (on Spark `master`), killed at the fault point."""
    args = {"auth_url": swift.auth_url, "user": swift.user, "container": swift.container, "committed": committed,
            "now": now, "master": master, "topic": {k: getattr(cfg, k) for k in (
                "name", "group", "format", "compact_bytes", "compact_min_age_s", "compact_grace_s")},
            # A Connect client sends session settings only; a driver of its own is kept quiet.
            "conf": "" if master.startswith("sc://") else "spark.ui.showConsoleProgress=false"}
    env = {**os.environ, "MATOS_SWIFT_KEY": swift.key, "MATOS_FAULT": fault}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-c", _RUN, json.dumps(args)], env=env, cwd=PROJECT_ROOT,
                                stdout=out, stderr=err, text=True, start_new_session=True)
        try:
            code = proc.wait(900)
        finally:
            if proc.poll() is None:  # ours, by its PID
                proc.kill()
                proc.wait(30)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(proc.args, code, out.read(), err.read()[-3000:])


@pytest.mark.parametrize("fault", ["compact-after-objects", "compact-after-manifest", "compact-mid-cleanup"])
def test_a_compaction_killed_at_any_step_is_finished_by_the_next_run(kafka, swift, spark, new_topic, fault,
                                                                   connect_server):
    """The killed process is a client of the session's Spark Connect server: no Spark driver of its
    own to start (every fault point is in the driver's code, between Spark jobs); the runs that
    finish it use this process's local Spark."""
    import time

    topic = new_topic()
    cfg = config(topic, compact_grace_s=600.0)
    load(kafka, topic, 60)
    with swift.store() as store:
        store.check()
        archive_small(kafka, store, spark, cfg, 0, 60)
        before = effective_spans(store, cfg)
        committed = kafka.committed(topic, [0], cfg.group)[0]
        now = time.time()
        if fault == "compact-mid-cleanup":
            # The switch happened in an earlier run; the killed one is past the grace period.
            compact_partition(cfg, 0, committed, store, prefix(store, cfg), spark)
            now = time.time() + 601
        killed = run_compaction_process(swift, cfg, committed, fault, now, connect_server.url)
        assert killed.returncode == -9, (killed.returncode, killed.stderr)  # the fault point was reached

        # What the kill left is already exactly once, for every reader.
        mid = assert_exactly_once(kafka, store, cfg, 60)
        if fault == "compact-after-objects":
            assert mid == before  # objects without a manifest count as nothing
            assert len(folders(store, cfg)) > len(before)  # ...though they are there
        else:
            assert len(mid) < len(before)  # the switch was made: the merged ranges are effective
        if fault == "compact-mid-cleanup":
            # A replaced folder lost its manifest, not yet its objects.
            assert any(s not in mid for s in folders(store, cfg))

        # The next run finishes it (past the grace period of what the killed run switched)...
        compact_partition(cfg, 0, committed, store, prefix(store, cfg), spark, now=time.time() + 601)
        final = assert_exactly_once(kafka, store, cfg, 60)
        assert len(final) < len(before)
        # ...and one past the grace period of what that run switched cleans up the rest.
        compact_partition(cfg, 0, committed, store, prefix(store, cfg), spark, now=time.time() + 601)
        assert assert_exactly_once(kafka, store, cfg, 60) == final
        assert folders(store, cfg) == final  # nothing replaced or half-deleted is left


def test_the_compact_job_reports_what_it_merged(kafka, swift, spark_resource, new_topic):
    from matos_dagster.jobs.compact import compact_job

    topic = new_topic()
    cfg = config(topic)
    load(kafka, topic, 60)
    with swift.store() as store:
        store.check()
        archive_small(kafka, store, spark_resource.spark_session, cfg, 0, 60)
    result = compact_job([cfg]).execute_in_process(
        run_config={"ops": {"compact_archive": {"config": {"topic": topic}}}},
        resources={"kafka": kafka, "swift": swift, "spark": spark_resource},
    )
    assert result.success
    meta = next(e for e in result.all_events if e.is_successful_output).step_output_data.metadata
    assert meta["ranges_merged"].value >= 2
    assert meta["objects_after"].value < meta["objects_before"].value
    assert meta["records"].value > 0 and meta["bytes_after"].value > 0
    assert result.output_for_node("compact_archive") == meta["ranges_merged"].value
    # Where the ranges not merged yet begin (the metrics exporter's compaction backlog): after the last merged.
    assert meta["unmerged_from"].value == {topic: {"0": max(b for _, b in meta["ranges"].value["0"])}}
    bad = compact_job([cfg]).execute_in_process(
        run_config={"ops": {"compact_archive": {"config": {"topic": "nope"}}}},
        resources={"kafka": kafka, "swift": swift, "spark": spark_resource}, raise_on_error=False)
    assert not bad.success
    assert "not in the topics file" in str(bad.all_events)


def test_a_restore_resumed_from_a_marker_inside_a_compacted_range_restores_every_record_once(
        kafka, swift, spark, new_topic):
    from matos_dagster.core.restore.plan import Request
    from matos_dagster.core.restore.run import restore

    topic = new_topic()
    cfg = config(topic, object_bytes=512, max_record_bytes=512)  # several objects a range
    load(kafka, topic, 90)
    target = new_topic()
    group = f"matos-restore-{target}"
    with swift.store() as store:
        store.check()
        archive_small(kafka, store, spark, cfg, 0, 90)
        # A restore that got as far as offset 35, inside the small range [30, 40): its marker.
        restore(Request(topic, "kafka", end=35, target=target), kafka, store, spark)
        assert kafka.committed(topic, [0], group) == {0: 35}
        done = compact_topic(cfg, kafka.committed(topic, [0], cfg.group), store, spark).partitions[0]
        assert any(a < 35 < b for a, b in done.groups), done.groups  # the marker is inside a merged range
        # The rest of the restore, planned from the compacted archive, goes on from the marker.
        report = restore(Request(topic, "kafka", target=target), kafka, store, spark)
        assert any(u["resumed_from"] == 35 for u in report.units), report.units
    source = read_kafka(kafka, topic, 0)
    restored = read_kafka(kafka, target, 0)
    keep = ("key", "value", "headers", "timestamp", "timestamp_type")
    assert [tuple(r[k] for k in keep) for r in restored] == [tuple(r[k] for k in keep) for r in source]
    assert kafka.committed(topic, [0], group) == {0: 90}


# -- damaged input: compaction refuses it, switches nothing, deletes nothing ------------------


def damage_missing(store, docs, pre) -> None:
    store.delete(docs[1]["objects"][0]["name"])


def damage_other_bytes(store, docs, pre) -> None:
    # One value changed in the same length: a valid object with the manifest's records and
    # offsets; only the md5 tells merge_group that these are not the bytes archived.
    o = docs[1]["objects"][0]
    table = decode(store.get(o["name"]), docs[1]["format"])
    values = table["value"].to_pylist()
    values[4] = values[4].upper()
    table = table.set_column(table.schema.get_field_index("value"), "value", pa.array(values, pa.binary()))
    store.put(o["name"], encode(table, docs[1]["format"]))


def damage_swapped(store, docs, pre) -> None:
    # Two records in the middle of the group change places; first, last and count stay.
    reencode(store, docs, 1, lambda t1, t2: t2.take([0, 1, 2, 3, 5, 4, 6, 7, 8, 9]), pre)


def damage_repeated(store, docs, pre) -> None:
    # The second range's first record replaced by the first range's last: each object is in
    # order and holds its count, but offset 9 would be merged twice and offset 10 not at all.
    reencode(store, docs, 1, lambda t1, t2: pa.concat_tables([t1.slice(9, 1), t2.slice(1)]), pre)


def damage_record_missing(store, docs, pre) -> None:
    # A record gone from the middle of an object whose manifest still counts it.
    reencode(store, docs, 1, lambda t1, t2: pa.concat_tables([t2.slice(0, 4), t2.slice(5)]), pre)


def damage_totals(store, docs, pre) -> None:
    # The manifest claims a record more than its objects, which are intact, hold.
    docs[1]["records"] += 1
    store.put_json(layout.manifest_name(pre, OffsetRange(docs[1]["topic"], 0, docs[1]["start"], docs[1]["end"])),
                   docs[1])


def reencode(store, docs, i: int, change, pre) -> None:
    """Write range i's only object anew as `change(first range's table, range i's table)`, and
    its manifest entry to match (md5, bytes): the object is intact for Swift, wrong inside."""
    fmt = docs[i]["format"]
    tables = [decode(store.get(d["objects"][0]["name"]), fmt) for d in docs]
    data = encode(change(*tables), fmt)
    o = docs[i]["objects"][0]
    o["md5"] = store.put(o["name"], data)
    o["bytes"] = len(data)
    docs[i]["bytes"] = len(data)
    store.put_json(layout.manifest_name(pre, OffsetRange(docs[i]["topic"], 0, docs[i]["start"], docs[i]["end"])),
                   docs[i])


# damage: (how, what CompactionError says (a pattern; {object}: the damaged object), the
# verifier's kinds of problem, whether the verifier names the object (else the range's manifest)).
# Another md5 is `size` to the verifier when the new bytes' length differs too (its message gives
# both md5s), `md5` when only the bytes differ.
DAMAGES = {
    "an-object-missing": (damage_missing, "object {object} of the group .* is missing from Swift",
                          {verify.MISSING}, True),
    "an-object-with-another-md5": (damage_other_bytes, "object {object} in Swift does not match its manifest's md5",
                                   {verify.MD5, verify.SIZE}, True),
    "records-out-of-order": (damage_swapped, "object {object} does not hold the 10 ordered records",
                             {verify.OFFSETS}, True),
    "a-record-repeated-across-objects": (damage_repeated, "object {object} does not hold the 10 ordered records",
                                         {verify.OFFSETS}, True),
    # Named by the object: the merged totals would refuse it too, but only naming the group.
    "a-record-missing": (damage_record_missing, "object {object} does not hold the 10 ordered records",
                         {verify.RECORDS}, True),
    "merged-totals-differ": (damage_totals, "the merged objects have records 20, the replaced manifests 21",
                             {verify.MANIFEST}, False),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_compaction_refuses_damaged_input_switches_nothing_deletes_nothing(kafka, swift, spark, new_topic, damage):
    """A group whose input is not what its manifests say is not merged: CompactionError naming
    the damage, no merged manifest (the switch), every source object and manifest left in Swift,
    and the verifier still names the damaged object (or manifest) afterwards."""
    spoil, says, kinds, names_object = DAMAGES[damage]
    topic = new_topic()
    cfg = config(topic)
    load(kafka, topic, 20)
    with swift.store() as store:
        store.check()
        archive_small(kafka, store, spark, cfg, 0, 20)
        pre = prefix(store, cfg)
        docs = [store.get_json(layout.manifest_name(pre, OffsetRange(topic, 0, a, a + RANGE_RECORDS)))
                for a in (0, 10)]
        assert [len(d["objects"]) for d in docs] == [1, 1]
        # One group of both ranges: compact_bytes is reached exactly with the second.
        cfg = dataclasses.replace(cfg, compact_bytes=sum(d["record_bytes"] for d in docs))
        spoil(store, docs, pre)
        damaged = docs[1]["objects"][0]["name"] if names_object else \
            layout.manifest_name(pre, OffsetRange(topic, 0, 10, 20))
        there = {o["name"] for o in store.list(layout.partition_dir(pre, topic, 0))}
        committed = kafka.committed(topic, [0], cfg.group)[0]

        with pytest.raises(CompactionError, match=says.format(object=re.escape(docs[1]["objects"][0]["name"]))):
            compact_partition(cfg, 0, committed, store, pre, spark)

        merged = OffsetRange(topic, 0, 0, 20)
        assert store.get(layout.manifest_name(pre, merged)) is None  # no switch
        assert effective_spans(store, cfg) == [(0, 10), (10, 20)]
        left = {o["name"] for o in store.list(layout.partition_dir(pre, topic, 0))}
        assert there <= left, there - left  # nothing of the sources deleted
        report = verify_topic(kafka, store, pre, cfg, 0)
        assert not report.ok
        assert {(p.kind, p.name) for p in report.problems} & {(k, damaged) for k in kinds}, report.render()
