"""Forgetting on the real stack (Kafka, Swift, Spark): a key's records gone from every object, the rest intact.

Each test archives topics with the product's own archive_range (and compaction), writes an erasure
request as `matos forget` does (core/erase/request.py), carries it out (core/erase/run.py), and
checks every object in the container, the reader, the verifier's full comparison with Kafka and
the monitor.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
import uuid

import pytest
from helpers import killed_script, produce, read_kafka, table_rows, user_env
from typed_samples import retype

from matos_dagster.core import reader
from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.compact.run import compact_topic
from matos_dagster.core.erase import keys, ledger, request
from matos_dagster.core.erase.run import carry_out
from matos_dagster.core.monitor import report as monitor
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.records.objects import decode
from matos_dagster.core.restore.plan import Request as RestoreRequest
from matos_dagster.core.restore.run import restore
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.archived import PartitionArchive
from matos_dagster.core.topics import TopicConfig
from matos_dagster.core.verify import verify_topic

SECRET = "an erasure key for the tests, 32b"
KEY = b"alice-7f3a"  # the key to forget: in every fifth record
RANGE = 10


@pytest.fixture(autouse=True)
def erasure_key(monkeypatch):
    """The archive's processes share MATOS_ERASURE_KEY: the writers apply the ledger with it."""
    monkeypatch.setenv(keys.SETTING, SECRET)


def config(topic: str, **kw) -> TopicConfig:
    kw.setdefault("compact_bytes", 1500)  # two ranges of 10 records (about 900 bytes each) a group
    kw.setdefault("compact_min_age_s", 0.0)
    kw.setdefault("compact_grace_s", 3600.0)  # the replaced folders stay: superseded data to erase too
    return TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}", **kw)


def load(kafka, topic: str, n: int, first: int = 0) -> list[int]:
    """`n` records; KEY's at every offset = 2 (mod 5); the offsets of KEY's records."""
    rows = []
    for i in range(first, first + n):
        key = KEY if i % 5 == 2 else (None if i % 7 == 3 else f"k{i}".encode())
        rows.append((key, f"value {i} ".encode() * 10, [("i", str(i).encode())] if i % 2 else []))
    produce(kafka, topic, rows, partition=0)
    return [i for i in range(first, first + n) if i % 5 == 2]


def prefix(store, cfg) -> str:
    return layout.join(store.params.prefix, cfg.prefix)


def archive(kafka, store, spark, cfg, start: int, end: int) -> None:
    for a in range(start, end, RANGE):
        archive_range(OffsetRange(cfg.name, 0, a, min(a + RANGE, end)), cfg, kafka, store, spark)


def ask(kafka, store, cfgs, secret: str = SECRET) -> str:
    """What `matos forget` does before it runs the job: the request in Swift; its id."""
    ends = {c.name: {0: kafka.watermarks(c.name, [0])[0][1]} for c in cfgs}
    req = request.make(keys.erasure_key(secret), [KEY], "ticket 4711", ends)
    request.write(store, store.params.prefix, req)
    return req.id


def data_objects(store) -> list[str]:
    return [o["name"] for o in store.list(store.params.prefix + "/")
            if any(o["name"].endswith(ext) for ext in layout.EXTENSIONS.values())
            and "/_" not in o["name"][len(store.params.prefix):]]


def assert_forgotten(kafka, store, cfgs, erased: dict[str, list[int]]) -> None:
    """No object anywhere holds KEY; each topic reads as Kafka minus KEY's records; verify (full) is clean."""
    for name in data_objects(store):
        fmt = "jsonl" if name.endswith(".jsonl.gz") else "parquet"
        assert KEY not in decode(store.get(name), fmt)["key"].to_pylist(), name
    for cfg in cfgs:
        want = [r for r in read_kafka(kafka, cfg.name, 0) if r["key"] != KEY]
        got = table_rows(reader.read_table(store, prefix(store, cfg), cfg.name, partitions=[0]))
        assert [r["offset"] for r in got] == [r["offset"] for r in want]
        assert [(r["key"], r["value"]) for r in got] == [(r["key"], r["value"]) for r in want]
        docs = [PartitionArchive(store, prefix(store, cfg), cfg.name, 0).read(e)
                for e in PartitionArchive(store, prefix(store, cfg), cfg.name, 0).all()]
        assert sorted(o for d in docs for o in d.get("erased", [])) == erased[cfg.name]
        assert all(d["version"] == 4 for d in docs if d.get("erased"))
        report = verify_topic(kafka, store, prefix(store, cfg), cfg, None)  # every record compared with Kafka
        assert report.ok, report.render()
        assert report.compared == len(want)
        # The monitor: erased offsets are neither a gap nor lost.
        end = kafka.watermarks(cfg.name, [0])[0][1]
        archive_ = PartitionArchive(store, prefix(store, cfg), cfg.name, 0)
        judged = monitor.evaluate_partition(cfg, 0, 0, end, end, monitor.read_entries(archive_, None, end), None, [],
                                            time.time(), None)
        assert (judged.status, judged.ahwm, judged.gaps, judged.lost) == (monitor.OK, end, [], []), judged.reasons


