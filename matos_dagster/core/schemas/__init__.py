"""Kafka keys and values as data, not bytes: Confluent wire format or plain JSON decoded into typed Arrow.

The raw `key`/`value` bytes of the archive stay as they are; these modules add typed columns
beside them. `wire` splits the Confluent framing, `sources` finds schemas (a registry, the
archive's own copies, a file), `arrow_types` says which Arrow type a schema gives, `avro`,
`protobuf` and `json_schema` each map their language's schemas and values to Arrow,
`schemaless` infers plain JSON's, `writers` finds each record's writer schema and reads its
records, `union` makes one type of several versions', and `decode` puts it together for one
column of a batch (`typed` for one object). No Dagster imports, and no pandas at
import time (Spark workers import this).
"""
