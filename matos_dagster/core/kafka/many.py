"""Questions about many partitions at once: what a tick of an estate of topics asks Kafka.

`KafkaClient`'s own calls ask about one topic; a tick that watches hundreds of topics asks the
same things of every partition of them, so here each question is one request for all of them:
the topics and their partitions (one metadata request), log start and end offsets (one
ListOffsets per side, which librdkafka sends to each leader), a group's committed offsets (one
OffsetFetch per group) and the timestamps of the first records waiting (one consumer, assigned
to every partition asked). 1,000 partitions cost a few requests, not a few thousand.
No Dagster imports.
"""

from __future__ import annotations

import time
from typing import Iterable

from confluent_kafka import OFFSET_INVALID, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from matos_dagster.core.kafka.client import KafkaClient, _Admin
from matos_dagster.core.kafka.errors import _STARTING, KafkaUnavailable, unavailable

TP = tuple[str, int]


def is_internal(topic: str) -> bool:
    """Kafka's own topics (`__consumer_offsets`, `__transaction_state`) and the Schema Registry's
    `_schemas`: never archived by a pattern, whatever it matches."""
    return topic.startswith("__") or topic == "_schemas"


def topics(kafka: KafkaClient) -> dict[str, list[int]]:
    """Every topic of the cluster but its internal ones, with its partition ids: one metadata request.

    A topic whose metadata carries an error (being created or deleted this very moment) is left
    out: the next tick sees it settled.
    """
    md = kafka._metadata(None)
    out = {}
    for name, t in md.topics.items():
        if is_internal(name) or t.error is not None or not t.partitions:
            continue
        out[name] = sorted(t.partitions)
    return out


def watermarks(kafka: KafkaClient, tps: Iterable[TP]) -> dict[TP, tuple[int, int]]:
    """(log start offset, log end offset) of each partition: two ListOffsets requests for all.

    The log end is the high watermark (read uncommitted), as `KafkaClient.watermarks` gives it.
    A partition whose leader is being elected is asked again until the client's timeout.
    """
    tps = sorted(set(tps))
    if not tps:
        return {}
    low = _list_offsets(kafka, tps, OffsetSpec.earliest())
    high = _list_offsets(kafka, tps, OffsetSpec.latest())
    return {tp: (low[tp], high[tp]) for tp in tps}


def _list_offsets(kafka: KafkaClient, tps: list[TP], spec: OffsetSpec) -> dict[TP, int]:
    deadline = time.monotonic() + kafka.timeout_s
    out: dict[TP, int] = {}
    left = list(tps)
    with kafka._client(("admin",), lambda: _Admin(kafka.client_config())) as admin:
        while left:
            timeout = max(1.0, deadline - time.monotonic())
            futures = admin.client.list_offsets(
                {TopicPartition(t, p): spec for t, p in left},
                isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=timeout)
            retry = []
            for tp, future in futures.items():
                try:
                    out[(tp.topic, tp.partition)] = future.result().offset
                except KafkaException as e:
                    code = e.args[0].code() if e.args and isinstance(e.args[0], KafkaError) else None
                    if code not in _STARTING or time.monotonic() >= deadline:
                        raise unavailable(kafka, e, admin.errors) from None
                    retry.append((tp.topic, tp.partition))
            left = retry
            if left:
                time.sleep(0.2)
    return out


def committed(kafka: KafkaClient, group: str, tps: Iterable[TP]) -> dict[TP, int | None]:
    """The group's committed offset of each partition (None where it never committed): one
    OffsetFetch for all of them."""
    tps = sorted(set(tps))
    if not tps:
        return {}
    with kafka._group_consumer(group) as consumer:
        answer = kafka._coordinated(
            lambda left: consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=left))
    out: dict[TP, int | None] = {}
    for tp in answer:
        if tp.error is not None:
            raise KafkaUnavailable(f"Kafka could not read committed offsets of {tp.topic}/{tp.partition} "
                                   f"(group {group}): {tp.error}")
        out[(tp.topic, tp.partition)] = None if tp.offset == OFFSET_INVALID or tp.offset < 0 else tp.offset
    return out


def first_timestamps(kafka: KafkaClient, starts: dict[TP, int], wait_s: float | None = None) -> dict[TP, int | None]:
    """The timestamp (ms) of the first readable record at or after each partition's offset: one
    consumer assigned to all of them, read until each gave a record or its end. None where no
    record came within `wait_s` (the client's timeout) or the record has no timestamp."""
    out: dict[TP, int | None] = {tp: None for tp in starts}
    if not starts:
        return out
    consumer = kafka.consumer(**{"enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(t, p, o) for (t, p), o in starts.items()])
        waiting = set(starts)
        deadline = time.monotonic() + (kafka.timeout_s if wait_s is None else wait_s)
        while waiting and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=len(waiting), timeout=min(1.0, max(0.05, deadline - time.monotonic()))):
                tp = (m.topic(), m.partition())
                if tp not in waiting:
                    continue
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        waiting.discard(tp)
                    continue
                ts_type, ts = m.timestamp()
                out[tp] = ts if ts_type else None
                waiting.discard(tp)
        return out
    finally:
        consumer.close()


def commit(kafka: KafkaClient, group: str, offsets: dict[TP, int]) -> None:
    """Commit `offsets` for the group, every partition of every topic in one request. Callers
    decide that they only move forward (commit.advance_many)."""
    if not offsets:
        return
    with kafka._group_consumer(group) as consumer:
        result = kafka._coordinated(lambda _: consumer.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())], asynchronous=False))
    for tp in result or []:
        if tp.error is not None:
            raise KafkaUnavailable(f"Kafka refused the commit of {tp.topic}/{tp.partition} (group {group}): {tp.error}")


# Kafka's topic id of a broker that has none (before 2.8, or a topic created without one): no id.
_ZERO_ID = "AAAAAAAAAAAAAAAAAAAAAA"


def topic_ids(kafka: KafkaClient, names: Iterable[str]) -> dict[str, str | None]:
    """Kafka's topic id (KIP-516) of each topic: which incarnation of the name exists now. A topic
    deleted and created again under the same name has a new id. One DescribeTopics request for all.

    None where the broker gives no id (the zero UUID) or the topic does not exist (any more): the
    caller cannot tell incarnations apart there and must not guess.
    """
    from confluent_kafka import TopicCollection

    names = sorted(set(names))
    if not names:
        return {}
    out: dict[str, str | None] = {n: None for n in names}
    with kafka._client(("admin",), lambda: _Admin(kafka.client_config())) as admin:
        futures = admin.client.describe_topics(TopicCollection(names), request_timeout=kafka.timeout_s)
        for name, future in futures.items():
            try:
                description = future.result()
            except KafkaException as e:
                code = e.args[0].code() if e.args and isinstance(e.args[0], KafkaError) else None
                if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue  # gone: no incarnation now
                raise unavailable(kafka, e, admin.errors) from None
            tid = str(description.topic_id) if description.topic_id is not None else None
            out[name] = None if tid in (None, "", _ZERO_ID) else tid
    return out