def no_strays(store, cfg) -> None:
    """Every object of a folder with a manifest is one the manifest lists."""
    p = prefix(store, cfg)
    for f in PartitionArchive(store, p, cfg.name, 0).folders_from(0):
        doc = store.get_json(layout.manifest_name(p, OffsetRange(cfg.name, 0, f.start, f.end)))
        if doc is not None:
            data = {n for n in f.names if not layout.is_bookkeeping(n)}
            assert data == {o["name"] for o in doc["objects"]}, f.span


def test_a_key_spread_over_parquet_json_lines_typed_and_compacted_objects_is_gone_and_every_other_record_stays(
        kafka, swift, spark, new_topic):
    par, jl, ty = config(new_topic()), config(new_topic(), format="jsonl"), config(new_topic())
    erased = {par.name: load(kafka, par.name, 40), jl.name: load(kafka, jl.name, 20), ty.name: load(kafka, ty.name, 20)}
    with swift.store() as store:
        for cfg, n in ((par, 40), (jl, 20), (ty, 20)):
            archive(kafka, store, spark, cfg, 0, n)
        retype(store, prefix(store, ty), ty.name, 0, {0: 1, 10: 2})  # Avro-typed objects, two schema versions
        done = compact_topic(par, kafka.committed(par.name, [0], par.group), store, spark)
        assert [g for p in done.partitions for g in p.groups] == [(0, 20), (20, 40)]
        superseded = [f.span for f in PartitionArchive(store, prefix(store, par), par.name, 0).folders_from(0)]
        assert len(superseded) == 6  # 2 compacted + the 4 they replaced, still inside the grace period
        # An unfinished attempt (a folder without a manifest) holding the key: no manifest vouches for it.
        attempt = layout.range_dir(prefix(store, jl), OffsetRange(jl.name, 0, 0, 20))
        store.put(layout.object_name(attempt, 0, "jsonl"), store.get(
            store.get_json(layout.manifest_name(prefix(store, jl), OffsetRange(jl.name, 0, 0, 10)))["objects"][0]["name"]))

        request_id = ask(kafka, store, [par, jl, ty])
        gone = carry_out(request_id, store, {c.name: c for c in (par, jl, ty)}, SECRET, run_id="r1")

        assert gone.records == sum(len(v) for v in erased.values()) == 16
        assert_forgotten(kafka, store, [par, jl, ty], erased)
        for cfg in (par, jl, ty):
            no_strays(store, cfg)
        # The superseded folders were rewritten too (their records are the compacted ones'), not dropped.
        assert [f.span for f in PartitionArchive(store, prefix(store, par), par.name, 0).folders_from(0)] == superseded
        # Typed counts follow the records left.
        typed_doc = PartitionArchive(store, prefix(store, ty), ty.name, 0).read(
            next(PartitionArchive(store, prefix(store, ty), ty.name, 0).all()))
        t = typed_doc["typed"]["value"]
        assert t["decoded"] + t["failed"] + t["nulls"] == typed_doc["records"] == 8
        # The request is gone; the record names the erasure by keyed hash only.
        assert request.read(store, store.params.prefix, request_id) is None
        raw = store.get(layout.erasure_record_name(store.params.prefix, request_id))
        record = json.loads(raw)
        assert record["records_erased"] == 16 and record["reason"] == "ticket 4711" and record["run_id"] == "r1"
        assert record["topics"][par.name]["0"]["records_erased"] == 8
        assert KEY not in raw and KEY.hex().encode() not in raw
        everything = b"".join(store.get(o["name"]) for o in store.list(store.params.prefix + "/_erasure/"))
        assert KEY not in everything and KEY.hex().encode() not in everything


