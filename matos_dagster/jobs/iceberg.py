"""The iceberg_table job: rebuild a topic's Iceberg table from the manifests alone, or compare the two.

    dg launch --job iceberg_table \\
        --config-json '{"ops": {"table_from_manifests": {"config": {"topic": "demo", "rebuild": true}}}}'

`rebuild: false` (the default) only checks: the table's files and record counts against the
manifests up to each partition's watermark (a full audit: it reads every manifest). `rebuild: true`
drops the table from the catalog and adds every archived range again (the archive's truth is the
manifests; the old table's metadata files stay in Swift, unreferenced), then checks. The run fails
with the differences when the check finds any.
"""

from dagster import Config, Failure, MetadataValue, OpExecutionContext, Output, in_process_executor, job, op
from pydantic import Field

from matos_dagster.core.iceberg.plan import TableError
from matos_dagster.core.iceberg.table import Tables
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.store import Store
from matos_dagster.core.topic_set import as_set, not_found
from matos_dagster.names import DEFAULT, Names


class IcebergConfig(Config):
    topic: str = Field(description="A topic of the topics file (format parquet).")
    rebuild: bool = Field(default=False, description="Drop the table and build it again from the manifests first.")


def iceberg_job(topics, names: Names = DEFAULT):
    """`topics`: the topics file (a TopicSet; a list of TopicConfig for named topics only)."""
    topics = as_set(topics)

    @op(name=names.of("table_from_manifests"), description="Rebuild a topic's Iceberg table from its manifests, and/or check it.",
        required_resource_keys=names.keys("swift"))
    def _table(context: OpExecutionContext, config: IcebergConfig) -> Output[int]:
        swift = names.resource(context, "swift")
        topic = topics.get(config.topic)
        if topic is None:
            raise Failure(not_found(topics, config.topic))
        if topic.format != "parquet":
            raise Failure(f"topic {topic.name} is archived as {topic.format}: only Parquet archives are Iceberg tables")
        params = swift.params()
        prefix = layout.join(params.prefix, topic.prefix)
        with Store(params) as store:  # a plain Store: never creates a missing container
            try:
                tables = Tables(store)
                if config.rebuild:
                    tables.rebuild(prefix, topic.name, say=context.log.info)
                report = tables.check(prefix, topic.name)
                location = tables.table(topic.name, create=False).metadata_location
            except TableError as e:
                raise Failure(str(e)) from None
        meta = {"table_records": MetadataValue.int(report.table_records),
                "manifest_records": MetadataValue.int(report.manifest_records),
                "files": MetadataValue.int(report.files), "ranges": MetadataValue.int(report.ranges),
                "metadata_location": MetadataValue.text(location)}
        if not report.ok:
            raise Failure(f"the table of {topic.name} differs from its manifests", metadata={
                **meta, "problems": MetadataValue.md("\n".join(f"- {p}" for p in report.problems[:200]))})
        return Output(report.table_records, metadata=meta)

    @job(name=names.of("iceberg_table"), tags=names.run_tags, executor_def=in_process_executor, description="Rebuild a topic's Iceberg table from the manifests (rebuild: true) "
         "and check it against them.")
    def _job():
        _table()

    return _job
