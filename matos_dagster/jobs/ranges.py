"""Explicit ranges for the CLI (Matos' `batch` with its offsets): add them as partition keys.

    dagster job execute -m matos_dagster.definitions -j add_ranges \\
        -c <(echo '{ops: {add_range_keys: {config: {topic: demo, partition: 0, start: -1, end: -1}}}}')

`start: -1` is the committed offset (the log start if the group never committed) and `end: -1`
the log end offset, as Matos' `-1` was: "everything pending". The range is cut into pieces
no larger than the topic's `max_range_records`; each key is then materialised like any other:

    dagster asset materialize -m matos_dagster.definitions --select archive_demo --partition <key>
"""

from dagster import Config, MetadataValue, OpExecutionContext, job, op
from pydantic import Field

from matos_dagster.ranges import OffsetRange, cut
from matos_dagster.resources import KafkaResource
from matos_dagster.topics import TopicConfig


class RangesConfig(Config):
    topic: str = Field(description="A topic of the topics file.")
    partition: int = Field(default=-1, description="Partition; -1: every partition of the topic.")
    start: int = Field(default=-1, description="First offset; -1: the committed offset (the log start if none).")
    end: int = Field(default=-1, description="End offset, exclusive; -1: the log end offset.")


def add_ranges_job(topics: list[TopicConfig]):
    by_name = {t.name: t for t in topics}

    @op(name="add_range_keys", description="Validate [start, end) and add its ranges as partition keys.")
    def _add(context: OpExecutionContext, config: RangesConfig, kafka: KafkaResource) -> list[str]:
        topic = by_name.get(config.topic)
        if topic is None:
            raise ValueError(f"topic {config.topic!r} is not in the topics file; it has {sorted(by_name)}")
        parts = kafka.partitions(topic.name)
        if config.partition != -1 and config.partition not in parts:
            raise ValueError(f"topic {topic.name!r} has no partition {config.partition}; it has {parts}")
        chosen = parts if config.partition == -1 else [config.partition]
        marks = kafka.watermarks(topic.name, chosen)
        committed = kafka.committed(topic.name, chosen, topic.group)
        keys: list[str] = []
        for p in chosen:
            low, high = marks[p]
            start = config.start if config.start != -1 else (committed[p] if committed[p] is not None else low)
            end = config.end if config.end != -1 else high
            if start < -1 or end < -1:
                raise ValueError(f"offsets must be >= 0 (or -1), got start={config.start} end={config.end}")
            if end > high:
                raise ValueError(f"end {end} is past the log end offset {high} of {topic.name}/{p}")
            if start == end and (config.start == -1 or config.end == -1):
                context.log.info(f"{topic.name}/{p}: nothing pending at offset {start}")
                continue
            OffsetRange(topic.name, p, start, end)  # refuses end <= start with a clear message
            keys += [r.key for r in cut(topic.name, p, start, end, topic.max_range_records)]
        if not keys:
            context.log.info(f"no range added: nothing is pending in {topic.name}, partitions {chosen}")
        context.instance.add_dynamic_partitions(topic.partitions_name, keys)
        for k in keys:
            context.log.info(
                f"added {k}; archive it with: dagster asset materialize -m matos_dagster.definitions "
                f"--select {topic.asset_name} --partition {k}"
            )
        context.add_output_metadata({"keys": MetadataValue.json(keys), "count": len(keys)})
        return keys

    @job(name="add_ranges", description="Add explicit offset ranges as archive partition keys (Matos' `batch`).")
    def _job():
        _add()

    return _job
