"""One archive asset per configured topic, partitioned by offset ranges (dynamic partitions)."""


from dagster import (
    AssetExecutionContext,
    AssetsDefinition,
    DynamicPartitionsDefinition,
    MaterializeResult,
    MetadataValue,
    asset,
)

from matos_dagster.archive import Archived, archive_range
from matos_dagster.ranges import KEY_FORM, parse_key
from matos_dagster.resources import KafkaResource, SparkResource, SwiftResource
from matos_dagster.topics import TopicConfig


def ranges_partitions(topic: TopicConfig) -> DynamicPartitionsDefinition:
    return DynamicPartitionsDefinition(name=topic.partitions_name)


def archive_asset(topic: TopicConfig) -> AssetsDefinition:
    @asset(
        name=topic.asset_name,
        partitions_def=ranges_partitions(topic),
        group_name="archive",
        kinds={"kafka", "swift", "spark"},
        description=(
            f"Kafka topic `{topic.name}` archived into Swift as {topic.format}, one offset range a "
            f"partition. Partition keys: `{KEY_FORM}`, half-open `[start, end)`."
        ),
        metadata={"topic": topic.name, "consumer_group": topic.group, "format": topic.format},
    )
    def _archive(
        context: AssetExecutionContext, kafka: KafkaResource, swift: SwiftResource, spark: SparkResource
    ) -> MaterializeResult:
        r = parse_key(context.partition_key)
        with swift.store() as store:
            done = archive_range(r, topic, kafka, store, spark.spark_session, say=context.log.info)
            location = f"{store.url}/{store.container}/{done.manifest_name.rsplit('/', 1)[0]}/"
        for note in done.notes:
            context.log.warning(note)
        return MaterializeResult(metadata=metadata(done, location))

    return _archive


def metadata(done: Archived, location: str) -> dict:
    m = done.manifest
    meta = {
        "records": MetadataValue.int(m["records"]),
        "bytes": MetadataValue.int(m["bytes"]),
        "record_bytes": MetadataValue.int(m["record_bytes"]),
        "objects": MetadataValue.int(len(m["objects"])),
        "start": MetadataValue.int(done.range.start),
        "end": MetadataValue.int(done.range.end),
        "duration_s": MetadataValue.float(round(done.duration_s, 3)),
        "records_per_s": MetadataValue.float(round(done.records_per_s, 1)),
        "slices": MetadataValue.int(done.slices),
        "verified_existing_archive": MetadataValue.bool(done.verified_only),
        "swift_location": MetadataValue.url(location),
        "manifest": MetadataValue.text(done.manifest_name),
    }
    if done.committed_after is not None:
        meta["committed_offset"] = MetadataValue.int(done.committed_after)
    if m["first_offset"] is not None:
        meta["first_offset"] = MetadataValue.int(m["first_offset"])
        meta["last_offset"] = MetadataValue.int(m["last_offset"])
    if m["min_timestamp"] is not None:
        meta["first_timestamp"] = MetadataValue.timestamp(m["min_timestamp"] / 1000)
        meta["last_timestamp"] = MetadataValue.timestamp(m["max_timestamp"] / 1000)
    return meta
