"""The restore's driver: `restore` plans the units, checks (or creates) the target, reads the
marker and runs the units as Spark tasks, wave after wave, into a Report.

What is restored is planned in plan.py, each unit's transactions are in task.py, the target's
checks in target.py. With a target registry, the archived schemas are registered there first,
before the target is checked or created (registry.py), and the units carry the id map.
No Dagster imports: the `restore` job is a thin shell around `restore`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from confluent_kafka import Consumer

from matos_dagster.core.kafka.client import KafkaClient
from matos_dagster.core.kafka.log import LIBRDKAFKA_LOG
from matos_dagster.core.restore import schema_ids
from matos_dagster.core.restore.plan import Fault, Request, RestoreFailed, plan, waves
from matos_dagster.core.restore.registry import register_archived
from matos_dagster.core.restore.target import _prepare_target, demands
from matos_dagster.core.restore.task import _committed, restore_unit
from matos_dagster.core.schemas.sources import ArchivedSource
from matos_dagster.core.spark.tasks import run_tasks, task_error
from matos_dagster.core.swift.store import Store

log = logging.getLogger(__name__)

PRODUCER_FRAMING = 64 * 1024  # the producer's own limit is a guard only: generous
LIBRDKAFKA_MAX_MESSAGE_BYTES = 1_000_000_000


@dataclass
class Report:
    topic: str
    target: str
    group: str
    dry_run: bool
    units: list[dict] = field(default_factory=list)  # one result per unit, in wave order
    created_target: int | None = None  # partitions of the target topic created (or to be)
    target_config: dict[str, str] = field(default_factory=dict)  # settings given to a created target
    notes: list[str] = field(default_factory=list)  # what the operator should know (kept timestamps, ...)
    duration_s: float = 0.0
    # With a target registry: side -> archived schema id -> the target registry's id.
    schema_ids: dict[str, dict[int, int]] = field(default_factory=dict)

    def schema_id_counts(self) -> dict[str, dict[str, int]]:
        """Per side, how many records had their id rewritten, kept, or had none to rewrite."""
        out: dict[str, dict[str, int]] = {}
        for u in self.units:
            schema_ids.add_counts(out, u.get("schema_ids", {}))
        return out

    @property
    def records(self) -> int:
        return sum(u["records"] for u in self.units)

    @property
    def skipped(self) -> int:
        return sum(1 for u in self.units if u["skipped"])

    def records_by_partition(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for u in self.units:
            out[u["partition"]] = out.get(u["partition"], 0) + u["records"]
        return out


def restore(
    req: Request,
    kafka: KafkaClient,
    store: Store,
    spark: Any,
    say: Callable[[str], None] = log.info,
    fault: Fault | None = None,
) -> Report:
    t0 = time.monotonic()
    conf = kafka.client_config()
    report = Report(req.topic, req.target_topic, req.marker_group, req.dry_run)
    units = plan(req, store, conf, kafka.timeout_s, fault, say)
    mode = "dry run: " if req.dry_run else ""
    if not units:
        say(f"{mode}no archived record of {req.topic} matches the selection (under {req.prefix!r}/topic={req.topic}/)")
        report.duration_s = time.monotonic() - t0
        return report
    if req.target_registry is not None:  # before anything is created or produced
        used = schema_ids.used(o for u in units for o in u.objects)
        registered = register_archived(ArchivedSource(store, req.prefix, req.topic), req.target_registry,
                                       req.target_topic, used, req.dry_run, say)
        report.schema_ids, report.notes = registered.ids, list(registered.notes)
        units = [dataclasses.replace(u, schema_ids=registered.ids) for u in units]
    sources = sorted({u.partition for u in units})
    needs = demands(units)
    report.created_target, report.target_config, notes = _prepare_target(
        req, conf, kafka.timeout_s, sources, needs, say)
    report.notes += notes
    # librdkafka refuses, before sending, a record above its message.max.bytes (1,000,000 by
    # default): the producer must take the largest record the archive took.
    largest = needs.largest_record_bytes if needs.unsized_objects == 0 else max(
        needs.largest_record_bytes or 0, req.max_record_bytes)
    producer_conf = {"message.max.bytes": min(LIBRDKAFKA_MAX_MESSAGE_BYTES,
                                              max(1_000_000, (largest or 0) + PRODUCER_FRAMING))}
    units = [dataclasses.replace(u, producer_conf=producer_conf) for u in units]
    # read_uncommitted: a transaction left open by a crashed run must not keep this waiting;
    # the tasks fence it before they read the marker they act on.
    admin_consumer = Consumer({**conf, "group.id": req.marker_group, "enable.auto.commit": False,
                               "isolation.level": "read_uncommitted", "logger": LIBRDKAFKA_LOG})
    try:
        markers = _committed(admin_consumer, req.topic, sources, kafka.timeout_s)
    finally:
        admin_consumer.close()
    say(
        f"{mode}restoring {len(units)} range(s) of {req.topic} partitions {sources} into {req.target_topic} "
        f"({'same partitions' if req.keep_partition else 'partitioned by key'}); progress marker: group "
        f"{req.marker_group}, committed {_show(markers)}"
    )
    plan_waves = waves(units)
    done = 0
    for i, wave in enumerate(plan_waves, 1):
        try:
            results = run_tasks(spark, restore_unit, wave,
                                f"restore {req.topic} -> {req.target_topic}: wave {i}/{len(plan_waves)}")
        except Exception as e:
            failed = task_error(e, RestoreFailed)
            if failed is None:
                raise
            raise RestoreFailed(f"{failed} ({report.records} record(s) restored before, in earlier waves)") from None
        for res in results:
            done += 1
            report.units.append(res)
            say(f"{mode}[{done}/{len(units)}] {_describe(res, req.dry_run)}")
        say(f"{mode}wave {i}/{len(plan_waves)} done: {report.records} record(s) so far")
    report.duration_s = time.monotonic() - t0
    verb = "would restore" if req.dry_run else "restored"
    say(
        f"{mode}{verb} {report.records} record(s) from {len(units)} range(s) ({report.skipped} already restored) "
        f"of {req.topic} into {req.target_topic} in {report.duration_s:.1f}s"
    )
    for side, counts in report.schema_id_counts().items():
        say(f"{side} schema ids: " + ", ".join(f"{counts.get(k, 0)} {k}" for k in schema_ids.OUTCOMES))
    return report


def _show(markers: dict[int, int | None]) -> str:
    return ", ".join(f"p{p}={'none' if o is None else o}" for p, o in sorted(markers.items()))


def _describe(res: dict, dry_run: bool) -> str:
    where = f"{res['range']} offsets [{res['start']}, {res['end']})"
    if res["skipped"]:
        return f"{where}: already restored (marker at {res['marker']}), skipped"
    resumed = f", resumed at {res['resumed_from']}" if res["resumed_from"] is not None else ""
    if dry_run:
        return f"{where}: {res['records']} record(s) to restore from {res['objects']} object(s){resumed}"
    return f"{where}: {res['records']} record(s) in {res['transactions']} transaction(s){resumed}"
