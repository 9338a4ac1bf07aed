"""The exporter's reading of Dagster's storage: the sensors' cursors and ticks, the monitor's latest
verdicts, the archive's batch runs and its compact runs (where each partition's unmerged ranges begin).

Nothing here reads Swift, and nothing reads more of Dagster than the monitor does: one query of
the sensors' states, one of each sensor's latest ticks, one of the latest verdicts of every topic,
two counts and two queries of runs (those created and those ended since the last refresh), and the
materialisations of each run that ended since (a few per refresh); one query of the compact runs
ended since, and the outputs of those (one an hour, on the default schedule). The counters count what
happened since the exporter started, as a Prometheus counter does (`rate()` takes restarts).
"""

from __future__ import annotations

import datetime
import time
from typing import Callable, Sequence

from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter

from matos_dagster.assets.monitor import latest_verdicts
from matos_dagster.core.metrics import compaction
from matos_dagster.core.metrics.samples import Samples
from matos_dagster.core.monitor.report import ERROR, OK, WARN
from matos_dagster.core.offsets.ranges import parse_key
from matos_dagster.core.runs import estate, heartbeat
from matos_dagster.core.topics import TopicConfig
from matos_dagster.dagster_compat import InstigatorType
from matos_dagster.names import Names
from matos_dagster.sensors import lag, monitor
from matos_dagster.turns import BATCH_TAG

VERDICT = {OK: 0, WARN: 1, ERROR: 2}
_QUEUED = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING]
_GOING = [DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]
_ENDED = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
COMPACT_RUNS_FIRST = 20


def _spans_length(text: str) -> int:
    """Offsets in `[a, b), [c, d)` (the verdict's table cells)."""
    total = 0
    for part in text.split("),"):
        part = part.strip(" [)")
        if "," in part:
            a, b = part.split(",")
            total += int(b) - int(a)
    return total