def test_a_restore_of_a_range_with_erased_offsets_produces_every_other_record_in_order_and_none_of_the_key(
        kafka, swift, spark, new_topic):
    cfg = config(new_topic())
    erased = load(kafka, cfg.name, 20)
    with swift.store() as store:
        archive(kafka, store, spark, cfg, 0, 20)
        carry_out(ask(kafka, store, [cfg]), store, {cfg.name: cfg}, SECRET, run_id="r1")
        target = new_topic()

        report = restore(RestoreRequest(cfg.name, prefix(store, cfg), target=target), kafka, store, spark)

    want = [r for r in read_kafka(kafka, cfg.name, 0) if r["key"] != KEY]
    got = read_kafka(kafka, target, 0)
    assert report.records == len(want) == 20 - len(erased)
    assert [(r["key"], r["value"], r["headers"]) for r in got] == [(r["key"], r["value"], r["headers"]) for r in want]
    # The target's offsets are its own (a transaction's commit marker takes one too): the erased
    # records were not produced, so the records after them have lower offsets than in the source.
    offsets = [r["offset"] for r in got]
    assert offsets == sorted(set(offsets)) and offsets[-1] < want[-1]["offset"]


def test_a_container_that_keeps_old_versions_is_refused_in_one_line_by_the_core_the_job_and_matos_forget_changing_nothing(
        kafka, swift, spark, new_topic, kafka_server, swift_server, tmp_path):
    from dagster import DagsterInstance

    from matos_dagster.core.topic_set import TopicSet
    from matos_dagster.jobs.forget import forget_job

    cfg = config(new_topic())
    load(kafka, cfg.name, 10)
    with swift.store() as store:
        archive(kafka, store, spark, cfg, 0, 10)
        versions = f"{store.container}-versions"
        store._conn.put_container(versions)
        store._conn.post_container(store.container, {"X-History-Location": versions})
        store.put("probe", b"old")
        store.put("probe", b"new")  # Swift keeps the old content: what an erasure's rewrite would leave
        assert [o["bytes"] for o in store._conn.get_container(versions)[1]] == [3]
        store.delete("probe")
        request_id = ask(kafka, store, [cfg])
        before = sorted((o["name"], o["hash"]) for o in store.list(store.params.prefix + "/"))

        with pytest.raises(request.RequestError) as refused:
            carry_out(request_id, store, {cfg.name: cfg}, SECRET)
        line = str(refused.value)
        assert "\n" not in line and f"X-History-Location: {versions}" in line
        assert "turn versioning off" in line and "the erased records would stay in them" in line
        with DagsterInstance.ephemeral() as instance:
            result = forget_job(TopicSet([cfg])).execute_in_process(
                run_config={"ops": {"forget_keys": {"config": {"request": request_id}}}}, instance=instance,
                resources={"swift": swift}, raise_on_error=False)
        assert not result.success
        assert line in str(result.failure_data_for_node("forget_keys").error.message)
        env = user_env(tmp_path, kafka_server, swift_server, f"topics:\n  - name: {cfg.name}\n",
                       container=store.container, **{keys.SETTING: SECRET})
        cli = subprocess.run([sys.executable, "-m", "matos_dagster", "forget", "--topic", cfg.name, "--key",
                              KEY.decode(), "--reason", "t"], env=env, capture_output=True, text=True, timeout=300)
        assert cli.returncode == 2, cli.stderr[-3000:]
        assert cli.stderr.strip().splitlines() == [f"python -m matos_dagster forget: {line.split(': ', 1)[1]}"]

        # Nothing changed: no ledger, no new request, every object as it was.
        assert sorted((o["name"], o["hash"]) for o in store.list(store.params.prefix + "/")) == before
        assert store.get_json(layout.erasure_ledger_name(prefix(store, cfg), cfg.name)) is None
        assert request.read(store, store.params.prefix, request_id) is not None


