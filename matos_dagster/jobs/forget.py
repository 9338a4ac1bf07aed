"""The forget job: carry out an erasure request that `matos forget` wrote (core/erase/run.py).

    dg launch --job forget --config-json '{"ops": {"forget_keys": {"config": {"request": "<id>"}}}}'

The run takes only the request's id: the keys are in no run config, tag, event or log line (the
request in Swift holds their keyed hashes). Each partition is rewritten in its turn (turns.py),
so no archive run writes in a folder while this run rewrites it. With `index_topics` instead of a
request, it gives the objects of those topics archived without a key index one
(`matos forget --index`, core/erase/index_build.py), in the same turns.
"""


from dagster import Config, Failure, JobDefinition, MetadataValue, OpExecutionContext, Output, in_process_executor, job, op
from pydantic import Field

from matos_dagster.core import settings
from matos_dagster.core.erase import keys, request
from matos_dagster.core.erase.index_build import index_topics
from matos_dagster.core.erase.rewrite import ErasureError
from matos_dagster.core.erase.run import carry_out
from matos_dagster.core.erase.ledger import LedgerError
from matos_dagster.core.runs import heartbeat
from matos_dagster.core.topic_set import as_set, not_found
from matos_dagster.dead_runs import beating
from matos_dagster.names import DEFAULT, Names
from matos_dagster.turns import partition_by_partition

OP = "forget_keys"


class ForgetConfig(Config):
    request: str = Field("", description="The erasure request's id, as `matos forget` printed it (the keys are in "
                         "the request, in Swift: never in run config).")
    index_topics: list[str] = Field([], description="Instead of a request: give these topics' objects archived "
                                    "without a key index one (`matos forget --index`; core/erase/index_build.py).")


def forget_job(topics, names: Names = DEFAULT) -> JobDefinition:
    """`topics`: the topics file (a TopicSet), for the prefixes of the request's topics."""
    topics = as_set(topics)

    @op(name=names.of(OP), description="Erase the records of the request's keys from every object of its topics.",
        required_resource_keys=names.keys("swift"))
    def _forget(context: OpExecutionContext, config: ForgetConfig) -> Output[int]:
        (swift,) = names.resources(context, "swift")
        instance, run_id = context.instance, context.run.run_id
        thresholds = heartbeat.Thresholds.from_settings()

        # A claim per partition, named in the tag the archive runs of that partition look for.
        in_turn = partition_by_partition(instance, run_id, thresholds, context.log.info, names)
        if config.index_topics:
            return _index(context, swift, config.index_topics, in_turn)
        try:
            request.check_id(config.request)
            with swift.store() as store:
                req = request.read(store, store.params.prefix, config.request)
                configs = {}
                for t in (req.topics if req else {}):
                    found = topics.get(t)
                    if found is None:
                        raise Failure(not_found(topics, t))
                    configs[t] = found
                with beating(instance, run_id, thresholds, context.log.warning):
                    done = carry_out(config.request, store, configs, settings.get(keys.SETTING), run_id, in_turn,
                                     context.log.info)
        except (request.RequestError, keys.BadKey, ErasureError, LedgerError) as e:
            raise Failure(str(e)) from None
        return Output(done.records, metadata={
            "records_erased": MetadataValue.int(done.records),
            "objects_rewritten": MetadataValue.int(sum(len(p.rewritten) for p in done.partitions)),
            "objects_deleted": MetadataValue.int(sum(len(p.deleted) for p in done.partitions)),
            "objects_read": MetadataValue.int(sum(p.objects_read for p in done.partitions)),
            # Not read: their key index (core/erase/key_index.py) says they hold none of the keys.
            "objects_skipped": MetadataValue.int(sum(p.objects_skipped for p in done.partitions)),
            "bytes_moved": MetadataValue.int(sum(p.bytes_read + p.bytes_written for p in done.partitions)),
            "record": MetadataValue.text(done.record_name),
            "partitions": MetadataValue.json({f"{p.topic}/{p.partition}": p.records for p in done.partitions}),
        })

    def _index(context: OpExecutionContext, swift, asked: list[str], in_turn) -> Output[int]:
        configs = {}
        for t in asked:
            if topics.get(t) is None:
                raise Failure(not_found(topics, t))
            configs[t] = topics.get(t)
        try:
            with swift.store() as store, beating(context.instance, context.run.run_id,
                                                 heartbeat.Thresholds.from_settings(), context.log.warning):
                done = index_topics(store, configs, settings.get(keys.SETTING), in_turn, context.log.info)
        except keys.BadKey as e:
            raise Failure(str(e)) from None
        for p in done:
            for note in p.notes:
                context.log.warning(note)
        indexed = sum(p.objects_indexed for p in done)
        return Output(indexed, metadata={
            "objects_indexed": MetadataValue.int(indexed),
            "objects_had_index": MetadataValue.int(sum(p.objects_had for p in done)),
            "manifests_written": MetadataValue.int(sum(p.manifests_written for p in done)),
            "bytes_read": MetadataValue.int(sum(p.bytes_read for p in done)),
            "notes": MetadataValue.int(sum(len(p.notes) for p in done)),
        })

    @job(name=names.of("forget"), executor_def=in_process_executor, tags={"kind": "erasure", **names.run_tags},
         description="Carry out an erasure request of `matos forget`: the keys' records removed from the archive.")
    def _job():
        _forget()

    return _job
