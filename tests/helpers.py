"""Test helpers written apart from the product code, so they check it rather than repeat it."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition


def under_ci() -> bool:
    """Whether this session runs under CI (GitHub Actions, GitLab and most others set CI=true)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def missing(piece: str) -> NoReturn:
    """End a test that cannot run here because `piece` is missing.

    `piece` says what is missing and how to get it. On a developer's machine the test is
    skipped with that message; under CI it fails with the same message, since a green CI run
    must never lack a proof only because the machine lacked what the proof needs.
    """
    if under_ci():
        pytest.fail(piece, pytrace=False)
    pytest.skip(piece)


# confluent_kafka's TIMESTAMP_NOT_AVAILABLE / _CREATE_TIME / _LOG_APPEND_TIME, as the archive names them.
TIMESTAMP_TYPES = {0: "NotAvailable", 1: "CreateTime", 2: "LogAppendTime"}


def produce(kafka, topic: str, rows, partition: int | None = None, timestamp: int | None = None,
            **producer_conf) -> None:
    """rows: iterable of (key, value, headers) or (key, value, headers, partition); every record
    stamped `timestamp` (ms) if given, else by the producer's clock."""
    p = kafka.producer(**producer_conf)
    for row in rows:
        key, value, headers, *part = row
        kwargs = {"key": key, "value": value, "headers": headers}
        if timestamp is not None:
            kwargs["timestamp"] = timestamp
        target = part[0] if part else partition
        if target is not None:
            kwargs["partition"] = target
        p.produce(topic, **kwargs)
        p.poll(0)
    assert p.flush(30) == 0, "records left unsent"


def read_kafka(kafka, topic: str, partition: int, start: int = 0, end: int | None = None) -> list[dict]:
    """Every committed record of [start, end) straight from Kafka, as archive rows."""
    c = Consumer({**kafka.client_config(), "group.id": "test-reader", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": True,
                  "auto.offset.reset": "earliest"})
    low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
    end = high if end is None else end
    out: list[dict] = []
    if start >= end:
        c.close()
        return out
    c.assign([TopicPartition(topic, partition, max(start, low))])
    try:
        while True:
            m = c.poll(10)
            assert m is not None, f"no record from {topic}/{partition} within 10s"
            if m.error():
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                if m.offset() >= end:
                    return out
                continue
            if m.offset() >= end:
                return out
            ts_type, ts = m.timestamp()
            out.append({
                "topic": topic, "partition": partition, "offset": m.offset(),
                "timestamp": ts if ts_type else None,
                "timestamp_type": TIMESTAMP_TYPES[ts_type],
                "key": m.key(), "value": m.value(),
                "headers": [{"key": k, "value": v} for k, v in (m.headers() or [])],
            })
    finally:
        c.close()


def decode_object(data: bytes, format: str) -> list[dict]:
    """An archived object's rows as read_kafka gives them (timestamps as epoch milliseconds).

    Written apart from matos_dagster.core.records (objects.py), from the README's description of the format
    only, so a defect of the product's encoder or decoder shows here as a difference.
    """
    if format == "parquet":
        table = pq.read_table(io.BytesIO(data))
        assert table.schema.field("timestamp").type == pa.timestamp("ms", tz="UTC"), table.schema
        # Milliseconds as stored (int64), never through datetime or float.
        stamps = table.column("timestamp").cast(pa.int64()).to_pylist()
        rows = table.drop_columns(["timestamp"]).to_pylist()
        for r, ts in zip(rows, stamps):
            r["timestamp"] = ts
        return [{k: r[k] for k in ROW_FIELDS} for r in rows]
    if format == "jsonl":
        def unb64(s):
            return None if s is None else base64.b64decode(s, validate=True)

        rows = []
        for line in gzip.decompress(data).decode("utf-8").split("\n"):
            if not line:
                continue
            r = json.loads(line)
            assert r["timestamp"] is None or type(r["timestamp"]) is int, f"timestamp not an integer: {line[:200]}"
            rows.append({
                "topic": r["topic"], "partition": r["partition"], "offset": r["offset"],
                "timestamp": r["timestamp"], "timestamp_type": r["timestamp_type"],
                "key": unb64(r["key"]), "value": unb64(r["value"]),
                "headers": [{"key": h["key"], "value": unb64(h["value"])} for h in r["headers"]],
            })
        return rows
    raise AssertionError(f"unknown format {format!r}")


