"""The exporter's questions to Kafka: every partition's offsets, and the age of its oldest record waiting.

A refresh asks what the monitor asks (verdict.kafka_offsets: one metadata request, one ListOffsets
per side, one OffsetFetch per group, whatever the number of partitions) and, only for a partition
whose committed offset moved since it was last read, the timestamp of the first record waiting
there (many.first_timestamps: one consumer for all of them). Between two moves the lag in seconds
is now minus that remembered timestamp, so a stalled archive's lag grows at every scrape without a
record being read again. No Dagster imports.
"""

from __future__ import annotations

import time

from matos_dagster.core.kafka import many
from matos_dagster.core.kafka.client import KafkaClient
from matos_dagster.core.metrics.samples import Samples
from matos_dagster.core.monitor import verdict
from matos_dagster.core.topic_set import TopicSet
from matos_dagster.core.topics import TopicConfig

TP = tuple[str, int]
TIMESTAMP_WAIT_S = 2.0  # at most this long for the first records waiting, within the scrape's timeout


class KafkaSide:
    def __init__(self, topics: TopicSet, kafka: KafkaClient, archive: str = ""):
        self.topics, self.kafka, self.archive = topics, kafka, archive
        self.first: dict[TP, tuple[int, int]] = {}  # partition -> (offset, timestamp ms of its record)
        self.watched: list[TopicConfig] = []  # the topics the last refresh resolved
        self.partitions: list[TP] = []  # and their partitions in Kafka

    def read(self, now: float | None = None) -> Samples:
        with self.kafka.kept_clients():
            listing = many.topics(self.kafka)
            resolved = self.topics.resolve(listing)
            offsets = verdict.kafka_offsets(self.kafka, resolved.topics, listing)
            wanted = {(t, p): o.position for t, parts in offsets.items() for p, o in parts.items()
                      if o.high > o.position and self.first.get((t, p), (None,))[0] != o.position}
            if wanted:
                for tp, ts in many.first_timestamps(self.kafka, wanted, wait_s=TIMESTAMP_WAIT_S).items():
                    if ts is not None:  # none in time, or a record without a timestamp: asked again next time
                        self.first[tp] = (wanted[tp], ts)
        self.watched = resolved.topics
        self.partitions = [(t, p) for t, parts in offsets.items() for p in parts]
        now = time.time() if now is None else now
        out = Samples()
        a = self.archive
        for t in resolved.topics:
            out.set("matos_batch_max_age_seconds", (a, t.name), t.batch_age_s)
        for topic, parts in offsets.items():
            for p, o in parts.items():
                labels = (a, topic, p)
                out.set("matos_log_start_offset", labels, o.low)
                out.set("matos_log_end_offset", labels, o.high)
                out.set("matos_committed_offset", labels, -1 if o.committed is None else o.committed)
                lag = max(0, o.high - o.position)
                out.set("matos_lag_records", labels, lag)
                seen = self.first.get((topic, p))
                if lag == 0:
                    out.set("matos_lag_seconds", labels, 0.0)
                elif seen is not None and seen[0] == o.position:
                    out.set("matos_lag_seconds", labels, max(0.0, now - seen[1] / 1000))
        return out
