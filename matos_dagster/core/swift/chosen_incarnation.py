"""The readers' side of a topic's incarnations: the one a user names, and whether Kafka still has its log.

`incarnations.py` records the logs that carried a topic's name; every reader (verify, restore,
read_table, the monitor, the days, compaction) works on one of them at a time, under its own
prefix (`choose`). Only one of them can be Kafka's log now (`kafka_holds`): an earlier one's
records are gone from Kafka, so its offsets are never compared with Kafka's, and never judged
as gaps or loss against the new log's offsets. When the archive cannot tell (an archive written
before incarnations were recorded, or a broker that gives no topic id) the newest incarnation is
taken to be Kafka's, as before incarnations existed. No Dagster imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from matos_dagster.core.swift import incarnations
from matos_dagster.core.swift.incarnations import Incarnation
from matos_dagster.core.swift.store import Store

IncarnationError = incarnations.IncarnationError


@dataclass(frozen=True)
class Chosen:
    """One incarnation of a topic, its archive's prefix, and every incarnation recorded (oldest first)."""

    incarnation: Incarnation
    prefix: str  # what readers take as `prefix`: everything in front of `topic=<topic>/`
    all: tuple[Incarnation, ...]

    @property
    def newest(self) -> bool:
        return self.incarnation.number == self.all[-1].number


def choose(store: Store, prefix: str, topic: str, name: str | int | None = None) -> Chosen:
    """The incarnation `name` names (its number or its topic id; None or "": the newest), under the
    topic's `prefix` (MATOS_SWIFT_PREFIX joined with the topic's own). Raises IncarnationError (one
    line, naming the incarnations the archive has) for a name it does not have."""
    found = incarnations.read(store, prefix, topic)
    chosen = incarnations.named(found, name)
    return Chosen(chosen, chosen.prefix(prefix), tuple(found))


def kafka_holds(chosen: Chosen, kafka_id: str | None) -> bool:
    """Whether Kafka's topic (of topic id `kafka_id`, None: unknown or missing) is this incarnation's log.

    Its own id says so; without ids on either side only the newest can be (the archive's own order)."""
    mine = chosen.incarnation.topic_id
    if mine is not None and kafka_id is not None:
        return mine == kafka_id
    return chosen.newest


def of_kafka(found: list[Incarnation] | tuple[Incarnation, ...], kafka_id: str | None) -> Incarnation:
    """The incarnation whose log Kafka holds now: the one of its id; the newest when either side has
    no id; a number after the newest when Kafka's id is not recorded yet (a new log whose first
    range the lag sensor has not archived: nothing of it is archived)."""
    for i in found:
        if kafka_id is not None and i.topic_id == kafka_id:
            return i
    newest = found[-1]
    if kafka_id is None or newest.topic_id is None:
        return newest
    return Incarnation(newest.number + 1, kafka_id)


def line(topic: str, chosen: Chosen, kafka_id: str | None) -> str | None:
    """The one line a reader says about incarnations, or None when the topic has one log only."""
    now = of_kafka(chosen.all, kafka_id)
    mine = chosen.incarnation
    if kafka_holds(chosen, kafka_id):
        if mine.number == 1:
            return None
        which = ("the earlier one with --incarnation 1" if mine.number == 2
                 else f"an earlier one with --incarnation N (1 to {mine.number - 1})")
        return (f"Kafka's topic {topic} is a new log (topic id {kafka_id or 'unknown'}) since incarnation "
                f"{mine.number - 1}: archived as incarnation {mine.number}; verify {which}")
    if now.number > chosen.all[-1].number:
        where = (f"a new log (topic id {kafka_id}) that the archive has not met yet: the lag sensor archives it "
                 f"as incarnation {now.number}")
    else:
        where = f"incarnation {now.number}'s log (topic id {kafka_id})"
    return (f"Kafka no longer has the log of {topic}'s {mine}: Kafka's topic {topic} is {where}; "
            f"incarnation {mine.number} is checked against its own manifests and contiguity, not against Kafka")


def beyond_end_hint(topic: str, chosen: Chosen, kafka_id: str | None) -> str:
    """What an archived range ending past Kafka's log end says about the incarnation compared with Kafka."""
    mine = chosen.incarnation
    if mine.topic_id is not None and kafka_id == mine.topic_id:
        return (f"Kafka's topic {topic} is this incarnation's log (topic id {kafka_id}), yet shorter than its "
                "archive: the broker lost records it had acknowledged (an unclean leader election?)")
    return (f"Kafka's topic {topic} (topic id {kafka_id or 'unknown'}) may be a new log that the archive has not "
            f"recorded since {mine}: once the lag sensor has archived it as incarnation {mine.number + 1}, verify "
            f"this one with --incarnation {mine.number}")


def kafkas(store: Callable[[], Store], prefix: str, topic: str, kafka_id: str | None,
           known: Mapping[str, Any] | None = None) -> tuple[Incarnation, str]:
    """The incarnation whose log Kafka holds now (`of_kafka`) and its prefix: what the monitor and the
    days judge against Kafka's offsets. `known`: what an earlier look handed on (`handed_on`): while
    Kafka's topic id is still that one, Swift is not asked (`store` opens it on first use)."""
    # Without an id from Kafka nothing can tell a new log apart (no new incarnation is ever recorded
    # then): the one handed on holds as well.
    if known and "topic_id" in known and known["topic_id"] == kafka_id and isinstance(known.get("number"), int):
        found = Incarnation(known["number"], kafka_id)
    else:
        found = of_kafka(incarnations.read(store(), prefix, topic), kafka_id)
    return found, found.prefix(prefix)


def handed_on(found: Incarnation, kafka_id: str | None) -> dict:
    """What `kafkas` takes back as `known` next time."""
    return {"number": found.number, "topic_id": kafka_id}
