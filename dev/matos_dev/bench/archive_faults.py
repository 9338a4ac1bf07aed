"""The archive under the peer's fault schedule (peer.faults), compared with Kafka record by record.

The archive runs as in production: `dagster dev` (dagster_dev.py) with the lag sensor, the
daemon and a Spark Connect server, the topic's default batch policy (a range at 10,000 records
or 20 s), the sensor every `sensor_interval_s` (the sink's commit interval: 30 s in the bench,
as the peer's latency run, 10 s in the test). Records are produced at a steady rate throughout
(fault_run.SteadyProducer, as for the sink), and the same schedule is applied: an archive run's
process SIGKILLed three times while it archives its range, the broker stopped 10 s once
(kill, kill, broker, kill). Nothing helps the product recover: the code server fails a run
whose worker died, the heartbeat (dead_runs.py) any it does not see, and the sensor requests
the range again.

Each fault comes once the archive has committed since the previous one. A kill goes to a run
inside its range: started, beating, its turn taken (its event log says it is archiving in Spark
tasks) and its range not committed, found by the run's own events (`LOGS_CAPTURED` names the
worker's PID) and checked to be a process of our `dagster dev` before it is killed. A fault that
finds no such run within its bound is recorded as not injected (`injected: False`), never
skipped silently.

Then, once the group's committed offsets reach the log end (bounded), every record in Kafka is
compared with what the archive holds, read back by the product's reader (reader.read_table) from
Swift, with the same `fault_run.compare` as the sink: lost, duplicated, mismatched; and the verifier
(verify_topic, every record) must find nothing wrong.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
import uuid
from pathlib import Path

from matos_dagster.core.topics import TopicConfig
from matos_dev.bench import dagster_dev
from matos_dev.bench.fault_run import SteadyProducer, compare, read_source
from matos_dev.stack.process import free_port
from matos_dev.stack.spark import SparkConnectServer

KILL = "archive run SIGKILL"
BROKER = "broker stopped"
ARCHIVING = "Spark task(s)"  # range_run.py's "archiving in N Spark task(s)": the run took its turn
BROKER_DOWN_S = 10


def schedule(kills: int = 3) -> list[str]:
    """The peer's order: kill, kill, broker, kill."""
    out = [KILL] * kills
    out.insert(min(2, len(out)), BROKER)
    return out


def archive_faults(stack, folder: Path, rate: float, seconds: float = 0, kills: int = 3, value_bytes: int = 100,
                   partitions: int = 4, sensor_interval_s: float = 30, spark_url: str | None = None,
                   find_run_s: float = 600, drain_s: float = 900, say=print) -> dict:
    """The archive under the fault schedule with records produced at `rate` for at least `seconds`
    (and until one sensor interval after the last fault); then compared with Kafka.

    `spark_url`: a running Spark Connect server; None starts one of its own (stopped at the end).
    """
    tmp = folder / f"archive-faults-{uuid.uuid4().hex[:6]}"
    tmp.mkdir(parents=True)
    spark = None
    if spark_url is None:
        spark = SparkConnectServer(tmp / "spark", port=free_port())
        spark.start()
        spark_url = spark.url
    try:
        return _run(stack, tmp, rate, seconds, kills, value_bytes, partitions, sensor_interval_s, spark_url,
                    find_run_s, drain_s, say)
    finally:
        if spark is not None:
            spark.stop()