class DagsterSide:
    def __init__(self, instance: DagsterInstance, names: Names, topics: Callable[[], Sequence[TopicConfig]],
                 partitions: Callable[[], Sequence[tuple[str, int]]] = list, started: float | None = None):
        """`topics`, `partitions`: those the Kafka side found last (the verdicts to read; the partitions whose
        counters start at 0, and which wait for no operator unless the cursor says so)."""
        self.instance, self.names, self.topics, self.partitions = instance, names, topics, partitions
        self.started = time.time() if started is None else started
        self.seen_created: set[str] = set()
        self.seen_ended: set[str] = set()
        self.checked_until = self.started
        self.counts = {"requested": 0, "archived": 0, "failed": 0, "dead": 0}
        self.duration = [0, 0.0]  # count, sum
        self.records: dict[tuple[str, int], int] = {}
        self.bytes: dict[tuple[str, int], int] = {}
        self.newest: dict[tuple[str, int], tuple[int, float]] = {}  # partition -> (last offset, archived at)
        self.newest_read = False
        self.unmerged: dict[tuple[str, int], int] = {}  # partition -> unmerged_from of its latest compact run
        self.compact_seen: set[str] = set()
        self.compact_until: float | None = None  # None: the latest compact runs are read first

    def read(self, now: float | None = None) -> Samples:
        now = time.time() if now is None else now
        out = Samples()
        self._sensors(out, now)
        self._compact_runs(now)
        self._verdicts(out, now)
        self._runs(out, now)
        self._windows(out)
        return out

    def _windows(self, out: Samples) -> None:
        """The end of each windowed topic's newest complete window: one query for all their window assets."""
        from matos_dagster.assets.windows import windows_partitions

        topics = {self.names.windows_key(t): t for t in self.topics() if t.time_window != "none"}
        if not topics:
            return
        for key, event in self.instance.get_latest_materialization_events(list(topics)).items():
            if event is None or event.dagster_event is None or not event.dagster_event.partition:
                continue
            t = topics[key]
            window = windows_partitions(t).time_window_for_partition_key(event.dagster_event.partition)
            out.set("matos_windows_complete_until_timestamp_seconds", (self.names.archive, t.name),
                    window.end.timestamp())

    # The sensors: their latest ticks, and the lag sensor's cursor.
    def _sensors(self, out: Samples, now: float) -> None:
        a = self.names.archive
        wanted = {self.names.of(lag.NAME): lag.NAME, self.names.of(monitor.NAME): monitor.NAME}
        newest: dict[str, tuple] = {}  # sensor -> (tick end, duration, state): the latest of every code location
        for state in self.instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
            if state.name not in wanted:
                continue
            for tick in self.instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=5):
                if tick.end_timestamp is not None:
                    if tick.end_timestamp > newest.get(wanted[state.name], (0,))[0]:
                        newest[wanted[state.name]] = (tick.end_timestamp, tick.end_timestamp - tick.timestamp, state)
                    break
        for sensor, (end, duration, _) in newest.items():
            out.set("matos_sensor_tick_duration_seconds", (a, sensor), duration)
            out.set("matos_sensor_tick_age_seconds", (a, sensor), max(0.0, now - end))
        oldest_ms = None
        if lag.NAME in newest:
            data = newest[lag.NAME][2].instigator_data
            states = estate.read_cursor(getattr(data, "cursor", None))
            gave_up = {tp for tp, s in states.items() if estate.waits_for_operator(s)}
            for (topic, p), s in states.items():
                if estate.in_flight(s) and s.requested_ms is not None and (topic, p) not in gave_up:
                    oldest_ms = s.requested_ms if oldest_ms is None else min(oldest_ms, s.requested_ms)
            for topic, p in {*self.partitions(), *states}:
                out.set("matos_waiting_for_operator", (a, topic, p), int((topic, p) in gave_up))
        out.set("matos_oldest_range_waiting_seconds", (a,),
                0.0 if oldest_ms is None else max(0.0, now - oldest_ms / 1000))

    # The monitor's latest verdicts: one query for every topic.
    def _verdicts(self, out: Samples, now: float) -> None:
        a = self.names.archive
        for topic, (t, meta) in latest_verdicts(self.instance, list(self.topics()), self.names).items():
            out.set("matos_monitor_verdict_age_seconds", (a, topic), max(0.0, now - t))
            table = meta.get("partitions")
            for row in getattr(getattr(table, "value", None), "records", None) or ():
                d = row.data
                labels = (a, topic, d["partition"])
                out.set("matos_monitor_verdict", labels, VERDICT.get(d.get("status"), 2))
                out.set("matos_undecodable_records", labels, d.get("not_decoded") or 0)
                out.set("matos_lost_offsets", labels, _spans_length(d.get("lost") or ""))
                out.set("matos_acknowledged_lost_offsets", labels, _spans_length(d.get("acknowledged_loss") or ""))
            state = getattr(meta.get("archive_state"), "value", None)
            if isinstance(state, dict):
                unmerged = {p: at for (t, p), at in self.unmerged.items() if t == topic}
                n = compaction.backlog(state, unmerged)
                if n is not None:
                    out.set("matos_compaction_backlog_offsets", (a, topic), n)

    # The compact runs: where each partition's unmerged ranges begin (core/metrics/compaction.py).
    def _compact_runs(self, now: float) -> None:
        job = {"job_name": self.names.of("compact"), "statuses": [DagsterRunStatus.SUCCESS],
               "tags": self.names.run_tags}
        if self.compact_until is None:
            # Before any: the latest runs, enough for a scheduled run of every topic among runs of one.
            records = self.instance.get_run_records(RunsFilter(**job), limit=COMPACT_RUNS_FIRST)
        else:  # then those ended since a little before the last refresh, as the batch runs
            after = datetime.datetime.fromtimestamp(self.compact_until - 60, datetime.timezone.utc)
            records = self.instance.get_run_records(RunsFilter(**job, updated_after=after))
        self.compact_until = now
        seen_before, self.compact_seen = self.compact_seen, {r.dagster_run.run_id for r in records}
        for record in sorted(records, key=lambda r: r.end_time or 0):  # the latest last
            if record.dagster_run.run_id in seen_before:
                continue
            for r in self.instance.get_records_for_run(record.dagster_run.run_id,
                                                       of_type=DagsterEventType.STEP_OUTPUT).records:
                event = r.event_log_entry.dagster_event
                value = event.step_output_data.metadata.get("unmerged_from") if event is not None else None
                for topic, parts in (getattr(value, "value", None) or {}).items():
                    for p, at in parts.items():
                        self.unmerged[(topic, int(p))] = int(at)

    # The archive's batch runs.
    def _runs(self, out: Samples, now: float) -> None:
        a = self.names.archive
        tags = {BATCH_TAG: "true", **self.names.run_tags}
        out.set("matos_runs", (a, "queued"), self.instance.get_runs_count(RunsFilter(tags=tags, statuses=_QUEUED)))
        out.set("matos_runs", (a, "in_progress"), self.instance.get_runs_count(RunsFilter(tags=tags, statuses=_GOING)))
        # The runs created, and those ended, since a little before the last refresh (storage clocks and
        # commits are not instant): each query reads a refresh's worth of runs, however long the exporter
        # runs. A run in two windows is counted once: the ids of the last window are kept, no more.
        # (Run storage keeps update times in whole seconds: the exporter's start, a second early.)
        after = datetime.datetime.fromtimestamp(max(self.started - 1, self.checked_until - 60), datetime.timezone.utc)
        self.checked_until = now
        created = self.instance.get_run_records(RunsFilter(tags=tags, created_after=after))
        for record in created:
            run = record.dagster_run
            if run.run_id not in self.seen_created and self.names.owns(run):
                self.counts["requested"] += int(run.tags.get("matos/ranges", "1"))
        self.seen_created = {r.dagster_run.run_id for r in created}
        ended = self.instance.get_run_records(RunsFilter(tags=tags, statuses=_ENDED, updated_after=after))
        seen_before, self.seen_ended = self.seen_ended, {r.dagster_run.run_id for r in ended}
        for record in ended:
            run = record.dagster_run
            if run.run_id in seen_before or not self.names.owns(run):
                continue
            archived = self._materialised(run.run_id)
            self.counts["archived"] += archived
            if run.status != DagsterRunStatus.SUCCESS:
                self.counts["failed"] += max(0, int(run.tags.get("matos/ranges", "1")) - archived)
            if record.start_time is not None and record.end_time is not None:
                self.duration[0] += 1
                self.duration[1] += record.end_time - record.start_time
            end = record.end_time or now
            if run.status == DagsterRunStatus.FAILURE and heartbeat.is_dead(
                    run.tags, end, heartbeat.Thresholds.from_settings().dead_after_s):
                self.counts["dead"] += 1
        if not self.newest_read:
            self._latest_materialisations()
        for name, key in (("matos_ranges_requested_total", "requested"), ("matos_ranges_archived_total", "archived"),
                          ("matos_ranges_failed_total", "failed"), ("matos_runs_dead_total", "dead")):
            out.set(name, (a,), self.counts[key])
        out.set("matos_batch_run_duration_seconds", (a,), tuple(self.duration))
        for topic, p in {*self.partitions(), *self.records}:  # counters start at 0, so that rate() has a start
            out.set("matos_archived_records_total", (a, topic, p), self.records.get((topic, p), 0))
            out.set("matos_archived_bytes_total", (a, topic, p), self.bytes.get((topic, p), 0))
        for (topic, p), (offset, at) in self.newest.items():
            out.set("matos_newest_archived_offset", (a, topic, p), offset)
            out.set("matos_newest_archived_timestamp_seconds", (a, topic, p), at)

    def _materialised(self, run_id: str) -> int:
        """Count the run's archived ranges into the partitions' counters; how many it archived."""
        records = self.instance.get_records_for_run(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION).records
        n = 0
        for r in records:
            event = r.event_log_entry.dagster_event
            if event is None or not event.partition:
                continue
            n += 1
            self._archived(event.partition, event.event_specific_data.materialization.metadata, r.timestamp,
                           count=True)
        return n

    def _archived(self, key: str, metadata: dict, at: float, count: bool) -> None:
        try:
            r = parse_key(key)
        except ValueError:
            return
        tp = (r.topic, r.partition)
        value = {k: getattr(v, "value", v) for k, v in metadata.items()}
        if count:
            self.records[tp] = self.records.get(tp, 0) + int(value.get("records") or 0)
            self.bytes[tp] = self.bytes.get(tp, 0) + int(value.get("bytes") or 0)
        at = float(value.get("archived_at") or at)
        if tp not in self.newest or r.end - 1 >= self.newest[tp][0]:
            self.newest[tp] = (r.end - 1, at)

    def _latest_materialisations(self) -> None:
        """Before any run ended: each topic's latest archived range (one query for all topics)."""
        topics = list(self.topics())
        if not topics:
            return
        self.newest_read = True
        keys = [self.names.asset_key(t) for t in topics]
        for event in self.instance.get_latest_materialization_events(keys).values():
            if event is not None and event.dagster_event is not None and event.dagster_event.partition:
                m = event.asset_materialization
                self._archived(event.dagster_event.partition, m.metadata if m else {}, event.timestamp, count=False)
