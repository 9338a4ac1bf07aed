"""Explicit ranges for the CLI (Matos' `batch` with its offsets): add them as partition keys.

    .venv/bin/python -m matos_dagster add-ranges demo --partition 0 --start -1 --end -1

`start: -1` is where the archive's contiguous prefix ends, found from the committed offset on
(the log start if the group never committed), and `end: -1` the log end offset, as Matos' `-1`
was: "everything pending". Offsets already archived (or acknowledged as lost) are skipped, so
no key names a range the archive would refuse as overlapping; offsets deleted from Kafka before
they were archived are refused with the command that acknowledges the loss. What is left is
cut into pieces no larger than the topic's `max_range_records`; each key is then materialised
like any other:

    .venv/bin/python -m matos_dagster archive <key>
"""

import sys

from dagster import Config, MetadataValue, OpExecutionContext, in_process_executor, job, op
from pydantic import Field

from matos_dagster.core.archive import loss
from matos_dagster.core.archive.commit import prefix_end, unarchived
from matos_dagster.core.kafka import many
from matos_dagster.core.offsets.ranges import OffsetRange, cut
from matos_dagster.core.swift import incarnations, layout
from matos_dagster.core.swift.archived import PartitionArchive
from matos_dagster.core.swift.store import Store
from matos_dagster.core.topic_set import as_set, not_found
from matos_dagster.names import DEFAULT, Names


class RangesConfig(Config):
    topic: str = Field(description="A topic of the topics file.")
    partition: int = Field(default=-1, description="Partition; -1: every partition of the topic.")
    start: int = Field(default=-1, description="First offset; -1: the end of the archived prefix from the "
                       "committed offset (the log start if none).")
    end: int = Field(default=-1, description="End offset, exclusive; -1: the log end offset.")


def add_ranges_job(topics, names: Names = DEFAULT):
    """`topics`: the topics file (a TopicSet; a list of TopicConfig for named topics only)."""
    topics = as_set(topics)

    @op(name=names.of("add_range_keys"), description="Validate [start, end) and add its ranges as partition keys.",
        required_resource_keys=names.keys("kafka", "swift"))
    def _add(context: OpExecutionContext, config: RangesConfig) -> list[str]:
        kafka, swift = names.resources(context, "kafka", "swift")
        topic = topics.get(config.topic)
        if topic is None:
            raise ValueError(not_found(topics, config.topic))
        if config.start < -1 or config.end < -1:
            raise ValueError(f"offsets must be >= 0 (or -1), got start={config.start} end={config.end}")
        parts = kafka.partitions(topic.name)
        if config.partition != -1 and config.partition not in parts:
            raise ValueError(f"topic {topic.name!r} has no partition {config.partition}; it has {parts}")
        chosen = parts if config.partition == -1 else [config.partition]
        marks = kafka.watermarks(topic.name, chosen)
        committed = kafka.committed(topic.name, chosen, topic.group)
        keys: list[str] = []
        store = prefix = None
        try:
            for p in chosen:
                low, high = marks[p]
                base = config.start if config.start != -1 else (committed[p] if committed[p] is not None else low)
                end = config.end if config.end != -1 else high
                if end > high:
                    raise ValueError(f"end {end} is past the log end offset {high} of {topic.name}/{p}")
                if base == end and (config.start == -1 or config.end == -1):
                    context.log.info(f"{topic.name}/{p}: nothing pending at offset {base}")
                    continue
                OffsetRange(topic.name, p, base, end)  # refuses end <= start with a clear message
                if store is None:
                    store = Store(swift.params())  # reading only: a missing container is an empty archive
                if prefix is None:  # the current log's archive (a topic created again: its incarnation's)
                    base_prefix = layout.join(store.params.prefix, topic.prefix)
                    tid = many.topic_ids(kafka, [topic.name])[topic.name]
                    prefix = incarnations.looked_up(store, base_prefix, topic.name, tid).prefix(base_prefix)
                archive = PartitionArchive(store, prefix, topic.name, p)
                # From the committed offset on only: the history below it is never listed.
                start = prefix_end(archive, base) if config.start == -1 else base
                todo = unarchived(archive, start, end) if start < end else []
                lost = [(a, min(b, low)) for a, b in todo if a < low]
                if lost:
                    raise ValueError(
                        f"offsets {', '.join(f'[{a}, {b})' for a, b in lost)} of {topic.name}/{p} were deleted from "
                        f"Kafka (log start offset {low}) before they were archived; no range was added. To go on, "
                        f"acknowledge the loss: {loss.command(topic.name, p)}")
                if start > base:
                    context.log.info(f"{topic.name}/{p}: [{base}, {start}) is archived already; starting at {start}")
                if not todo:
                    context.log.info(f"{topic.name}/{p}: nothing pending: [{start}, {end}) is archived already")
                for a, b in todo:
                    keys += [r.key for r in cut(topic.name, p, a, b, topic.max_range_records)]
        finally:
            if store is not None:
                store.close()
        if not keys:
            context.log.info(f"no range added: nothing is pending in {topic.name}, partitions {chosen}")
        context.instance.add_dynamic_partitions(names.partitions(topic), keys)
        for k in keys:
            # Runnable as printed, from any folder: this Python by its full path (a README user
            # has no `dagster` on the PATH).
            context.log.info(f"added {k}; archive it with: {sys.executable} -m matos_dagster archive {k}")
        context.add_output_metadata({"keys": MetadataValue.json(keys), "count": len(keys)})
        return keys

    @job(name=names.of("add_ranges"), tags=names.run_tags, executor_def=in_process_executor, description="Add explicit offset ranges as archive partition keys (Matos' `batch`).")
    def _job():
        _add()

    return _job
