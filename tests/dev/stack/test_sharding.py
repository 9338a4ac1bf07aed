"""Swift's container sharding under the archive (issue 13.5), on the local Swift.

An operator whose archive container grows past Swift's advice shards it with Swift's own tools
(`swift-manage-shard-ranges <db> find_and_replace <rows> --enable`, then the container sharder).
Clients are not told: listings are served from the shard containers. These tests prove the
archive does not notice. On a history written with the project's layout (range folders with
a Parquet part and a manifest, a compacted range whose replaced folders are still there, a run
of unfinished attempts longer than one reverse-listing page), every answer of the finder, the
verifier and the reader is taken, the container is sharded into small shards (tens of rows, so
shard boundaries fall everywhere: between folders, inside a folder, inside the run of unfinished
attempts), and every answer is taken again and must be identical. Then a range is archived on
the sharded container by the real archive path, and found.

Reverse listings across shard boundaries are the risky part (`last_before` pages backwards
over folders with a delimiter): every range start is probed near each shard boundary.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from confluent_kafka import Consumer, TopicPartition
from helpers import read_kafka
from matos_dev.stack.__main__ import main as devstack

from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.reader import read_table
from matos_dagster.core.records.batch import Batch
from matos_dagster.core.records.objects import encode
from matos_dagster.core.records.schema import TIMESTAMP_TYPES
from matos_dagster.core.swift import layout, manifest
from matos_dagster.core.swift.archived import RANGE, Entry, PartitionArchive
from matos_dagster.core.swift.store import canonical_json
from matos_dagster.core.topics import TopicConfig
from matos_dagster.core.verify import EVERYTHING, verify_topic

SIZE = 5  # offsets per range
PREFIX = "kafka"  # the swift fixture's prefix; topics add none
# Record i is stamped T0 + i seconds; recent, or the broker's retention would delete them at once.
T0 = (int(time.time()) - 3 * 3600) * 1000
TYPES = {name: number for number, name in TIMESTAMP_TYPES.items()}


def produce_records(kafka, topic: str, n: int) -> None:
    p = kafka.producer()
    for i in range(n):
        p.produce(topic, key=f"k{i}".encode(), value=f"value {i} ".encode() * (1 + i % 7),
                  headers=[("h", str(i % 3).encode())] if i % 2 else None, partition=0, timestamp=T0 + i * 1000)
        p.poll(0)
    assert p.flush(30) == 0


def commit(kafka, topic: str, group: str, offset: int) -> None:
    c = Consumer({**kafka.client_config(), "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        c.close()


def part_object(directory: str, rows: list[dict]) -> tuple[str, bytes, dict]:
    """A Parquet part of `rows` as a slice task writes it: (name, data, manifest entry)."""
    batch = Batch(rows[0]["topic"], rows[0]["partition"])
    for r in rows:
        headers = [(h["key"], h["value"]) for h in r["headers"]]
        size = len(r["key"] or b"") + len(r["value"] or b"") + sum(len(k) + len(v or b"") for k, v in headers)
        batch.add(r["offset"], TYPES[r["timestamp_type"]], r["timestamp"], r["key"], r["value"], headers, size)
    data = encode(batch.table(), "parquet")
    name = layout.object_name(directory, rows[0]["offset"], "parquet")
    entry = {"name": name, "bytes": len(data), "md5": hashlib.md5(data).hexdigest(), "record_bytes": batch.nbytes,
             "largest_record_bytes": batch.largest, **batch.stats()}
    return name, data, entry


def history(topic: str, rows: list[dict], ranges: int, compacted: int, unfinished: int, failed: int) -> list:
    """The objects (name, bytes, content type) of `ranges` archived ranges of SIZE offsets.

    Range `compacted` and the four after it are also merged into one compacted range (its own
    folder, the five replaced ones still there, as within compaction's grace period). After
    range `failed`, `unfinished` folders of attempts that stopped after their first object
    (`[start, start + SIZE + 1 + j)`: no manifest, so no entry).
    """
    out = []

    def folder(start: int, end: int, with_manifest: bool = True):
        r = OffsetRange(topic, 0, start, end)
        name, data, entry = part_object(layout.range_dir(PREFIX, r), rows[start:end])
        out.append((name, data, "application/octet-stream"))
        if with_manifest:
            out.append((layout.manifest_name(PREFIX, r), manifest_bytes(r, [entry]), "application/json"))

    for i in range(ranges):
        folder(i * SIZE, (i + 1) * SIZE)
    folder(compacted * SIZE, (compacted + 5) * SIZE)
    for j in range(unfinished):
        folder(failed * SIZE, (failed + 1) * SIZE + 1 + j, with_manifest=False)
    return out


def manifest_bytes(r: OffsetRange, objects: list[dict]) -> bytes:
    return canonical_json(manifest.build(r, "parquet", objects))


def put_all(swift, objects: list) -> None:
    """PUT every object, four connections at once (Swift's CPU per PUT is the limit here)."""
    stores = [swift.store() for _ in range(4)]
    try:
        def put(i_obj):
            i, (name, data, ctype) = i_obj
            stores[i % 4].put(name, data, content_type=ctype)

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(put, enumerate(objects)))
    finally:
        for s in stores:
            s.close()


def answers(archive: PartitionArchive, probes: list[int], kafka, store, cfg: TopicConfig, end: int,
            audit_all: bool) -> dict:
    """Everything the archive's lookups say about the partition, at each probe offset.

    At a range start: the entry below (a reverse listing) and the entry at or after it. Part-way
    into a range (start + 2): the entries from there (the covering entry first) and the folders.
    """
    topic = cfg.name
    out: dict = {"all": list(archive.all())}
    for o in probes:
        if o % SIZE == 0:
            out[o] = (archive.last_before(o), archive.entry_at_or_after(o))
        else:
            out[o] = (list(itertools.islice(archive.entries_from(o), 8)),
                      [(f.span, f.entry, f.names) for f in itertools.islice(archive.folders_from(o), 4)])
    for lo in probes[::5]:
        out[f"overlapping {lo}"] = archive.overlapping(lo, lo + 3 * SIZE + 2)
    for since in (EVERYTHING, end // 2 + 3) if audit_all else (end // 2 + 3,):
        report = verify_topic(kafka, store, PREFIX, cfg, sample=0, since=since, move_mark=False)
        out[f"verify {since}"] = dataclasses.replace(report, duration_s=0.0)
    # Reader windows across the history: by offsets, and by time (a binary search over offsets).
    for lo, hi in ((3, end - 7), (end // 3, end // 3 + 4 * SIZE + 1)):
        out[f"read offsets {lo}-{hi}"] = read_table(store, PREFIX, topic, [0], start=lo, end=hi).to_pylist()
    since_ms, until_ms = T0 + (end // 4) * 1000 + 500, T0 + (end // 4 + 3 * SIZE) * 1000
    out["read times"] = read_table(store, PREFIX, topic, [0], since_ms=since_ms, until_ms=until_ms).to_pylist()
    return out


class Clock:
    """Wall time of each phase, printed at the end (not asserted)."""

    def __init__(self):
        self.t, self.laps = time.monotonic(), {}

    def __call__(self, what: str) -> None:
        now = time.monotonic()
        self.laps[what] = round(now - self.t, 1)
        self.t = now


def backend_sharding_state(swift_server, container: str) -> str:
    """`X-Backend-Sharding-State` of a HEAD straight to the container server."""
    where = swift_server.container_db(container)
    url = (f"http://127.0.0.1:{swift_server.ports()['container']}/d1/{where['partition']}/"
           f"{swift_server.account}/{container}")
    r = requests.head(url, timeout=30)
    r.raise_for_status()
    return r.headers["X-Backend-Sharding-State"]


@pytest.mark.parametrize("ranges, rows, thorough", [
    # make test: the finder near every shard boundary, the verifier from an offset, the reader.
    pytest.param(24, 12, False, id="24-ranges-shards-of-12-rows"),
    # make test-all: also the answers half-way through the sharding, and a full audit.
    pytest.param(300, 100, True, id="300-ranges-shards-of-100-rows", marks=pytest.mark.slow),
])
def test_the_archive_answers_the_same_after_its_container_is_sharded_and_archiving_goes_on(
        kafka, swift, swift_server, spark, new_topic, ranges, rows, thorough):
    topic = new_topic()
    end = ranges * SIZE
    produce_records(kafka, topic, end + 2 * SIZE)
    cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}")
    commit(kafka, topic, cfg.group, end)
    kafka_rows = read_kafka(kafka, topic, 0)
    compacted, failed = ranges // 3, (2 * ranges) // 3
    unfinished = rows + rows // 2  # more than a shard's rows: a shard boundary falls inside them
    objects = history(topic, kafka_rows, ranges, compacted, unfinished, failed)
    clock = Clock()
    with swift.store() as store:
        put_all(swift, objects)
        clock("history written")
        archive = PartitionArchive(store, PREFIX, topic, 0)
        names = [item["name"] for item in store.list(archive.dir)]
        assert len(names) == len(objects)

        # Probes: range starts and mid-range offsets in the ranges on either side of where each
        # shard boundary will fall (find_and_replace cuts after every `rows` names in order),
        # every 7th range, and the edges.
        cut = {layout.parse_range_dir(n.rpartition("/")[0])[0] // SIZE for n in names[rows - 1::rows]}
        near = {i + d for i in cut for d in (-1, 0, 1)} | set(range(0, ranges, 10)) | {compacted + 2, failed + 1}
        probes = sorted({o for i in near if 0 <= i <= ranges for o in (i * SIZE, i * SIZE + 2)} | {end + 3})

        before = answers(archive, probes, kafka, store, cfg, end, thorough)
        clock("answers before")
        expected = [Entry(i * SIZE, (i + 1) * SIZE, RANGE) for i in range(compacted)]
        expected += [Entry(compacted * SIZE, (compacted + 5) * SIZE, RANGE)]
        expected += [Entry(i * SIZE, (i + 1) * SIZE, RANGE) for i in range(compacted + 5, ranges)]
        assert before["all"] == expected
        assert before[(failed + 1) * SIZE][0] == Entry(failed * SIZE, (failed + 1) * SIZE, RANGE)
        report = before[f"verify {EVERYTHING if thorough else end // 2 + 3}"]
        assert report.ok and report.totals()["manifests"] > 0, report.render()
        assert [r["offset"] for r in before[f"read offsets 3-{end - 7}"]] == list(range(3, end - 7))
        assert before["read times"], "the time window holds records"

        assert backend_sharding_state(swift_server, swift.container) == "unsharded"
        # Half-way: one sharder pass cleaving one shard range; listings come from the first
        # shard and from the root for the rest.
        if thorough:
            midway = swift_server.shard(swift.container, rows, max_passes=1, wait=False, cleave_batch_size=1)
            assert midway["state"] == "sharding" and midway["found"]
            assert [s["state"] for s in midway["shard_ranges"]].count("cleaved") == 1
            clock("one sharder pass")
            during = answers(archive, probes, kafka, store, cfg, end, thorough)
            clock("answers while sharding")
            for key in before:
                assert during[key] == before[key], f"{key}: differs while the container is sharding"

        sharded = swift_server.shard(swift.container, rows)
        assert sharded["found"] != thorough  # thorough: the sharding begun above, carried on
        clock("sharded")
        assert sharded["state"] == "sharded"
        assert backend_sharding_state(swift_server, swift.container) == "sharded"
        shards = sharded["shard_ranges"]
        assert len(shards) >= len(objects) // rows
        assert all(s["state"] == "active" for s in shards)
        assert sum(s["object_count"] for s in shards) == len(objects)
        # Every shard boundary lies in the probed neighbourhood.
        bounds = [s["upper"] for s in shards if s["upper"]]
        assert {layout.parse_range_dir(b.rpartition("/")[0])[0] // SIZE for b in bounds} <= cut

        after = answers(archive, probes, kafka, store, cfg, end, thorough)
        clock("answers after")
        for key in before:
            assert after[key] == before[key], f"{key}: differs after sharding"

        # Archiving goes on: the next range, by the archive itself (Spark task, manifest, commit).
        done = archive_range(OffsetRange(topic, 0, end, end + SIZE), cfg, kafka, store, spark)
        assert not done.already_archived and done.committed_after == end + SIZE
        clock("archived a range")
        assert archive.entry_at_or_after(end) == Entry(end, end + SIZE, RANGE)
        assert archive.last_before(end + SIZE) == Entry(end, end + SIZE, RANGE)
        assert list(archive.entries_from(end - 1)) == [Entry(end - SIZE, end, RANGE), Entry(end, end + SIZE, RANGE)]
        assert read_table(store, PREFIX, topic, [0], start=end).to_pylist() == \
            read_table(store, PREFIX, topic, [0], start=end, end=end + SIZE).to_pylist()
        assert [r["offset"] for r in read_table(store, PREFIX, topic, [0], start=end).to_pylist()] == \
            list(range(end, end + SIZE))
        report = verify_topic(kafka, store, PREFIX, cfg, sample=None, since=end - SIZE, move_mark=False)
        assert report.ok and report.compared >= 2 * SIZE, report.render()
        # Its rows went to a shard, as the proxy sends a sharded container's updates: none is
        # left misplaced in the root for a sharder to move later.
        now = swift_server.sharding(swift.container)
        assert now["state"] == "sharded" and now["misplaced"] == 0
        clock("checked")
        print(f"{len(objects)} objects, {len(shards)} shard ranges of {rows} rows, {sharded['passes']} passes; "
              f"{len(probes)} probe offsets; seconds: {clock.laps}")


def test_the_devstack_shard_command_shards_a_container_once_and_names_a_wrong_one(
        swift_server, swift, tmp_path, monkeypatch, capsys):
    """`python -m matos_dev.stack shard CONTAINER --rows N`, on the local stack's Swift."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "swift").symlink_to(swift_server.data_dir)  # the stack's layout
    monkeypatch.setenv("MATOS_DEVSTACK_DIR", str(tmp_path))
    monkeypatch.setenv("MATOS_DEVSTACK_CACHE", str(swift_server.cache_dir))
    monkeypatch.setenv("MATOS_DEVSTACK_SWIFT_PORT", str(swift_server.proxy_port))
    monkeypatch.setenv("MATOS_DEVSTACK_AUTH", "tempauth")
    with swift.store() as store:
        for i in range(30):
            store.put(f"kafka/o{i:03d}", b"x")
        listed = list(store.list(""))

        assert devstack(["shard", swift.container, "--rows", "10"]) == 0
        out = capsys.readouterr().out
        assert f"AUTH_test/{swift.container} is sharded: 3 shard ranges" in out
        assert list(store.list("")) == listed
        assert swift_server.sharding(swift.container)["state"] == "sharded"

        assert devstack(["shard", swift.container, "--rows", "10"]) == 0
        assert "is sharded already, in 3 shard ranges" in capsys.readouterr().out

    assert devstack(["shard", "no-such-container", "--rows", "10"]) == 1
    err = capsys.readouterr().err
    assert "AUTH_test/no-such-container has no database" in err and "is the name right" in err
    assert devstack(["shard", swift.container, "--rows", "0"]) == 1
    assert "--rows is 0" in capsys.readouterr().err