def _run(stack, tmp: Path, rate, seconds, kills, value_bytes, partitions, sensor_interval_s, spark_url,
         find_run_s, drain_s, say) -> dict:
    from dagster import DagsterInstance

    topic = f"archive-faults-{uuid.uuid4().hex[:6]}"
    stack.create_topic(topic, partitions)
    container = f"archive-faults-{uuid.uuid4().hex[:6]}"
    cfg = TopicConfig(topic)  # the default batch policy and group
    settings = dagster_dev.stack_settings(stack, container, spark_url, sensor_interval_s)
    kafka = stack.kafka()
    parts = list(range(partitions))
    producer = SteadyProducer(stack, topic, rate, value_bytes, partitions)
    events: list[dict] = []
    with dagster_dev.running(tmp, f"topics:\n  - name: {topic}\n", settings) as dev:
        instance = DagsterInstance.from_config(str(dev.home))
        try:
            watch = _Watch(dev, instance, kafka, topic, parts, cfg.group)
            started = time.monotonic()
            producer.start()
            committed = 0
            for kind in schedule(kills):
                # On a loaded machine a fixed schedule could fault before any commit; bounded all the same.
                after_commit = watch.committed_since(committed, 3 * sensor_interval_s + 600)
                if kind == KILL:
                    event = watch.kill_a_going_run(find_run_s)
                else:
                    time.sleep(sensor_interval_s / 2)  # as the sink's: half an interval after a commit
                    event = {"fault": BROKER, "committed_before": watch.total(), "t": time.monotonic()}
                    stack.kafka_server.stop()
                    event["injected"] = True
                    time.sleep(BROKER_DOWN_S)
                    stack.kafka_server.start()
                event["at_s"] = round(event.pop("t", time.monotonic()) - started, 1)
                event["after_a_commit"] = after_commit
                events.append(event)
                committed = watch.total()
                say(f"archive faults: {event}")
            # Records keep coming one interval after the last fault, and for the sink's time at least.
            time.sleep(max(sensor_interval_s, seconds - producer.elapsed()))
            producer.stop()
            say(f"archive faults: {producer.sent:,} records produced in {producer.seconds:.0f} s; draining")
            t = time.monotonic()
            drained = watch.drained(drain_s)
            drain_took = round(time.monotonic() - t, 1)
            runs = watch.run_counts(settle_s=120)
            for event in events:
                if event.get("run_id"):
                    event["range_archived_again_after_s"] = watch.archived_again_after(event["run_id"])
        finally:
            producer.stop()
            instance.dispose()
    source = read_source(stack, topic)
    result = compare(source, archived_rows(stack, container, cfg))
    check = verify(stack, container, cfg)
    return {**result, "produced": producer.sent, "produced_s": producer.seconds, "faults": events,
            "drained": drained, "drain_s": drain_took, "verify": check, "runs": runs,
            "sensor_interval_s": sensor_interval_s, "rate_per_s": rate,
            "batch": {"records": cfg.batch_records, "age_s": cfg.batch_age_s}, "log": str(dev.log)}


def archived_rows(stack, container: str, cfg: TopicConfig) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record the archive holds, read by the product's reader."""
    from matos_dagster.core.reader import read_table
    from matos_dagster.core.swift.store import Store

    with contextlib.closing(Store(stack.swift_params(container))) as store:
        t = read_table(store, store.params.prefix, cfg.name)
    return list(zip(t.column("partition").to_pylist(), t.column("offset").to_pylist(), t.column("value").to_pylist()))


def verify(stack, container: str, cfg: TopicConfig) -> dict:
    """The verifier over the whole archive, every record compared with Kafka."""
    from matos_dagster.core.swift import layout
    from matos_dagster.core.swift.store import Store
    from matos_dagster.core.verify import verify_topic

    with contextlib.closing(Store(stack.swift_params(container))) as store:
        report = verify_topic(stack.kafka(), store, layout.join(store.params.prefix, cfg.prefix), cfg, sample=None)
    return {"ok": report.ok, "compared": report.compared, "report": "" if report.ok else report.render()[:4000]}


