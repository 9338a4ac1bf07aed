"""Which log of a topic's name a run of one range archives into (core/swift/incarnations.py).

The lag sensor's batch runs learn it in their `incarnation` step (core/archive/batch.py); a run
of one range (the UI, `matos archive`, acknowledging a loss) asks here. No Dagster imports.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from matos_dagster.core.archive.commit import restart
from matos_dagster.core.kafka import many
from matos_dagster.core.kafka.client import KafkaClient
from matos_dagster.core.swift import incarnations, layout
from matos_dagster.core.swift.incarnations import Incarnation
from matos_dagster.core.swift.store import Store
from matos_dagster.core.topics import TopicConfig

log = logging.getLogger(__name__)


def current_incarnation(kafka: KafkaClient, store: Store, topic: TopicConfig,
                        warn: Callable[[str], None] = log.warning, first_sight: bool = True) -> Incarnation:
    """The log a run of one range archives into: Kafka's topic id now, looked up in the topic's record
    (core/swift/incarnations.py). A log the record lacks is recorded, said in one line, and the group's
    committed offsets of the earlier log are set back to the new log's start (commit.restart).

    `first_sight` False: a topic with no record yet is not recorded here (its log is incarnation 1 all
    the same) but by `record_first_sight` once the run archived something, so that a run refused for
    its input writes nothing."""
    tid = many.topic_ids(kafka, [topic.name])[topic.name]
    prefix = layout.join(store.params.prefix, topic.prefix)
    if not first_sight and tid is not None and store.get_json(incarnations.record_name(prefix, topic.name)) is None:
        return incarnations.Incarnation(1, tid, int(time.time() * 1000))
    inc, line = incarnations.observe(store, prefix, topic.name, tid, int(time.time() * 1000))
    if line is not None:
        warn(line)
        tps = [(topic.name, p) for p in many.topics(kafka).get(topic.name, [])]
        marks = many.watermarks(kafka, tps)
        restart(kafka, topic.group, many.committed(kafka, topic.group, tps), {tp: marks[tp][0] for tp in tps})
    return inc


def record_first_sight(store: Store, topic: TopicConfig, inc: Incarnation) -> None:
    """Record the topic's log as its first incarnation, if nothing is recorded yet (`current_incarnation`
    with `first_sight` False left it to the run's end)."""
    if inc.topic_id is not None:
        incarnations.observe(store, layout.join(store.params.prefix, topic.prefix), topic.name, inc.topic_id,
                             inc.first_seen_ms)
