"""The verify job: check a topic's archive against its manifests, Swift and Kafka.

    dg launch --job verify --config-json '{"ops": {"verify_archive": {"config": {"topic": "demo", "sample": 20}}}}'

The same checks as `matos audit` (see `matos_dagster/core/verify/`): by default
from each partition's audit mark on (bounded, whatever the history), `audit_all: true` for a
full audit (e.g. scheduled weekly), `from_offset: N` from an offset. The run fails, with the
report, when anything is wrong (an acknowledged loss is not); its metadata counts each kind.
"""

from typing import Optional

from dagster import Config, Failure, MetadataValue, OpExecutionContext, Output, in_process_executor, job, op
from pydantic import Field

from matos_dagster.core.swift import layout
from matos_dagster.core.swift.incarnations import IncarnationError
from matos_dagster.core.swift.store import Store
from matos_dagster.core.topic_set import as_set, not_found
from matos_dagster.core.verify import EVERYTHING, FROM_MARK, Report, verify_topic
from matos_dagster.names import DEFAULT, Names


class VerifyConfig(Config):
    topic: str = Field(description="A topic of the topics file.")
    sample: int = Field(
        default=0,
        description="Records per range compared with Kafka while Kafka still has them: 0 none, N that many, "
        "-1 every record (slow: read by this run, not by Spark).",
    )
    audit_all: bool = Field(
        default=False,
        description="Audit every entry from each partition's first (lists the whole history). Default: from "
        "each partition's audit mark, where earlier audits left off.",
    )
    from_offset: Optional[int] = Field(
        default=None, description="Audit each partition from this offset on (instead of from the audit marks)."
    )
    incarnation: str = Field(
        default="", description="Which log of the topic's name, when it was deleted and created again: its number "
        "(1 the first) or Kafka's topic id; empty: the newest. Only the log Kafka still holds is compared with Kafka.",
    )


def verify_job(topics, names: Names = DEFAULT):
    """`topics`: the topics file (a TopicSet; a list of TopicConfig for named topics only)."""
    topics = as_set(topics)

    @op(name=names.of("verify_archive"), description="Check every manifest, object and offset of a topic's archive.",
        required_resource_keys=names.keys("kafka", "swift"))
    def _verify(context: OpExecutionContext, config: VerifyConfig) -> Output[int]:
        kafka, swift = names.resources(context, "kafka", "swift")
        topic = topics.get(config.topic)
        if topic is None:
            raise Failure(not_found(topics, config.topic))
        if config.sample < -1:
            raise Failure(f"sample must be -1 (every record), 0 (none) or a count, got {config.sample}")
        if config.from_offset is not None and (config.from_offset < 0 or config.audit_all):
            raise Failure(f"from_offset must be an offset >= 0, without audit_all; got {config.from_offset}"
                          f"{' with audit_all' if config.audit_all else ''}")
        since = EVERYTHING if config.audit_all else FROM_MARK if config.from_offset is None else config.from_offset
        params = swift.params()
        # A plain Store, not swift.store(): verifying must not create a missing container.
        with Store(params) as store:
            try:
                report = verify_topic(kafka, store, layout.join(params.prefix, topic.prefix), topic,
                                      None if config.sample == -1 else config.sample, since=since, move_mark=True,
                                      incarnation=config.incarnation or None)
            except IncarnationError as e:
                raise Failure(f"incarnation: {e}") from None
        for line in report.render().splitlines():
            context.log.info(line)
        meta = metadata(report)
        if not report.ok:
            raise Failure(description=report.render()[:20000], metadata=meta)
        return Output(report.totals()["manifests"], metadata=meta)

    @job(name=names.of("verify"), tags=names.run_tags, executor_def=in_process_executor, description="Verify a topic's archive: gaps, overlaps, objects, checksums, records, loss.")
    def _job():
        _verify()

    return _job


def metadata(report: Report) -> dict:
    t = report.totals()
    meta = {
        "ok": MetadataValue.bool(report.ok),
        "problems": MetadataValue.int(len(report.problems)),
        "lost_offsets": MetadataValue.int(report.lost_offsets),
        "acknowledged_lost_offsets": MetadataValue.int(report.acknowledged_offsets),
        "scope": MetadataValue.text(report.scope),
        **({"incarnation": MetadataValue.int(report.incarnation)} if report.incarnation is not None else {}),
        "manifests": MetadataValue.int(t["manifests"]),
        "objects": MetadataValue.int(t["objects"]),
        "records": MetadataValue.int(t["records"]),
        "bytes": MetadataValue.int(t["bytes"]),
        "compared_with_kafka": MetadataValue.int(report.compared),
        "duration_s": MetadataValue.float(round(report.duration_s, 3)),
        **{f"problems_{kind.replace('-', '_')}": MetadataValue.int(n) for kind, n in report.counts().items()},
    }
    if report.problems or report.loss or report.acknowledged:
        rows = [f"| {p.kind} | {p.partition} | {p.start if p.start is not None else ''} | "
                f"{p.end if p.end is not None else ''} | {p.message.replace('|', '/')} |"
                for p in (report.problems + report.loss + report.acknowledged)[:200]]
        meta["report"] = MetadataValue.md(
            "| kind | partition | start | end | what |\n| --- | --- | --- | --- | --- |\n" + "\n".join(rows))
    return meta
