"""The target topic: what the selected records need of it, its checks, and its creation.

Before anything is produced, the target's settings are checked against what the selected
records need, from the manifests alone (`demands`, `target_problems`): timestamp windows,
`max.message.bytes`, and time retention (which goes by the records' old timestamps).
A target the restore creates gets the source's settings that decide those, CreateTime and no
time retention; if even those would refuse, nothing is created. Anything refused is named with
the setting to change (RestoreRefused).

Kafka accepts committed offsets only for topic-partitions that exist, and the progress marker
is committed on the SOURCE topic-partitions (see task.py), so the source topic must exist with
the partitions restored (it may be empty, or be the target itself): checked here too.
No Dagster imports.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from typing import Iterable

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from matos_dagster.core.kafka.leaders import leaderless
from matos_dagster.core.kafka.log import LIBRDKAFKA_LOG
from matos_dagster.core.restore.plan import Request, RestoreFailed, RestoreRefused, Unit

# A record's framing in a batch of one: the batch header (61 bytes) and the record's varints.
# Many headers add a few bytes each beyond this: Kafka then refuses the object, which stops
# the restore with RestoreFailed naming max.message.bytes.
RECORD_FRAMING = 128
NO_LIMIT = 2**63 - 1  # Java's Long.MAX_VALUE, Kafka's "no limit" for the timestamp windows
# Topic settings copied from the source to a target the restore creates, because they decide
# whether the target takes the records as they were: the timestamp windows (records keep
# their archived timestamps, which may be far in the past or future), the largest batch, and
# whether the topic is compacted. `difference.max.ms` exists on brokers before Kafka 4.
COPIED_SETTINGS = (
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
    "message.timestamp.difference.max.ms",
    "max.message.bytes",
    "cleanup.policy",
)
# Set on a created target whatever the source has: CreateTime, else the broker would stamp
# each record with the time of the restore; and no time retention, because Kafka's retention
# goes by the records' timestamps, so with the source's (or the broker's) retention.ms every
# restored record older than it would be deleted at the next retention check.
CREATED_SETTINGS = {"message.timestamp.type": "CreateTime", "retention.ms": "-1"}
# What a topic without its own value gets: the broker's setting of this name.
BROKER_SETTINGS = {
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "message.timestamp.difference.max.ms": "log.message.timestamp.difference.max.ms",
    "max.message.bytes": "message.max.bytes",
    "cleanup.policy": "log.cleanup.policy",
}


@dataclass(frozen=True)
class Demands:
    """What the selected records ask of a target topic, from their manifests (no object read)."""

    min_timestamp: int | None = None  # of the records that have one; the others get the restore's time
    max_timestamp: int | None = None
    largest_record_bytes: int | None = None  # key, value, header keys and values of the largest record
    unsized_objects: int = 0  # objects of manifests written before largest_record_bytes


def demands(units: Iterable[Unit]) -> Demands:
    lo: list[int] = []
    hi: list[int] = []
    largest = []
    unsized = 0
    for u in units:
        since, until = u.window.since_ms, u.window.until_ms
        for o in u.objects:
            if o["min_timestamp"] is not None:
                lo.append(o["min_timestamp"] if since is None else max(o["min_timestamp"], since))
                hi.append(o["max_timestamp"] if until is None else min(o["max_timestamp"], until - 1))
            if o.get("largest_record_bytes") is None:
                unsized += 1
            else:
                largest.append(o["largest_record_bytes"])
    return Demands(min(lo, default=None), max(hi, default=None), max(largest, default=None), unsized)


def target_problems(topic: str, config: dict[str, str | None], needs: Demands, now_ms: int) -> list[str]:
    """Why `topic` with these settings would refuse (or soon delete) the records; empty if it takes them.

    Pure: `config` is the topic's effective settings, `now_ms` the broker's clock as the driver
    sees it. Each reason names the setting and a value that would do.
    """
    out = []
    create_time = (config.get("message.timestamp.type") or "CreateTime") == "CreateTime"
    lo, hi = needs.min_timestamp, needs.max_timestamp
    if create_time and lo is not None:
        before = _int(config.get("message.timestamp.before.max.ms"))
        after = _int(config.get("message.timestamp.after.max.ms"))
        diff = _int(config.get("message.timestamp.difference.max.ms"))
        if before is not None and now_ms - lo > before:
            out.append(
                f"message.timestamp.before.max.ms is {before}, and the oldest record to restore is stamped "
                f"{_iso(lo)}: set it to more than {now_ms - lo} (or {NO_LIMIT}: no limit)")
        if after is not None and hi - now_ms > after:
            out.append(
                f"message.timestamp.after.max.ms is {after}, and the newest record to restore is stamped "
                f"{_iso(hi)}: set it to more than {hi - now_ms} (or {NO_LIMIT}: no limit)")
        if diff is not None and max(now_ms - lo, hi - now_ms) > diff:
            out.append(
                f"message.timestamp.difference.max.ms is {diff}, and the records to restore are stamped from "
                f"{_iso(lo)} to {_iso(hi)}: set it to more than {max(now_ms - lo, hi - now_ms)} (or {NO_LIMIT})")
    largest = needs.largest_record_bytes
    limit = _int(config.get("max.message.bytes"))
    if largest is not None and limit is not None and largest + RECORD_FRAMING > limit:
        out.append(
            f"max.message.bytes is {limit}, and the largest record to restore has {largest} bytes (plus "
            f"{RECORD_FRAMING} of framing): set it to at least {largest + RECORD_FRAMING}")
    retention = _int(config.get("retention.ms"))
    deletes = "delete" in (config.get("cleanup.policy") or "delete")
    if deletes and retention is not None and retention >= 0 and lo is not None and now_ms - lo > retention:
        out.append(
            f"retention.ms is {retention}, and Kafka's retention goes by the records' timestamps: the restored "
            f"records stamped before {_iso(now_ms - retention)} (the oldest is {_iso(lo)}) would be deleted at "
            f"its next retention check: set it to more than {now_ms - lo} (or -1) for the time you need them")
    return out


def _prepare_target(
    req: Request, conf: dict, timeout_s: float, sources: list[int], needs: Demands, say
) -> tuple[int | None, dict[str, str], list[str]]:
    """Make sure the target takes the records as they were and the marker can be committed,
    creating the target if it does not exist. Checks everything before changing anything.

    Returns (partitions of a target created or to be, in a dry run; its settings; notes).
    """
    admin = AdminClient({**conf, "logger": LIBRDKAFKA_LOG})
    need = max(sources) + 1
    target = req.target_topic
    target_parts = _partitions(admin, target, timeout_s)
    if target_parts is not None and req.keep_partition and need > len(target_parts):
        raise RestoreRefused(
            f"target topic {target} has {len(target_parts)} partition(s); keeping source partitions "
            f"needs at least {need}. Add partitions to it, or set keep_partition: false to partition by key."
        )
    if req.topic == target:
        source_parts = list(range(need)) if target_parts is None else target_parts  # None: would be created
    else:
        source_parts = _partitions(admin, req.topic, timeout_s) or []
    missing = [p for p in sources if p not in source_parts]
    if missing:
        raise RestoreRefused(
            f"the restore's progress marker is committed on the source topic-partitions ({req.topic} "
            f"partitions {missing}), and Kafka keeps committed offsets only for topic-partitions that exist. "
            f"Create topic {req.topic} with at least {need} partition(s) (it may stay empty), or restore into "
            f"{req.topic} itself."
        )
    now_ms = int(time.time() * 1000)
    notes: list[str] = []
    if needs.min_timestamp == 0:
        notes.append("some records are stamped 0 (1970-01-01T00:00:00.000): librdkafka, which the restore produces "
                     "with, reads timestamp 0 as 'now', so they get the time of the restore")
    if target_parts is not None:
        config = _topic_config(admin, target, timeout_s)
        problems = target_problems(target, config, needs, now_ms)
        if problems:
            raise RestoreRefused(
                f"target topic {target} would not keep the records as archived; nothing was produced. Change its "
                f"settings (kafka-configs --alter --entity-type topics --entity-name {target} --add-config ...), "
                f"or restore into a new topic, which the restore creates with the settings it needs:\n- "
                + "\n- ".join(problems))
        if config.get("message.timestamp.type") == "LogAppendTime":
            notes.append(f"target topic {target} has message.timestamp.type=LogAppendTime: Kafka stamps each "
                         "restored record with the time it is written, not its archived timestamp")
        if needs.unsized_objects:
            notes.append(f"{needs.unsized_objects} object(s) come from manifests without largest_record_bytes "
                         f"(written by an older version): Kafka checks their record sizes as they are produced")
        for n in notes:
            say(n)
        return None, {}, notes
    for n in notes:
        say(n)
    settings = dict(CREATED_SETTINGS)
    copied_from = "the broker's defaults"
    if req.topic != target:
        source_config = _topic_config(admin, req.topic, timeout_s)
        settings.update({k: v for k in COPIED_SETTINGS if (v := source_config.get(k)) is not None})
        copied_from = f"topic {req.topic}"
    effective = {**_broker_defaults(admin, timeout_s), **settings}
    problems = target_problems(target, effective, needs, now_ms)
    if problems:
        raise RestoreRefused(
            f"topic {target} does not exist, and created with the settings of {copied_from} it would not keep the "
            f"records as archived; nothing was created or produced. Create {target} yourself with at least {need} "
            f"partition(s) and these settings, then run the restore again:\n- " + "\n- ".join(problems))
    shown = ", ".join(f"{k}={v}" for k, v in sorted(settings.items()))
    if req.dry_run:
        say(f"dry run: would create topic {target} with {need} partition(s) and {shown}")
        return need, settings, notes
    fs = admin.create_topics([NewTopic(target, num_partitions=need, replication_factor=-1, config=settings)])
    try:
        fs[target].result(timeout_s)
    except KafkaException as e:
        if e.args[0].name() != "TOPIC_ALREADY_EXISTS":
            raise
    _wait_for_leaders(admin, target, need, timeout_s)
    say(f"created topic {target} with {need} partition(s) for the restore, with {shown} (settings from "
        f"{copied_from}; CreateTime so the archived timestamps are kept, retention.ms=-1 so Kafka does not "
        f"delete the restored records by their old timestamps: lower it when you are done)")
    return need, settings, notes


def _wait_for_leaders(admin: AdminClient, topic: str, partitions: int, timeout_s: float) -> None:
    """Return once every partition of a topic just created has a leader (see `leaderless`)."""
    deadline = time.monotonic() + timeout_s
    while leaderless(admin.list_topics(topic, timeout=timeout_s).topics.get(topic), partitions):
        if time.monotonic() >= deadline:
            raise RestoreFailed(f"topic {topic} was created but has no leader for every partition after "
                                f"{timeout_s:.0f}s: check the brokers' logs")
        time.sleep(0.2)


def _topic_config(admin: AdminClient, topic: str, timeout_s: float) -> dict[str, str | None]:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([res])[res].result(timeout_s)
    return {name: e.value for name, e in entries.items()}


def _broker_defaults(admin: AdminClient, timeout_s: float) -> dict[str, str | None]:
    """What a new topic gets from the broker for the settings that matter here."""
    md = admin.list_topics(timeout=timeout_s)
    broker = ConfigResource(ConfigResource.Type.BROKER, str(min(md.brokers)))
    entries = admin.describe_configs([broker])[broker].result(timeout_s)
    return {k: entries[b].value for k, b in BROKER_SETTINGS.items() if b in entries}


def _int(v: str | None) -> int | None:
    try:
        return None if v is None else int(v)
    except ValueError:
        return None


def _iso(ms: int) -> str:
    try:
        return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).isoformat(timespec="milliseconds")
    except (OverflowError, ValueError, OSError):
        return f"{ms} ms"


def _partitions(admin: AdminClient, topic: str, timeout_s: float) -> list[int] | None:
    """The topic's partitions, None if it does not exist."""
    md = admin.list_topics(topic=topic, timeout=timeout_s)
    t = md.topics.get(topic)
    if t is None or t.error is not None or not t.partitions:
        return None
    return sorted(t.partitions)
