"""What each key of the topics file means.

The configuration reference in the documentation is generated from this (`python -m
matos_dagster.core.topics`), and a test fails when a key of TopicConfig has no line here.
"""

HELP = {
    "name": "The Kafka topic (required).",
    "group": "Consumer group whose committed offsets record what is archived; default MATOS_KAFKA_GROUP.",
    "format": "`parquet` (zstd) or `jsonl` (gzip).",
    "prefix": "Object name part between MATOS_SWIFT_PREFIX and `topic=<name>/`.",
    "slice_records": "Offsets per Spark task, at most.",
    "object_bytes": "Record bytes per object, before compression (far below Swift's 5 GiB limit).",
    "max_record_bytes": "A larger record fails its range, naming its offset.",
    "batch_records": "The lag sensor requests a range when this many records wait...",
    "batch_bytes": "...or this many bytes (estimated from the last range's bytes per record)...",
    "batch_age_s": "...or when the oldest waiting record is this old (below the sensor's interval).",
    "max_range_records": "A backlog is cut into ranges no larger than this.",
    "lag_warn_records": "Monitor: WARN above this lag when it is not shrinking.",
    "stall_s": "Monitor: ERROR when a lagging partition's committed offset does not move this long.",
    "compact_bytes": "Compaction: record bytes of a merged range.",
    "compact_min_age_s": "Compaction: ranges archived less than this ago stay as they are.",
    "compact_span_s": "Compaction: a merged range spans at most this much Kafka time.",
    "compact_grace_s": "Compaction: replaced ranges are deleted this long after the switch.",
    "archive_retention_days": "Expiry: records stamped more than this many days ago are removed from the archive "
                              "by the `expire` job (docs/operations/forgetting.md); unset: kept forever.",
    "key_format": "Typed key columns beside the raw bytes: `none`, `avro`, `protobuf`, `json_schema` (Confluent wire "
                  "format, schemas from MATOS_SCHEMA_REGISTRY_URL or key_schema_file) or `json` (schemaless). "
                  "Parquet only.",
    "value_format": "Typed value columns, as key_format.",
    "key_schema_file": "The keys' schema as a file (`.avsc`, `.json` JSON Schema, a Protobuf descriptor set), "
                       "for a topic without a registry: keys are then bare, not framed. Relative to the topics file.",
    "value_schema_file": "The values' schema as a file, as key_schema_file.",
    "key_types": "`one`: every key in one struct, its schema versions merged by field name; `by_record_name`: one "
                 "member per record (Avro) or message (Protobuf) name, for a topic of several record types "
                 "(RecordNameStrategy, TopicRecordNameStrategy).",
    "value_types": "As key_types, for the values: `value_data.<RecordName>.<field>`.",
    "decode_strict": "`true`: a record that does not decode fails its range, naming its offset; `false`: it is "
                     "archived with null typed columns and its reason.",
    "time_window": "Event-time windows of the records' timestamps (UTC) as a partitioned asset, each materialised "
                   "when complete: `day`, `hour` or `none`.",
    "allowed_lateness_s": "A window is complete when every partition's largest archived timestamp is this far "
                          "past its end (or the partition is idle); a record of it archived later is late.",
    "idle_s": "A partition archived up to its log end whose log end has not moved for this long holds back no window.",
    "future_margin_s": "A timestamp further than this beyond now (a producer's clock ahead) is counted, and holds "
                       "its partition's watermark to now plus this; its record is in its window all the same.",
    "windows_start": "The first window (`YYYY-MM-DD`, UTC, from 1970-01-01): records stamped before it are counted "
                     "and in no window; no window before it is written.",
    "windows_summary": "`true`: also deploy `summary_<topic>`, an example asset that depends on each window and "
                       "reads its records into memory; run by `event_time_automation`.",
}