ROW_FIELDS = ("topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers")


def read_archive(store, manifest: dict) -> list[dict]:
    """The rows of a manifest's objects, in offset order, decoded by `decode_object`."""
    rows = []
    for o in manifest["objects"]:
        rows.extend(decode_object(store.get(o["name"]), manifest["format"]))
    return rows


def table_rows(table: pa.Table) -> list[dict]:
    """A product Arrow table (schema.SCHEMA) as read_kafka rows, timestamps as int64 milliseconds."""
    stamps = table.column("timestamp").cast(pa.int64()).to_pylist()
    rows = table.drop_columns(["timestamp"]).to_pylist()
    for r, ts in zip(rows, stamps):
        r["timestamp"] = ts
    return [{k: r[k] for k in ROW_FIELDS} for r in rows]


def manifests(store, topic: str) -> list[dict]:
    """Every manifest of the topic in the container, found by listing, not by the product's code."""
    _, items = store._conn.get_container(store.container, full_listing=True)
    docs = [json.loads(store.get(i["name"])) for i in items if i["name"].endswith("/_manifest.json")]
    return [d for d in docs if d["topic"] == topic]


def check_archive(kafka, store, topic: str, group: str) -> dict[int, int | None]:
    """The invariant of docs/design.md, checked independently; returns the committed offsets.

    Every offset in [log start, committed) is in exactly one manifest, and every object a
    manifest lists is in Swift with its size, md5 and record count.
    """
    docs = manifests(store, topic)
    parts = kafka.partitions(topic)
    marks = kafka.watermarks(topic, parts)
    committed = kafka.committed(topic, parts, group)
    for p in parts:
        spans = sorted((d["start"], d["end"]) for d in docs if d["partition"] == p)
        for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
            assert b0 >= a1, f"{topic}/{p}: manifests [{a0},{a1}) and [{b0},{b1}) overlap"
        low = marks[p][0]
        if committed[p] is not None:
            pos = low
            for s0, s1 in spans:
                if s0 <= pos < s1:
                    pos = s1
            assert pos >= committed[p], (
                f"{topic}/{p}: offsets [{pos}, {committed[p]}) are committed but in no manifest"
            )
    for d in docs:
        total = 0
        for o in d["objects"]:
            data = store.get(o["name"])
            assert data is not None, f"{o['name']} is listed in a manifest but missing"
            assert len(data) == o["bytes"] and hashlib.md5(data).hexdigest() == o["md5"], o["name"]
            n = len(decode_object(data, d["format"]))
            assert n == o["records"], f"{o['name']}: {n} rows, manifest says {o['records']}"
            total += n
        assert total == d["records"]
    return committed


def delete_records(kafka, topic: str, partition: int, before: int) -> None:
    """What retention does: move the log start offset to `before`."""
    tp = TopicPartition(topic, partition, before)
    admin = kafka.admin()  # must outlive the future
    admin.delete_records([tp])[tp].result(30)


def requested_ranges(result) -> list:
    """The ranges a lag sensor tick requested, each with the run key of the run that carries it."""
    from matos_dagster.core.offsets.ranges import parse_key
    from matos_dagster.turns import BATCH_OP

    return [(parse_key(key), r.run_key) for r in result.run_requests or []
            for key in r.run_config["ops"][BATCH_OP]["config"]["ranges"]]


