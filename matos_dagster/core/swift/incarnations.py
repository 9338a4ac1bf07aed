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
    return _parse(store.get_json(record_name(prefix, topic))) or [FIRST]


def _parse(doc: dict | None) -> list[Incarnation]:
    if not doc or not doc.get("incarnations"):
        return []
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


def observe(store: Store, prefix: str, topic: str, topic_id: str | None, now_ms: int,
            earlier: bool = False) -> tuple[Incarnation, str | None]:
    """The incarnation the log of id `topic_id` is, recorded if new; and a line to say when it is new.

    - `topic_id` None (a broker that gives no id): the newest recorded, nothing recorded. Without
      an id the two logs cannot be told apart; callers refuse what would mix them.
    - an id the record holds: that incarnation (the usual case: one GET, no PUT).
    - no record yet: the archive there (if any) is adopted as incarnation 1 of this id, unless
      `earlier` says it belongs to an earlier log (the caller saw another id, or the topic
      missing): then this log is incarnation 2, and the archive there incarnation 1 of no id.
    - a record without this id: the topic was deleted and created again: the next number.

    Two callers recording the same new id at once write the same numbers (one id exists at a
    time), so the last PUT wins harmlessly.
    """
    if topic_id is None:
        return current(store, prefix, topic), None
    known = _parse(store.get_json(record_name(prefix, topic)))
    for i in known:
        if i.topic_id == topic_id:
            return i, None
    if not known and not earlier:
        adopted = Incarnation(1, topic_id, now_ms)
        write(store, prefix, topic, [adopted])
        return adopted, None
    before = known or [FIRST]
    new = Incarnation(before[-1].number + 1, topic_id, now_ms)
    write(store, prefix, topic, [*before, new])
    return new, said(topic, before[-1], new, prefix)


def said(topic: str, before: Incarnation, new: Incarnation, prefix: str) -> str:
    """The one line that says a topic was created again."""
    return (f"topic {topic!r} was deleted and created again (topic id {before.topic_id or 'unknown'} -> "
            f"{new.topic_id}): its new log is archived from its own offset 0 as {new} under "
            f"{layout.join(new.prefix(prefix), f'topic={topic}')}/, apart from {before}'s archive, which stays as it is")


def looked_up(store: Store, prefix: str, topic: str, topic_id: str | None) -> Incarnation:
    """`observe` without writing, for readers of the current log's archive (pending ranges, key pruning):
    the incarnation of `topic_id` if recorded; else the one a run would record for it (the first, if
    none is recorded; else the next, whose archive is empty yet)."""
    known = _parse(store.get_json(record_name(prefix, topic)))
    if topic_id is None:
        return known[-1] if known else FIRST
    for i in known:
        if i.topic_id == topic_id:
            return i
    return Incarnation(known[-1].number + 1, topic_id) if known else Incarnation(1, topic_id)
