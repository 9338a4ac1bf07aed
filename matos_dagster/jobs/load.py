"""The load job (Matos' `load`): produce test records to a topic.

    dg launch --job load -c load.yaml

with, for example, `ops: {produce: {config: {topic: demo, count: 100000, value_bytes: 1024}}}`.
"""

import os
import time

from confluent_kafka import KafkaException
from dagster import Config, JobDefinition, MetadataValue, OpExecutionContext, Output, in_process_executor, job, op
from pydantic import Field

from matos_dagster.names import DEFAULT, Names
from matos_dagster.resources import KafkaResource


class LoadConfig(Config):
    topic: str = Field(default="demo", description="Topic to produce to.")
    count: int = Field(default=1000, description="Records to produce.")
    value_bytes: int = Field(default=100, description="Size of each value in bytes (0: an empty value).")
    key_pattern: str = Field(
        default="key-{i}",
        description="Key of record i, a Python format string with `{i}` (and `{p}`, the target partition "
        "if set); empty: null keys.",
    )
    headers: dict[str, str] = Field(default={}, description="Headers added to every record.")
    partitions: list[int] = Field(
        default=[], description="Partitions to spread the records over, in turn; empty: the partitioner decides."
    )
    create_partitions: int = Field(
        default=0, description="Create the topic with this many partitions if it does not exist (0: don't)."
    )
    transactional: bool = Field(default=False, description="Produce in transactions of `transaction_size` records.")
    transaction_size: int = Field(default=1000, description="Records per transaction.")
    rate: float = Field(default=0.0, description="Records per second at most (0: as fast as possible).")


def produce(names: Names = DEFAULT):
    """The op producing test records to the archive's Kafka."""

    @op(name=names.of("produce"), required_resource_keys=names.keys("kafka"),
        description="Produce test records with an idempotent producer; report each partition's log end offset.")
    def _produce(context: OpExecutionContext, config: LoadConfig) -> Output[int]:
        return _load(context, config, names.resource(context, "kafka"))

    return _produce


def _load(context: OpExecutionContext, config: LoadConfig, kafka: KafkaResource) -> Output[int]:
    if config.count < 0 or config.value_bytes < 0:
        raise ValueError("count and value_bytes must be >= 0")
    if config.create_partitions:
        ensure_topic(kafka, config.topic, config.create_partitions)
    known = kafka.partitions(config.topic)  # fails clearly on an unknown topic
    bad = sorted(set(config.partitions) - set(known))
    if bad:
        raise ValueError(f"topic {config.topic!r} has no partition(s) {bad}; it has {known}")

    failures: list[str] = []

    def failed(err, msg):
        failures.append(str(err))

    # Delivery reports for failures only: a Python callback per delivered record would cost
    # about as much as producing it. The log end offsets are read from Kafka after the flush.
    extra = {"linger.ms": 20, "batch.size": 1_000_000, "compression.type": "lz4",
             "delivery.report.only.error": True, "on_delivery": failed}
    if config.transactional:
        extra["transactional.id"] = f"matos-load-{context.run_id}"
    producer = kafka.producer(**extra)
    before = kafka.watermarks(config.topic, known)

    # One random block, sliced per record: cheap, and values do not compress to nothing.
    block = os.urandom(max(config.value_bytes, 1) + 256)
    size = config.value_bytes
    headers = list(config.headers.items()) or None
    pattern, parts, topic = config.key_pattern, config.partitions, config.topic
    send = producer.produce
    t0 = time.monotonic()
    next_report = t0 + 5
    if config.transactional:
        producer.init_transactions(kafka.timeout_s)
    # The loop runs once per record, so the per-record work is only the key, the value slice
    # and the call; polling, the clock and the progress log come every 1024 records.
    for i in range(config.count):
        if config.transactional and i % config.transaction_size == 0:
            if i:
                producer.commit_transaction(kafka.timeout_s)
            producer.begin_transaction()
        partition = parts[i % len(parts)] if parts else None
        key = pattern.format(i=i, p=partition).encode() if pattern else None
        at = i & 255
        while True:
            try:
                # -1: the partitioner decides.
                send(topic, block[at : at + size], key, -1 if partition is None else partition, headers=headers)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
        if config.rate:
            ahead = (i + 1) / config.rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)
        if i & 1023 == 0:
            producer.poll(0)
            if time.monotonic() >= next_report:
                context.log.info(f"produced {i + 1} of {config.count} records to {config.topic}")
                next_report += 5
    if config.transactional and config.count:
        producer.commit_transaction(kafka.timeout_s)
    left = producer.flush(kafka.timeout_s * 4)
    if failures or left:
        raise KafkaException(f"{len(failures)} records failed, {left} undelivered; first error: {failures[:1]}")
    duration = time.monotonic() - t0
    after = kafka.watermarks(config.topic, known)
    context.log.info(f"produced {config.count} records to {config.topic} in {duration:.1f}s")
    return Output(
        config.count,
        metadata={
            "topic": config.topic,
            "records": MetadataValue.int(config.count),
            "duration_s": MetadataValue.float(round(duration, 3)),
            "records_per_s": MetadataValue.float(round(config.count / duration, 1) if duration else 0.0),
            # The log end offset of each partition this load wrote to (what a range can end at).
            **{f"log_end_p{p}": MetadataValue.int(hi) for p, (_, hi) in sorted(after.items()) if hi > before[p][1]},
        },
    )


def ensure_topic(kafka: KafkaResource, topic: str, partitions: int) -> None:
    """Create the topic if missing, and wait until each partition has a leader (a fresh broker)."""
    kafka.create_topic(topic, partitions)


def load_job(names: Names = DEFAULT) -> JobDefinition:
    @job(name=names.of("load"), tags=names.run_tags, executor_def=in_process_executor,
         description="Produce test records to a Kafka topic (Matos' `load`).")
    def _job():
        produce(names)()

    return _job


load = load_job()
