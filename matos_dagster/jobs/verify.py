"""The verify job: check a topic's archive against its manifests, Swift and Kafka.

    dagster job execute -m matos_dagster.definitions -j verify \\
        -c <(echo '{ops: {verify_archive: {config: {topic: demo, sample: 20}}}}')

The same checks as `python -m matos_dagster.verify` (see `matos_dagster/verify.py`). The run
fails, with the report, when anything is wrong; its metadata counts each kind of problem.
"""

from dagster import Config, Failure, MetadataValue, OpExecutionContext, Output, job, op
from pydantic import Field

from matos_dagster import layout
from matos_dagster.resources import KafkaResource, SwiftResource
from matos_dagster.store import Store
from matos_dagster.topics import TopicConfig
from matos_dagster.verify import Report, verify_topic


class VerifyConfig(Config):
    topic: str = Field(description="A topic of the topics file.")
    sample: int = Field(
        default=0,
        description="Records per range compared with Kafka while Kafka still has them: 0 none, N that many, "
        "-1 every record (slow: read by this run, not by Spark).",
    )


def verify_job(topics: list[TopicConfig]):
    by_name = {t.name: t for t in topics}

    @op(name="verify_archive", description="Check every manifest, object and offset of a topic's archive.")
    def _verify(context: OpExecutionContext, config: VerifyConfig, kafka: KafkaResource, swift: SwiftResource) -> Output[int]:
        topic = by_name.get(config.topic)
        if topic is None:
            raise Failure(f"topic {config.topic!r} is not in the topics file; it has {sorted(by_name)}")
        if config.sample < -1:
            raise Failure(f"sample must be -1 (every record), 0 (none) or a count, got {config.sample}")
        params = swift.params()
        # A plain Store, not swift.store(): verifying must not create a missing container.
        with Store(params) as store:
            report = verify_topic(kafka, store, layout.join(params.prefix, topic.prefix), topic,
                                  None if config.sample == -1 else config.sample)
        for line in report.render().splitlines():
            context.log.info(line)
        meta = metadata(report)
        if not report.ok:
            raise Failure(description=report.render()[:20000], metadata=meta)
        return Output(report.totals()["manifests"], metadata=meta)

    @job(name="verify", description="Verify a topic's archive: gaps, overlaps, objects, checksums, records, loss.")
    def _job():
        _verify()

    return _job


def metadata(report: Report) -> dict:
    t = report.totals()
    meta = {
        "ok": MetadataValue.bool(report.ok),
        "problems": MetadataValue.int(len(report.problems)),
        "lost_offsets": MetadataValue.int(report.lost_offsets),
        "manifests": MetadataValue.int(t["manifests"]),
        "objects": MetadataValue.int(t["objects"]),
        "records": MetadataValue.int(t["records"]),
        "bytes": MetadataValue.int(t["bytes"]),
        "compared_with_kafka": MetadataValue.int(report.compared),
        "duration_s": MetadataValue.float(round(report.duration_s, 3)),
        **{f"problems_{kind.replace('-', '_')}": MetadataValue.int(n) for kind, n in report.counts().items()},
    }
    if report.problems or report.loss:
        rows = [f"| {p.kind} | {p.partition} | {p.start if p.start is not None else ''} | "
                f"{p.end if p.end is not None else ''} | {p.message.replace('|', '/')} |"
                for p in (report.problems + report.loss)[:200]]
        meta["report"] = MetadataValue.md(
            "| kind | partition | start | end | what |\n| --- | --- | --- | --- | --- |\n" + "\n".join(rows))
    return meta
