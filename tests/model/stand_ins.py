"""Kafka and Swift in memory, for the model-based test of the archive path (test_archive_model.py).

Faked at the level the archive code talks to: Swift below `Store` (swiftclient's Connection: put,
get, head, list with prefix/delimiter/markers, delete), so every Store the code makes, the batch's
threads' included, is the real class over this one container; Kafka at `KafkaClient`'s calls and
core/kafka/many.py's questions (topics, offsets, committed, commit, topic ids), which the policy and
the batch use. A Spark task is run in this process: it reads the in-memory log and writes its
object under the real layout name, its bytes saying which incarnation (topic id) its records are of.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import uuid
from dataclasses import dataclass, field

from swiftclient.exceptions import ClientException

from matos_dagster.core.swift import layout


class Killed(BaseException):
    """The run's process died here (core/faults.py's SIGKILL): nothing after it runs."""


@dataclass
class Log:
    low: int = 0
    high: int = 0


@dataclass
class Topic:
    topic_id: str
    logs: list[Log] = field(default_factory=list)


class World:
    """One Kafka cluster and one Swift container; `dead` while a killed run would still act."""

    def __init__(self):
        self.topics: dict[str, Topic] = {}
        self.committed: dict[tuple[str, str, int], int] = {}  # (group, topic, partition) -> offset
        self.objects: dict[str, bytes] = {}
        self.dead = False
        self.kill_at: str | None = None  # the fault point (core/faults.py) where the next run dies
        self.violations: list[str] = []  # objects of one incarnation overwritten or removed by another's run

    def alive(self) -> None:
        if self.dead:
            raise Killed()

    # -- Kafka, as operators change it
    def create(self, name: str, partitions: int) -> None:
        self.topics[name] = Topic(uuid.uuid4().hex[:22], [Log() for _ in range(partitions)])

    def delete(self, name: str) -> None:
        # Kafka drops a deleted topic's committed offsets with it.
        self.topics.pop(name, None)
        self.committed = {k: v for k, v in self.committed.items() if k[1] != name}

    # -- what a record's bytes hold: its incarnation, so that an object says whose records it has
    def incarnation_of(self, name: str) -> str | None:
        return self.incarnation_in(self.objects.get(name))

    def incarnation_in(self, data: bytes | None) -> str | None:
        """The topic id of the records an object holds (a manifest: its objects'); None for bookkeeping."""
        try:
            doc = json.loads(data) if data is not None else None
        except ValueError:  # not one of ours (a table's file, say): no records of an incarnation
            return None
        if not isinstance(doc, dict):
            return None
        if "tid" in doc:
            return doc["tid"]
        objects = doc.get("objects") if isinstance(doc.get("objects"), list) else []
        tids = {self.incarnation_of(o["name"]) for o in objects if isinstance(o, dict) and "name" in o} - {None}
        return tids.pop() if len(tids) == 1 else None

    def topic_of(self, name: str) -> str | None:
        for part in name.split("/"):
            if part.startswith("topic="):
                return part[len("topic="):]
        return None


# -- Swift ---------------------------------------------------------------------------------


def _missing(name: str) -> ClientException:
    return ClientException(f"{name} not found", http_status=404)


class FakeConnection:
    """swiftclient.Connection over `world.objects` (one container)."""

    url = "http://swift.invalid/v1/AUTH_model"
    token = "t"

    def __init__(self, world: World):
        self.world = world

    def get_auth(self):
        return self.url, self.token

    def close(self):
        pass

    def head_container(self, container):
        return {}

    def put_container(self, container):
        pass

    def put_object(self, container, name, contents, content_length=None, etag=None, content_type=None):
        self.world.alive()
        data = contents.read() if hasattr(contents, "read") else contents
        old, new = self.world.incarnation_of(name), self.world.incarnation_in(data)
        if old is not None and new is not None and old != new:
            self.world.violations.append(f"{name} of incarnation {old} overwritten by incarnation {new}'s")
        self.world.objects[name] = data
        return hashlib.md5(data).hexdigest()

    def get_object(self, container, name, headers=None):
        self.world.alive()
        if name not in self.world.objects:
            raise _missing(name)
        data = self.world.objects[name]
        return {"content-length": str(len(data)), "etag": hashlib.md5(data).hexdigest()}, data

    def head_object(self, container, name):
        self.world.alive()
        if name not in self.world.objects:
            raise _missing(name)
        data = self.world.objects[name]
        return {"content-length": str(len(data)), "etag": hashlib.md5(data).hexdigest()}

    def delete_object(self, container, name):
        self.world.alive()
        if name not in self.world.objects:
            raise _missing(name)
        tid, topic = self.world.incarnation_of(name), self.world.topic_of(name)
        now = self.world.topics.get(topic)
        if tid is not None and now is not None and now.topic_id != tid:
            self.world.violations.append(f"{name} of incarnation {tid} removed by a run of incarnation {now.topic_id}")
        del self.world.objects[name]

    def get_container(self, container, prefix=None, delimiter=None, marker=None, end_marker=None, limit=None,
                      query_string=None):
        self.world.alive()
        prefix = prefix or ""
        reverse = query_string == "reverse=on"
        names = sorted((n for n in self.world.objects if n.startswith(prefix)), reverse=reverse)
        items, seen = [], set()
        for n in names:
            if marker and (n >= marker if reverse else n <= marker):
                continue
            if end_marker and (n <= end_marker if reverse else n >= end_marker):
                continue
            if delimiter:
                cut = n.find(delimiter, len(prefix))
                if cut >= 0:
                    sub = n[:cut + 1]
                    if sub not in seen:
                        seen.add(sub)
                        items.append({"subdir": sub})
                    continue
            data = self.world.objects[n]
            items.append({"name": n, "bytes": len(data), "hash": hashlib.md5(data).hexdigest(),
                          "last_modified": "2026-12-02T00:00:00.000000"})
        if marker and delimiter:  # a subdir at or before the marker was listed by an earlier page
            items = [i for i in items if "name" in i or (i["subdir"] < marker if reverse else i["subdir"] > marker)]
        return {}, items[:limit or 10_000]


# -- Kafka ---------------------------------------------------------------------------------


class FakeKafka:
    """What the archive asks `KafkaClient` itself (the rest goes through many.py, patched below)."""

    timeout_s = 1.0

    def __init__(self, world: World):
        self.world = world

    def _log(self, topic: str, partition: int) -> Log:
        self.world.alive()
        t = self.world.topics.get(topic)
        if t is None or partition >= len(t.logs):
            raise RuntimeError(f"Kafka has no {topic}/{partition}")
        return t.logs[partition]

    def check_partition(self, topic, partition):
        self._log(topic, partition)

    def watermarks(self, topic, partitions):
        return {p: (self._log(topic, p).low, self._log(topic, p).high) for p in partitions}

    def committed(self, topic, partitions, group):
        self.world.alive()
        return {p: self.world.committed.get((group, topic, p)) for p in partitions}

    def commit(self, topic, offsets, group):
        self.world.alive()
        for p, o in offsets.items():
            self.world.committed[(group, topic, p)] = o

    def client_config(self):
        return {}

    def release_clients(self):
        pass

    @contextlib.contextmanager
    def kept_clients(self):
        yield


def install(monkeypatch, world: World) -> FakeKafka:
    """Route the archive's Kafka and Swift questions to `world`; the FakeKafka to pass as `kafka`."""
    from matos_dagster.core import faults
    from matos_dagster.core.archive import batch, stores, tasks
    from matos_dagster.core.kafka import many
    from matos_dagster.core.swift.store import SwiftParams

    monkeypatch.setattr(SwiftParams, "connect", lambda self: FakeConnection(world))

    def topics(kafka):
        world.alive()
        return {n: list(range(len(t.logs))) for n, t in world.topics.items()}

    def watermarks(kafka, tps):
        return {(t, p): (kafka._log(t, p).low, kafka._log(t, p).high) for t, p in set(tps)}

    def committed(kafka, group, tps):
        world.alive()
        return {(t, p): world.committed.get((group, t, p)) for t, p in tps}

    def commit(kafka, group, moves):
        world.alive()
        for (t, p), o in moves.items():
            world.committed[(group, t, p)] = o

    def topic_ids(kafka, names):
        world.alive()
        return {n: (world.topics[n].topic_id if n in world.topics else None) for n in set(names)}

    for name, fn in [("topics", topics), ("watermarks", watermarks), ("committed", committed),
                     ("commit", commit), ("topic_ids", topic_ids)]:
        monkeypatch.setattr(many, name, fn)

    def run_tasks(session, fn, tasks, description):  # Spark, in this process
        return [fn(t) for t in tasks]

    def archive_slice(job):
        """A slice's object, under its real name; its bytes name the incarnation read."""
        from matos_dagster.core.swift.store import Store

        s = job.slice
        log = FakeKafka(world)._log(s.topic, s.partition)
        if s.start < log.low or s.end > log.high:
            raise RuntimeError(f"offsets [{s.start}, {s.end}) of {s.topic}/{s.partition} are not in the log")
        tid = world.topics[s.topic].topic_id
        data = json.dumps({"tid": tid, "offsets": [s.start, s.end]}, sort_keys=True).encode()
        name = layout.object_name(job.directory, s.start, job.format)
        Store(job.swift).put(name, data)
        return [{"name": name, "records": s.end - s.start, "bytes": len(data), "md5": hashlib.md5(data).hexdigest(),
                 "first_offset": s.start, "last_offset": s.end - 1, "min_timestamp": None, "max_timestamp": None,
                 "record_bytes": s.end - s.start, "largest_record_bytes": 1}]

    monkeypatch.setattr(batch, "run_tasks", run_tasks)
    monkeypatch.setattr(tasks, "archive_slice", archive_slice)
    monkeypatch.setattr(tasks, "SLICE_TRIES", 1)  # a slice that fails fails at once (no sleep)
    monkeypatch.setattr(stores, "THREADS", 1)  # one order of Swift requests: a kill stops the rest

    def at(point: str) -> None:
        if point == world.kill_at:
            world.dead = True
            raise Killed()

    monkeypatch.setattr(faults, "at", at)
    return FakeKafka(world)