def test_a_merge_after_the_request_entered_the_ledger_leaves_the_key_out_of_objects_that_still_hold_it(
        kafka, swift, spark, new_topic):
    cfg = config(new_topic())
    erased = load(kafka, cfg.name, 40)
    with swift.store() as store:
        archive(kafka, store, spark, cfg, 0, 40)
        # The request in the ledger, the erasure not run yet (its turn to come): every object holds the key.
        req = request.read(store, store.params.prefix, ask(kafka, store, [cfg]))
        ledger.add(store, prefix(store, cfg), cfg.name, req)

        done = compact_topic(cfg, kafka.committed(cfg.name, [0], cfg.group), store, spark)

        assert [g for p in done.partitions for g in p.groups] == [(0, 20), (20, 40)]
        archive_ = PartitionArchive(store, prefix(store, cfg), cfg.name, 0)
        merged = [archive_.read(e) for e in archive_.all()]
        assert [(d["start"], d["end"]) for d in merged] == [(0, 20), (20, 40)]
        for d in merged:
            for o in d["objects"]:
                assert KEY not in decode(store.get(o["name"]), "parquet")["key"].to_pylist(), o["name"]
        assert [o for d in merged for o in d["erased"]] == erased
        assert sum(d["records"] for d in merged) == 40 - len(erased)
        want = [r for r in read_kafka(kafka, cfg.name, 0) if r["key"] != KEY]
        got = table_rows(reader.read_table(store, prefix(store, cfg), cfg.name, partitions=[0]))
        assert [(r["offset"], r["key"], r["value"]) for r in got] == [(r["offset"], r["key"], r["value"]) for r in want]
        report = verify_topic(kafka, store, prefix(store, cfg), cfg, None)
        assert report.ok, report.render()


def test_a_range_archived_again_after_the_erasure_leaves_the_key_out(kafka, swift, spark, new_topic):
    cfg = config(new_topic())
    erased = {cfg.name: load(kafka, cfg.name, 20)}
    with swift.store() as store:
        archive(kafka, store, spark, cfg, 0, 20)
        carry_out(ask(kafka, store, [cfg]), store, {cfg.name: cfg}, SECRET)
        # An object that no longer matches its manifest: the next run archives the range again from Kafka.
        doc = PartitionArchive(store, prefix(store, cfg), cfg.name, 0).read(
            next(PartitionArchive(store, prefix(store, cfg), cfg.name, 0).all()))
        store.delete(doc["objects"][0]["name"])
        again = archive_range(OffsetRange(cfg.name, 0, 0, RANGE), cfg, kafka, store, spark)
        assert not again.verified_only
        assert again.manifest["erased"] == [2, 7]
        assert_forgotten(kafka, store, [cfg], erased)
        no_strays(store, cfg)
        # Compaction carries the erased offsets into the range it merges: erased, not a gap.
        smaller = dataclasses.replace(cfg, compact_bytes=1000)  # the ranges lost their erased records' bytes
        done = compact_topic(smaller, kafka.committed(cfg.name, [0], cfg.group), store, spark)
        assert [g for p in done.partitions for g in p.groups] == [(0, 20)]
        merged = store.get_json(layout.manifest_name(prefix(store, cfg), OffsetRange(cfg.name, 0, 0, 20)))
        assert merged["erased"] == [2, 7, 12, 17] and merged["records"] == 16
        assert_forgotten(kafka, store, [cfg], erased)
        # A record of the key produced after the request is archived as any other.
        load(kafka, cfg.name, 5, first=20)
        later = archive_range(OffsetRange(cfg.name, 0, 20, 25), cfg, kafka, store, spark)
        assert "erased" not in later.manifest and later.manifest["records"] == 5


def test_writers_refuse_a_ledger_they_cannot_apply_in_one_line(kafka, swift, spark, new_topic, monkeypatch):
    cfg = config(new_topic())
    load(kafka, cfg.name, 20)
    with swift.store() as store:
        archive(kafka, store, spark, cfg, 0, 10)
        req = request.Request("20260101T000000Z-00000000", "2026-01-01T00:00:00Z", "t", keys.key_id(SECRET.encode()),
                              (keys.keyed_hash(SECRET.encode(), KEY),), {cfg.name: {0: 20}})
        ledger.add(store, prefix(store, cfg), cfg.name, req)
        monkeypatch.setenv(keys.SETTING, "another key, also 32 bytes long.")
        with pytest.raises(ValueError, match="made with another MATOS_ERASURE_KEY") as e:
            archive_range(OffsetRange(cfg.name, 0, 10, 20), cfg, kafka, store, spark)
        assert "\n" not in str(e.value)
        assert store.get_json(layout.manifest_name(prefix(store, cfg), OffsetRange(cfg.name, 0, 10, 20))) is None


