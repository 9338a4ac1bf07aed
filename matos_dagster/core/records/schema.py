"""The archive's Arrow schema: one row a Kafka record, nothing lost.

Key and value stay bytes (null stays null), headers keep their order and repeated keys, and
the timestamp type is named as Kafka names it. Every object holds rows of `SCHEMA`: the slice
task's `Batch`, the native reader's chunks, the encoders and decoders, the reader and the
Iceberg tables all use this one. No Dagster imports.
"""

from __future__ import annotations

import pyarrow as pa

# confluent_kafka.TIMESTAMP_NOT_AVAILABLE / _CREATE_TIME / _LOG_APPEND_TIME
TIMESTAMP_TYPES = {0: "NotAvailable", 1: "CreateTime", 2: "LogAppendTime"}

HEADER = pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())])
SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("ms", tz="UTC")),
        pa.field("timestamp_type", pa.string(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", pa.list_(pa.field("item", HEADER, nullable=False))),
    ]
)


HEADERS = pa.list_(pa.field("item", HEADER, nullable=False))
