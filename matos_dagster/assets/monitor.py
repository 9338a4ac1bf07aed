"""The monitor asset check of each archive asset, and the one evaluation of many topics behind it.

The check is not partitioned: it judges the whole topic at once (partitioned checks are a
preview feature of Dagster 1.13). The monitor sensor (sensors/monitor.py) reports its verdicts
without a run; a run can still execute it (the UI, `dg launch --job monitor_checks`, an archive
run from the CLI). Both go through `evaluate`: Kafka asked once for all the topics, each topic's
last verdict read in one query, each verdict built from that (core/monitor/verdict.py).
"""

import time
from typing import Sequence

from dagster import (
    AssetCheckEvaluation,
    AssetCheckExecutionContext,
    AssetCheckKey,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetSelection,
    DagsterInstance,
    MetadataValue,
    TableColumn,
    TableRecord,
    TableSchema,
    asset_check,
    define_asset_job,
    in_process_executor,
)

from matos_dagster.core.kafka import many
from matos_dagster.core.monitor import report as monitor
from matos_dagster.core.monitor import verdict
from matos_dagster.core.monitor.verdict import NEVER, Previous, Verdict
from matos_dagster.core.swift import chosen_incarnation, layout
from matos_dagster.core.swift.store import Store
from matos_dagster.core.topics import TopicConfig
from matos_dagster.dagster_compat import AssetCheckExecutionRecordStatus
from matos_dagster.names import DEFAULT, Names
from matos_dagster.resources import KafkaResource, SwiftResource
from matos_dagster.sensors import stopped

CHECK_NAME = "monitor"
MONITOR_JOB = "monitor_checks"
_DONE = {AssetCheckExecutionRecordStatus.SUCCEEDED, AssetCheckExecutionRecordStatus.FAILED}

_COLUMNS = TableSchema(
    columns=[
        TableColumn("partition", "int"),
        TableColumn("status", "string"),
        TableColumn("log_start", "int"),
        TableColumn("log_end", "int"),
        TableColumn("committed", "int"),
        TableColumn("archived_hwm", "int"),
        TableColumn("ranges", "int"),
        TableColumn("lag_records", "int"),
        TableColumn("lag_seconds", "float"),
        TableColumn("gaps", "string"),
        TableColumn("overlaps", "string"),
        TableColumn("lost", "string"),
        TableColumn("acknowledged_loss", "string"),
        TableColumn("not_decoded", "int"),  # a typed topic's records that did not decode (raw bytes kept)
        TableColumn("why", "string"),
    ]
)


def check_key(topic: TopicConfig, names: Names = DEFAULT) -> AssetCheckKey:
    return AssetCheckKey(names.asset_key(topic), CHECK_NAME)


def monitor_check(topic: TopicConfig, names: Names = DEFAULT) -> AssetChecksDefinition:
    @asset_check(
        asset=names.asset_key(topic),
        name=CHECK_NAME,
        blocking=False,
        required_resource_keys=names.keys("kafka", "swift"),
        description=(
            f"Per partition of `{topic.name}`: offsets, archived high-water mark, lag, gaps, overlaps, "
            "data loss. OK, WARN (lag high and not shrinking) or ERROR (gap, overlap, loss, stall)."
        ),
    )
    def _monitor(context: AssetCheckExecutionContext) -> AssetCheckResult:
        kafka, swift = names.resources(context, "kafka", "swift")
        (e,) = evaluate(context.instance, kafka, swift, [topic], names=names).evaluations
        return AssetCheckResult(passed=e.passed, severity=e.severity, description=e.description, metadata=e.metadata)

    return _monitor


def monitor_job(checks: Sequence[AssetChecksDefinition], names: Names = DEFAULT):
    """Every topic's check in one run, for whoever wants them now; the sensor needs no run."""
    return define_asset_job(names.of(MONITOR_JOB), selection=AssetSelection.checks(*checks),
                            executor_def=in_process_executor, tags=names.run_tags,
                            description="Evaluates every topic's monitor check now (the monitor sensor does "
                            "it without a run).")


class Evaluated:
    """What `evaluate` made, and why: per topic, the reason it was due (or not)."""

    def __init__(self):
        self.evaluations: list[AssetCheckEvaluation] = []
        self.due: dict[str, str] = {}  # topic -> why it was evaluated
        self.left: list[str] = []  # due, but the time was up: the next tick's first
        self.fresh = 0  # not due
        self.held: list[str] = []  # of those, moved since their verdict, due once it is old enough
        self.oldest = 0.0  # when the oldest verdict left standing was made (0: a topic has none)