_KILLED = """
import json, os, sys
from matos_dagster.core.erase.run import carry_out
from matos_dagster.core.monitor import report as monitor
from matos_dagster.core.topics import TopicConfig
from matos_dagster.resources import SwiftResource

a = json.loads(sys.argv[1])
swift = SwiftResource(auth_url=a["auth_url"], user=a["user"], key=os.environ["MATOS_SWIFT_KEY"],
                      container=a["container"], prefix="kafka", retries=2)
with swift.store() as store:
    carry_out(a["request"], store, {a["topic"]: TopicConfig(name=a["topic"])}, a["secret"])
print("not killed")
"""


def killed(swift, request_id: str, topic: str, point: str) -> None:
    args = {"auth_url": swift.auth_url, "user": swift.user, "container": swift.container, "request": request_id,
            "topic": topic, "secret": SECRET}
    killed_script(_KILLED, args, swift, point)


@pytest.mark.parametrize("point", [
    pytest.param("forget-after-ledger", marks=pytest.mark.slow),
    pytest.param("erase-after-objects", marks=pytest.mark.slow),
    "erase-after-manifest",  # the one in the default suite: old objects left as strays beside the new manifest
    pytest.param("forget-after-record", marks=pytest.mark.slow),
])
def test_an_erasure_killed_at_a_step_then_run_again_ends_as_one_that_was_not(kafka, swift, spark, new_topic, point):
    cfg = config(new_topic())
    erased = {cfg.name: load(kafka, cfg.name, 20)}
    with swift.store() as store:
        archive(kafka, store, spark, cfg, 0, 20)
        request_id = ask(kafka, store, [cfg])
        killed(swift, request_id, cfg.name, point)
        if point == "forget-after-record":  # the record is there; the request too, until the re-run
            assert request.read(store, store.params.prefix, request_id) is not None
        gone = carry_out(request_id, store, {cfg.name: cfg}, SECRET)
        assert_forgotten(kafka, store, [cfg], erased)
        no_strays(store, cfg)
        assert gone.record["records_erased"] == 4
        assert request.read(store, store.params.prefix, request_id) is None
        with pytest.raises(request.RequestError, match="it was carried out"):
            carry_out(request_id, store, {cfg.name: cfg}, SECRET)


def test_the_forget_job_takes_a_request_id_and_leaves_no_key_in_dagster_storage_or_logs(
        kafka, swift, spark, new_topic, tmp_path, caplog):
    from dagster import DagsterInstance

    from matos_dagster.core.topic_set import TopicSet
    from matos_dagster.jobs.forget import forget_job

    cfg = config(new_topic())
    load(kafka, cfg.name, 10)
    home = tmp_path / "dagster"
    home.mkdir()
    with swift.store() as store:
        archive(kafka, store, spark, cfg, 0, 10)
        request_id = ask(kafka, store, [cfg])
        with DagsterInstance.local_temp(str(home)) as instance:
            result = forget_job(TopicSet([cfg])).execute_in_process(
                run_config={"ops": {"forget_keys": {"config": {"request": request_id}}}}, instance=instance,
                resources={"swift": swift})
            assert result.success
            assert result.output_for_node("forget_keys") == 2
            run_config = instance.get_run_by_id(result.run_id).run_config
        assert run_config == {"ops": {"forget_keys": {"config": {"request": request_id}}}}
        assert_forgotten(kafka, store, [cfg], {cfg.name: [2, 7]})
        assert request.read(store, store.params.prefix, request_id) is None
    stored = b"".join(p.read_bytes() for p in home.rglob("*") if p.is_file())
    assert request_id.encode() in stored  # the storage was searched: the run is in it
    for form in (KEY, KEY.hex().encode(), __import__("base64").b64encode(KEY)):
        assert form not in stored
        assert form.decode() not in caplog.text