class _Watch:
    """What the bench reads of the running archive: the group's commits and the instance's runs."""

    def __init__(self, dev, instance, kafka, topic: str, parts: list[int], group: str):
        self.dev, self.instance, self.kafka = dev, instance, kafka
        self.topic, self.parts, self.group = topic, parts, group
        self._last = {p: 0 for p in parts}

    def committed(self) -> dict[int, int]:
        """The group's committed offset per partition (the last one read if the broker does not answer)."""
        with contextlib.suppress(Exception):
            got = self.kafka.committed(self.topic, self.parts, self.group)
            self._last = {p: got.get(p) or 0 for p in self.parts}
        return dict(self._last)

    def total(self) -> int:
        """Records committed (the topic starts at offset 0)."""
        return sum(self.committed().values())

    def committed_since(self, since: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.dev.check()
            if self.total() > since:
                return True
            time.sleep(1)
        return False

    def drained(self, timeout: float) -> bool:
        """Wait until the committed offsets reach the log end of every partition."""
        ends = {p: hi for p, (_lo, hi) in self.kafka.watermarks(self.topic, self.parts).items()}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.dev.check()
            if self.committed() == ends:
                return True
            time.sleep(2)
        return False

    def _going(self):
        """Archive runs of the topic inside their range: started, beating, archiving, range not committed."""
        from dagster import DagsterRunStatus, RunsFilter

        from matos_dagster.assets.archive import CLAIM_TAG
        from matos_dagster.core.offsets.ranges import MalformedKey, parse_key
        from matos_dagster.core.runs.heartbeat import TAG as HEARTBEAT_TAG

        committed = self.committed()
        for run in self.instance.get_runs(filters=RunsFilter(statuses=[DagsterRunStatus.STARTED])):
            if HEARTBEAT_TAG not in run.tags or CLAIM_TAG not in run.tags:
                continue
            try:
                r = parse_key(run.tags.get("dagster/partition", ""))
            except MalformedKey:
                continue
            if r.topic != self.topic or committed[r.partition] >= r.end:
                continue
            if any(ARCHIVING in (e.user_message or "") for e in self.instance.all_logs(run.run_id)):
                yield run, r

    def _worker_pid(self, run_id: str) -> int | None:
        from dagster import DagsterEventType

        for e in self.instance.all_logs(run_id, of_type=DagsterEventType.LOGS_CAPTURED):
            if m := re.search(r"pid: (\d+)", e.message or ""):
                return int(m.group(1))
        return None

    def kill_a_going_run(self, timeout: float) -> dict:
        """SIGKILL the worker of a run inside its range; what was killed, or why nothing was."""
        from dagster import DagsterRunStatus

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.dev.check()
            for run, r in self._going():
                pid = self._worker_pid(run.run_id)
                if pid is None or not self.dev.owns(pid):
                    continue
                before = self.committed()
                if before[r.partition] >= r.end or self.instance.get_run_by_id(run.run_id).status != \
                        DagsterRunStatus.STARTED:
                    continue  # it committed meanwhile: not mid-range any more
                os.kill(pid, signal.SIGKILL)
                t = time.monotonic()
                event = {"fault": KILL, "injected": True, "t": t, "run_id": run.run_id, "pid": pid,
                         "range": f"{r.partition} [{r.start}, {r.end})", "range_end": r.end, "committed_before": sum(before.values()),
                         "partition_committed_before": before[r.partition]}
                # The run must end failed: a run that ended well was not killed mid-range.
                end = time.monotonic() + 300
                while time.monotonic() < end:
                    status = self.instance.get_run_by_id(run.run_id).status
                    if status in (DagsterRunStatus.FAILURE, DagsterRunStatus.SUCCESS, DagsterRunStatus.CANCELED):
                        break
                    time.sleep(0.5)
                event["run_status_after"] = status.value
                event["run_failed_after_s"] = round(time.monotonic() - t, 1)
                return event
            time.sleep(0.5)
        return {"fault": KILL, "injected": False, "committed_before": self.total(),
                "why": f"no archive run inside its range (started, beating, archiving, not committed) within {timeout:.0f} s"}

    def archived_again_after(self, run_id: str) -> float | None:
        """Seconds from the killed run's end (its failure) to the end of a later successful run of its range."""
        from dagster import DagsterRunStatus, RunsFilter

        killed = self.instance.get_run_records(filters=RunsFilter(run_ids=[run_id]))
        if not killed or killed[0].end_time is None:
            return None
        key = killed[0].dagster_run.tags.get("dagster/partition")
        ends = [r.end_time for r in self.instance.get_run_records(
            filters=RunsFilter(tags={"dagster/partition": key}, statuses=[DagsterRunStatus.SUCCESS]))
            if r.dagster_run.run_id != run_id and r.end_time]
        return round(min(ends) - killed[0].end_time, 1) if ends else None

    def run_counts(self, settle_s: float = 0) -> dict:
        """The topic's archive runs by status (the killed ones failed, the ranges archived again),
        once none is going any more (a run that committed the last range may still be ending) or
        after `settle_s`."""
        deadline = time.monotonic() + settle_s
        while True:
            counts = self._counts()
            going = sum(n for status, n in counts.items() if status not in ("SUCCESS", "FAILURE", "CANCELED"))
            if not going or time.monotonic() > deadline:
                return counts
            time.sleep(2)

    def _counts(self) -> dict:
        from matos_dagster.core.offsets.ranges import MalformedKey, parse_key

        counts: dict[str, int] = {}
        for run in self.instance.get_runs():
            if not run.job_name.startswith("__ASSET_JOB"):
                continue  # the monitor's runs
            try:
                if parse_key(run.tags.get("dagster/partition", "")).topic != self.topic:
                    continue
            except MalformedKey:
                continue
            counts[run.status.value] = counts.get(run.status.value, 0) + 1
        return counts