def evaluate(instance: DagsterInstance, kafka: KafkaResource, swift: SwiftResource, topics: Sequence[TopicConfig],
             listing: dict[str, list[int]] | None = None, max_age_s: float | None = None,
             deadline: float | None = None, offsets: dict[str, dict[int, verdict.Offsets]] | None = None,
             names: Names = DEFAULT, gave_up: dict[tuple[str, int], str] | None = None,
             moved_after_s: float = 0.0) -> Evaluated:
    """The monitor's verdict of each topic that is due, as check evaluations, stalest first.

    `listing`: the cluster's topics (many.topics), if the caller has it; a topic missing from it
    gets a verdict saying so. `max_age_s`: evaluate only topics whose verdict is this old or whose
    committed offsets moved since (None: every topic). `deadline` (time.monotonic()): no topic is
    begun after it, though at least one is; the others are left for the next call. `offsets`: the
    topics' (verdict.kafka_offsets), if the caller has them. `names`: the archive's (its check keys).
    `gave_up`: the partitions the lag sensor no longer requests (sensors/stopped.py), if the caller
    has them; else read from the instance. `moved_after_s`: a topic whose committed offsets moved is due
    once its verdict is this old (verdict.is_due); until then it is `held`.
    """
    if gave_up is None:
        gave_up = stopped.read(instance, names.of(stopped.LAG))
    given_up: dict[str, dict[int, str]] = {}
    for (name, p), why in gave_up.items():
        given_up.setdefault(name, {})[p] = why
    now = time.time()
    out = Evaluated()
    params = swift.params()
    store = _Lazy(swift)  # opened only if a verdict (or a topic's incarnation) needs Swift
    try:
        with kafka.kept_clients():  # one admin and one consumer per group for every question
            listing = many.topics(kafka) if listing is None else listing
            offsets = verdict.kafka_offsets(kafka, list(topics), listing) if offsets is None else offsets
            previous = read_previous(instance, topics, names)
            order = []
            for t in topics:
                prev = previous.get(t.name, NEVER)
                why = "asked" if max_age_s is None else verdict.is_due(prev, offsets.get(t.name), now, max_age_s,
                                                                        given_up.get(t.name), moved_after_s)
                if why is None:
                    out.fresh += 1
                    if verdict.moved(prev, offsets.get(t.name)):
                        out.held.append(t.name)
                else:
                    out.due[t.name] = why
                    order.append((prev.t, t.name, t))
            order.sort(key=lambda x: x[:2])  # the stalest first
            # The current incarnation of each topic (Kafka's topic id): the one judged against Kafka's
            # offsets; an earlier one's offsets are another log's, never gaps or loss of this one.
            ids = many.topic_ids(kafka, [t.name for _, _, t in order if t.name in offsets]) if order else {}
            current = {t.name: chosen_incarnation.kafkas(
                store, _prefix(params.prefix, t), t.name, ids.get(t.name),
                (previous.get(t.name, NEVER).raw.get("archive_state") or {}).get("incarnation"))
                for _, _, t in order if t.name in offsets}  # a topic not in Kafka: no verdict of Swift's
            where = {name: f"{params.container}/{prefix}" for name, (_, prefix) in current.items()}
            wanted = {(t.name, p): o for _, _, t in order if t.name in offsets
                      for p, o in verdict.waiting(previous.get(t.name, NEVER), offsets[t.name], where[t.name]).items()}
            oldest: dict[str, dict[int, int | None]] = {}
            for (name, p), ts in many.first_timestamps(kafka, wanted).items():
                oldest.setdefault(name, {})[p] = ts
        for i, (_, name, t) in enumerate(order):
            if deadline is not None and i and time.monotonic() >= deadline:
                out.left = [n for _, n, _ in order[i:]]
                break
            prev = previous.get(name, NEVER)
            if name not in offsets:
                v = verdict.missing(t, prev)
            else:
                v = verdict.judge(t, offsets[name], oldest.get(name, {}), prev, where[name], current[name][1],
                                  store, now, given_up.get(name))
                v.state["incarnation"] = chosen_incarnation.handed_on(current[name][0], ids.get(name))
            out.evaluations.append(check_evaluation(v, names))
    finally:
        store.close()
    made = {name: now for name in out.due if name not in out.left}
    out.oldest = min((made.get(t.name, previous.get(t.name, NEVER).t) for t in topics), default=now)
    return out


def read_previous(instance: DagsterInstance, topics: Sequence[TopicConfig],
                  names: Names = DEFAULT) -> dict[str, Previous]:
    """Each topic's last verdict, from one query of the latest executions of their checks."""
    return {name: Previous.parse(t, {k: v.value for k, v in metadata.items()})
            for name, (t, metadata) in latest_verdicts(instance, topics, names).items()}


def latest_verdicts(instance: DagsterInstance, topics: Sequence[TopicConfig],
                    names: Names = DEFAULT) -> dict[str, tuple[float, dict]]:
    """Each topic's last verdict as (when, its metadata values), from one query of the latest
    executions of their checks (the monitor's own reading, and the metrics exporter's)."""
    keys = {check_key(t, names): t.name for t in topics}
    latest = instance.event_log_storage.get_latest_asset_check_execution_by_key(list(keys))
    out = {}
    for key, name in keys.items():
        record = latest.get(key)
        if record is not None and record.status not in _DONE:  # a run is evaluating it now: the one before
            records = instance.event_log_storage.get_asset_check_execution_history(key, limit=1, status=_DONE)
            record = records[0] if records else None
        evaluation = record.evaluation if record is not None else None
        if evaluation is not None:
            out[name] = (record.event.timestamp, dict(evaluation.metadata))
    return out


