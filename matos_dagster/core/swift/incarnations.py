"""A topic's incarnations: the logs that have carried one topic name, one after the other.

A topic deleted and created again under the same name is a new log: its offsets start at 0
again, and its records are not the earlier log's. Kafka tells the two apart by the topic id
(KIP-516), which the archive records here, per topic, in the order it met them:

    <prefix>/_incarnations/topic=<topic>.json
    {"topic": "orders", "incarnations": [
        {"number": 1, "topic_id": "b21cxU9dT0GDsiOk/BPnAA", "first_seen_ms": 1764640000000},
        {"number": 2, "topic_id": "KP4OXZckTgCidsZp99pVGg", "first_seen_ms": 1764650000000}]}

Each incarnation's archive is the topic's archive under a prefix of its own (`prefix_of`): the
first's is the topic's prefix itself, so an archive written before incarnations were recorded
is incarnation 1, unchanged; a later one's is `<prefix>/incarnation=<n>` (numbers, not ids:
an id holds `/`). Every module that works on `(prefix, topic)` works on an incarnation when
given its prefix, and one incarnation's objects can never be written or removed by another's.

No object yet (a topic archived before this record existed, or never archived) reads as
incarnation 1 of unknown id. No Dagster imports.
"""

from __future__ import annotations

from dataclasses import dataclass

from matos_dagster.core.swift import layout
from matos_dagster.core.swift.store import Store


class IncarnationError(ValueError):
    """An incarnation named that the archive does not have: one line, naming those it has."""


@dataclass(frozen=True)
class Incarnation:
    """One log that carried the topic's name."""

    number: int  # 1, 2, ... in the order the archive met them
    topic_id: str | None  # Kafka's topic id; None: archived before ids were recorded
    first_seen_ms: int = 0

    def prefix(self, prefix: str) -> str:
        """The prefix under which this incarnation's `topic=<name>/` folder lives."""
        return prefix_of(prefix, self.number)

    def to_json(self) -> dict:
        return {"number": self.number, "topic_id": self.topic_id, "first_seen_ms": self.first_seen_ms}

    def __str__(self) -> str:
        return f"incarnation {self.number}" + (f" (topic id {self.topic_id})" if self.topic_id else "")


FIRST = Incarnation(1, None, 0)


def prefix_of(prefix: str, number: int) -> str:
    return prefix if number == 1 else layout.join(prefix, f"incarnation={number}")


def record_name(prefix: str, topic: str) -> str:
    # Outside every topic folder, so no listing of a topic's ranges ever meets it.
    return layout.join(prefix, "_incarnations", f"topic={topic}.json")


def read(store: Store, prefix: str, topic: str) -> list[Incarnation]:
    """The incarnations recorded, oldest first; `[FIRST]` when none is."""
    doc = store.get_json(record_name(prefix, topic))
    if not doc or not doc.get("incarnations"):
        return [FIRST]
    return [Incarnation(int(i["number"]), i.get("topic_id"), int(i.get("first_seen_ms") or 0))
            for i in sorted(doc["incarnations"], key=lambda i: i["number"])]


def current(store: Store, prefix: str, topic: str) -> Incarnation:
    """The newest incarnation the archive knows of (FIRST when none is recorded)."""
    return read(store, prefix, topic)[-1]


def named(incarnations: list[Incarnation], name: str | int | None) -> Incarnation:
    """The incarnation `name` names: its number or its topic id; None: the newest."""
    if name is None or name == "":
        return incarnations[-1]
    for i in incarnations:
        if str(i.number) == str(name) or (i.topic_id is not None and i.topic_id == str(name)):
            return i
    have = ", ".join(str(i) for i in incarnations)
    raise IncarnationError(f"the archive has no incarnation {name!r} of this topic: it has {have}")


def write(store: Store, prefix: str, topic: str, incarnations: list[Incarnation]) -> None:
    store.put_json(record_name(prefix, topic), {"topic": topic, "incarnations": [i.to_json() for i in incarnations]})