def user_env(folder, kafka_server, swift_server, topics_yaml: str, container: str, **settings: str) -> dict:
    """The environment of a `dagster` CLI user whose MATOS_ settings point at the test stack.

    Writes `topics.yaml` and a DAGSTER_HOME (with the project's dagster.yaml) into `folder`.
    """
    (folder / "topics.yaml").write_text(topics_yaml)
    home = new_instance(folder / "dagster_home")
    return {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "MATOS_TOPICS_FILE": str(folder / "topics.yaml"),
        "MATOS_KAFKA_BOOTSTRAP_SERVERS": kafka_server.bootstrap_servers,
        "MATOS_SWIFT_AUTH_URL": swift_server.auth_url,
        "MATOS_SWIFT_CONTAINER": container,
        "MATOS_SPARK_MASTER": "local[2]",
        **settings,
    }


def new_instance(home, template=None, env=None):
    """A Dagster instance folder made as the project's commands make one: the dagster.yaml
    (the project's, or `template`), its storage created once under the instance lock, so the
    processes a test starts at once never create it side by side (Dagster issue 27390)."""
    from matos_dagster import instance
    home.mkdir(parents=True, exist_ok=True)
    if template is not None:
        (home / "dagster.yaml").write_text(template.read_text())
    return instance.prepare(home, say=lambda line: None, env=env)


_KILLED_RUN = """
import json, os, sys
from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.resources import KafkaResource, SparkResource, SwiftResource
from matos_dagster.core.topics import TopicConfig

a = json.loads(sys.argv[1])
kafka = KafkaResource(bootstrap_servers=a["bootstrap"], timeout_s=10)
swift = SwiftResource(auth_url=a["auth_url"], user=a["user"], key=os.environ["MATOS_SWIFT_KEY"],
                      container=a["container"], prefix="kafka", retries=2)
spark = SparkResource(master=a["spark"]).spark_session
with swift.store() as store:
    archive_range(OffsetRange(**a["range"]), TopicConfig(**a["topic"]), kafka, store, spark)
print("not killed")
"""


def killed_run(r, cfg, kafka_server, swift, connect_server, point: str) -> None:
    """Archive `r` in a process of its own that MATOS_FAULT=<point> SIGKILLs there (range_run.py's
    fault points), as an OOM kill or a lost machine would; fails unless it was killed there.

    A client of the session's Spark Connect server, as `make run`'s runs are: it starts no JVM of
    its own, so nothing of it outlives the kill (tests/end_to_end/test_faults.py kills classic drivers). The
    Iceberg settings, if any, come from this process's environment."""
    args = {"bootstrap": kafka_server.bootstrap_servers, "auth_url": swift.auth_url, "user": swift.user,
            "container": swift.container, "spark": connect_server.url, "range": dict(vars(r)),
            "topic": {"name": cfg.name, "group": cfg.group, "slice_records": cfg.slice_records}}
    killed_script(_KILLED_RUN, args, swift, point, 300)


def killed_script(script: str, args: dict, swift, point: str, wait_s: float = 120) -> None:
    """Run `script` (given `args` as JSON, the Swift key in MATOS_SWIFT_KEY) in a process of its own that
    MATOS_FAULT=<point> SIGKILLs there (core/faults.py); fails unless it was killed there."""
    from matos_dagster.core.settings import PROJECT_ROOT

    env = {**os.environ, "MATOS_SWIFT_KEY": swift.key, "MATOS_FAULT": point}
    with tempfile.TemporaryFile("w+") as out:  # a file, not a pipe: nobody reads it while the run goes on
        proc = subprocess.Popen([sys.executable, "-c", script, json.dumps(args)], env=env, cwd=PROJECT_ROOT,
                                stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            code = proc.wait(wait_s)
        finally:
            if proc.poll() is None:  # over time: ours, by its PID
                proc.kill()
                proc.wait(30)
        out.seek(0)
        assert code == -signal.SIGKILL, f"not killed at {point}: exit {code}\n{out.read()[-3000:]}"


# Commands as a user runs them, from a folder of theirs.
DAGSTER = str(Path(sys.executable).parent / "dagster")


def run(env, cwd, *args, ok=True) -> subprocess.CompletedProcess:
    p = subprocess.run(list(args), env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    if ok:
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p


def dagster(env, cwd, *args, ok=True) -> subprocess.CompletedProcess:
    return run(env, cwd, DAGSTER, *args, ok=ok)