def check_evaluation(v: Verdict, names: Names = DEFAULT) -> AssetCheckEvaluation:
    """The verdict as Dagster shows it: a status, a description, a row per partition, and what the
    next verdict takes from it (`samples`, `archive_state`)."""
    key = check_key(v.topic, names)
    handed_on = {"samples": MetadataValue.json(v.samples), "archive_state": MetadataValue.json(v.state)}
    if v.missing:
        return AssetCheckEvaluation(
            asset_key=key.asset_key, check_name=CHECK_NAME, passed=False, severity=AssetCheckSeverity.WARN,
            description=f"WARN: topic {v.topic.name!r} is not in Kafka (deleted, or not created yet): nothing to "
                        "archive, its archive in Swift stays. Create the topic, or remove it from the topics file.",
            metadata={"status": MetadataValue.text(monitor.WARN), **handed_on})
    reports = v.reports
    status = v.status
    problems = "; ".join(f"p{r.partition}: {', '.join(r.reasons)}" for r in reports if r.reasons)
    acknowledged = "; ".join(f"p{r.partition} {_spans(r.acknowledged)}" for r in reports if r.acknowledged)
    description = f"{status}: " + (problems or "all partitions archived in order, lag normal")
    if acknowledged:
        description += f" (acknowledged loss: {acknowledged})"
    not_decoded = sum(n for r in reports for n in r.not_decoded.values())
    if not_decoded:
        description += f" ({not_decoded} records did not decode: raw bytes archived, typed columns null)"
    return AssetCheckEvaluation(
        asset_key=key.asset_key,
        check_name=CHECK_NAME,
        passed=status == monitor.OK,
        severity=AssetCheckSeverity.WARN if status == monitor.WARN else AssetCheckSeverity.ERROR,
        description=description,
        metadata={
            "status": MetadataValue.text(status),
            "partitions": MetadataValue.table([_row(r) for r in reports], schema=_COLUMNS),
            "total_lag_records": MetadataValue.int(sum(r.lag_records for r in reports)),
            "max_lag_seconds": MetadataValue.float(round(max((r.lag_seconds for r in reports), default=0.0), 1)),
            "archived_offsets": MetadataValue.int(sum(r.archived_offsets for r in reports)),
            "archived_ranges": MetadataValue.int(sum(r.archived_ranges for r in reports)),
            "acknowledged_lost_offsets": MetadataValue.int(sum(b - a for r in reports for a, b in r.acknowledged)),
            "partitions_in_error": MetadataValue.int(sum(r.status == monitor.ERROR for r in reports)),
            **_decode_metadata(reports),
            # The topic's days (assets/windows.py): records of a complete day archived late, and
            # timestamps the days left out (a clock ahead, none at all).
            **{k: MetadataValue.int(n) for k, n in (v.days or {}).items()},
            "swift_listing_requests": MetadataValue.int(v.listings),
            # Per partition: from what this evaluation started (report.start_from, or carried).
            "started_from": MetadataValue.json({str(p): s for p, s in sorted(v.started.items())}),
            **handed_on,
        },
    )


class _Lazy:
    """One Swift store for a whole evaluation, opened (authentication, container check) only if a
    verdict needs Swift: a re-evaluation of quiet topics makes no request at all."""

    def __init__(self, swift: SwiftResource):
        self._swift = swift
        self._store: Store | None = None

    def __call__(self) -> Store:
        if self._store is None:
            self._store = self._swift.store()
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


def _prefix(swift_prefix: str, topic: TopicConfig) -> str:
    return layout.join(swift_prefix, topic.prefix)


def _decode_metadata(reports: list[monitor.PartitionReport]) -> dict:
    """A typed topic's `<side>_decoded` and `<side>_not_decoded` records, over its partitions."""
    out = {}
    for side in sorted({s for r in reports for s in r.decoded}):
        out[f"{side}_decoded"] = MetadataValue.int(sum(r.decoded.get(side, 0) for r in reports))
        out[f"{side}_not_decoded"] = MetadataValue.int(sum(r.not_decoded.get(side, 0) for r in reports))
    return out


def _spans(xs) -> str:
    return ", ".join(f"[{a}, {b})" for a, b in xs)


def _row(r: monitor.PartitionReport) -> TableRecord:
    spans = _spans
    return TableRecord(
        {
            "partition": r.partition,
            "status": r.status,
            "log_start": r.log_start,
            "log_end": r.log_end,
            "committed": r.committed if r.committed is not None else -1,
            "archived_hwm": r.ahwm if r.ahwm is not None else -1,
            "ranges": r.archived_ranges,
            "lag_records": r.lag_records,
            "lag_seconds": round(r.lag_seconds, 1),
            "gaps": spans(r.gaps),
            "overlaps": spans(r.overlaps),
            "lost": spans(r.lost),
            "acknowledged_loss": spans(r.acknowledged),
            "not_decoded": sum(r.not_decoded.values()),
            "why": "; ".join(r.reasons),
        }
    )
