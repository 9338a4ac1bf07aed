"""The Apache Iceberg Kafka Connect sink on `make bench-estate`'s estate, after our archive (`--peer`).

The sink is configured as its users configure it for an estate: `topics.regex` (the archive's
topics-file pattern), a table per topic (iceberg_connect.routed_sink_config), `tasks.max` one per
core, its commit interval (`iceberg.control.commit.interval-ms`) at each of `--peer`'s values,
the sink's default 300 s among them. Each run gets a fresh Connect worker, catalog, control
topic and connector, starts at the topics' log ends (its consumer group's offsets committed
there beforehand, so it neither reads the backlog nor misses a record), and is measured on a
steady window of its own, produced by the estate's own `steady()` once the connector's tasks
hold every partition.

Figures, the same for both systems over their steady window (estate.py's, for the archive):
each record's produce-to-committed latency (the sink's: the timestamp of the Iceberg snapshot
whose added files hold it); records/s sustained (the window's records over the seconds from its
first record produced to its last committed); CPU per record of the system's own processes
(the archive: every process of `dagster dev`'s session and the Spark Connect server; the sink:
its worker JVM), Kafka's and Swift's apart, from the window's start until its last record is
committed.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import statistics
import time
import uuid
from pathlib import Path

from matos_dagster.core.kafka import many
from matos_dev.bench import iceberg_connect as ic
from matos_dev.bench import peer
from matos_dev.bench.cpu import cpu_sample, cpu_used, tree
from matos_dev.bench.paths import server_pids

DEFAULT = "60,300"


def intervals(text: str) -> list[int]:
    """`--peer`'s value: commit intervals in seconds, comma-separated, or `none`; in ms."""
    if text.strip().lower() == "none":
        return []
    try:
        out = [int(float(x) * 1000) for x in text.split(",")]
    except ValueError:
        out = []
    if not out or min(out) <= 0:
        raise ValueError(f"--peer {text!r}: give commit intervals in seconds, e.g. --peer 60,300, or --peer none")
    return out


# ------------------------------------------------------------------------------- figures


def figures(produced: dict, when, cpu: dict[str, float]) -> dict:
    """Latency, records/s and CPU per record of a steady window: `produced` is
    {(topic, partition, offset): time sent}, `when((topic, partition), offset)` the time it was
    committed (None if never), `cpu` CPU-seconds by group ("client": the system's own)."""
    done = {k: when((k[0], k[1]), k[2]) for k in produced}
    lat = sorted(done[k] - sent for k, sent in produced.items() if done[k] is not None)
    n = len(produced)
    span = max(filter(None, done.values()), default=0) - min(produced.values(), default=0)
    return {"records": n, "not_committed": n - len(lat),
            "median_s": round(statistics.median(lat), 1) if lat else None,
            "p95_s": round(lat[min(len(lat) - 1, round(0.95 * (len(lat) - 1)))], 1) if lat else None,
            "max_s": round(lat[-1], 1) if lat else None,
            "records_per_s": round(len(lat) / span, 1) if lat and span > 0 else None,
            "cpu_ms_per_record": {g: round(1000 * cpu.get(g, 0.0) / n, 3) if n else None
                                  for g in ("client", "kafka", "swift")}}


class ArchiveCpu:
    """CPU of the archive's own processes (`dagster dev`'s session, the Spark Connect server) and
    of Kafka and Swift, between `start` and `stop`."""

    def __init__(self, stack, spark_pid: int | None):
        self.servers, self.spark_pid, self.first = server_pids(stack), spark_pid, None

    def groups(self, dev) -> dict[str, list[int]]:
        own = [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit() and dev.owns(int(e.name))]
        return {"client": own + (tree(self.spark_pid) if self.spark_pid else []), **self.servers}

    def start(self, dev) -> None:
        self.first = cpu_sample(self.groups(dev))

    def stop(self, dev) -> dict[str, float]:
        return cpu_used(self.first, cpu_sample(self.groups(dev)))


# ---------------------------------------------------------------------------- the sink


def estate_topics(kafka, pattern: str) -> dict[str, list[int]]:
    return {t: p for t, p in sorted(many.topics(kafka).items()) if re.fullmatch(pattern, t)}


def wait_assigned(worker: ic.ConnectWorker, connector: str, kafka, partitions: int, timeout: float = 600) -> None:
    """Until the connector's consumer group holds every partition (its tasks read from then on)."""
    group = f"connect-{connector}"
    deadline = time.monotonic() + timeout
    admin = kafka.admin()
    while time.monotonic() < deadline:
        peer.check_running(worker, connector)
        with contextlib.suppress(Exception):  # the group is not there yet
            d = admin.describe_consumer_groups([group])[group].result()
            held = sum(len(m.assignment.topic_partitions or []) for m in d.members)
            if held >= partitions:
                return
        time.sleep(1)
    raise peer.PeerFailed(f"the sink's tasks did not hold the {partitions} partitions within {timeout:.0f} s; "
                          f"see {worker.log_file}")


class Tables:
    """The tables' committed record counts, from the sqlite catalog: a table is loaded (its metadata
    read from Swift) only when its metadata location changed, so polling costs Swift little."""

    def __init__(self, catalog: ic.Catalog, cat):
        self.catalog, self.cat, self.locations, self.counts = catalog, cat, {}, {}

    def committed(self) -> int:
        with sqlite3.connect(self.catalog.sqlite_file, timeout=60) as db:
            rows = db.execute("SELECT table_namespace, table_name, metadata_location FROM iceberg_tables").fetchall()
        for namespace, name, location in rows:
            table = f"{namespace}.{name}"
            if self.locations.get(table) != location:
                self.locations[table] = location
                self.counts[table] = ic.committed_records(self.cat, table)
        return sum(self.counts.values())


def sink_run(stack, folder: Path, pattern: str, interval_ms: int, tasks: int, workload, say=print) -> dict:
    """One run of the sink on the estate's topics: `workload(kafka, topics)` produces its steady
    window ({(topic, partition, offset): time sent}); the window's figures."""
    kafka = stack.kafka()
    topics = estate_topics(kafka, pattern)
    tables = {t: peer.table_name(t) for t in topics}
    tps = [(t, p) for t, parts in topics.items() for p in parts]
    worker, catalog, cat, control = peer.sink_setup(stack, folder, list(tables.values()), say)
    config = ic.routed_sink_config(pattern, tables, catalog, control, tasks, interval_ms)
    connector = f"iceberg-estate-{uuid.uuid4().hex[:6]}"
    servers = server_pids(stack)
    try:
        worker.start()
        # A fresh group starting at the log ends: Connect and the sink's tasks seek to its offsets.
        many.commit(kafka, f"connect-{connector}", {tp: hi for tp, (_lo, hi) in many.watermarks(kafka, tps).items()})
        worker.put_connector(connector, config)
        wait_assigned(worker, connector, kafka, len(tps))
        groups = {"client": [worker.pid], **servers}
        cpu0 = cpu_sample(groups)
        say(f"Iceberg sink, commit every {interval_ms / 1000:g} s: {len(topics)} tables; producing")
        produced = workload(kafka, list(topics))
        watch = Tables(catalog, cat)
        deadline = time.monotonic() + 3 * interval_ms / 1000 + 600
        while watch.committed() < len(produced) and time.monotonic() < deadline:
            peer.check_running(worker, connector)
            time.sleep(1)
        cpu = cpu_used(cpu0, cpu_sample(groups))
        timeouts = peer.commit_timeouts(worker.log_file.read_text(errors="replace"))
    finally:
        with contextlib.suppress(Exception):
            worker.stop()
    first = {(topic, p, o): at for topic, table in tables.items()
             for (p, o), at in peer.commit_times(cat, table).items()}
    out = figures(produced, lambda tp, o: first.get((*tp, o)), cpu)
    snapshots = sum(len(cat.load_table(t).snapshots()) for t in tables.values())
    return {**out, "commit_interval_ms": interval_ms, "tasks": tasks, "tables": len(tables),
            "snapshots": snapshots, "commit_timeouts": timeouts, "log": str(worker.log_file)}


def side_by_side(stack, folder: Path, pattern: str, interval_list: list[int], tasks: int, workload, say=print) -> dict:
    """The sink at each commit interval, one run after the other: {interval ms: figures}."""
    out = {}
    for ms in interval_list:
        out[str(ms)] = r = sink_run(stack, folder, pattern, ms, tasks, workload, say=say)
        say(f"Iceberg sink, commit every {ms / 1000:g} s: median {r['median_s']} s, p95 {r['p95_s']} s, "
            f"{r['not_committed']} not committed")
    return out


# ----------------------------------------------------------------------------- report


def markdown(results: list[dict]) -> str:
    """The second table of estate.md: each size's archive and sink runs, side by side."""
    rows = []
    for r in results:
        archive = r.get("steady", {})
        sides = [("archive", archive)] if "records_per_s" in archive else []
        sides += [(f"Iceberg sink, commit every {int(ms) / 1000:g} s", s) for ms, s in r.get("peer", {}).items()]
        for name, s in sides:
            c = s["cpu_ms_per_record"]
            rows.append(f"| {r['partitions']:,} ({r['topics']} × {r['per_topic']}) | {name} | {s['records']:,} | "
                        f"{s['not_committed']} | {s['median_s']} | {s['p95_s']} | {s['max_s']} | "
                        f"{s['records_per_s']} | {c['client']} | {c['kafka']} | {c['swift']} |")
    runs = [s for r in results for s in r.get("peer", {}).values()]
    if not runs:
        return ""
    return (f"\nThe Apache Iceberg Kafka Connect sink {ic.ICEBERG_VERSION} on the same estate (`topics.regex`, a "
            f"table per topic, tasks.max {runs[0]['tasks']}, a standalone worker with Kafka's "
            f"offset.flush.interval.ms of {ic.OFFSET_FLUSH_INTERVAL_MS / 1000:g} s), after the archive, each run on "
            "a steady window of its own; latency to the Iceberg commit that holds the record; CPU from the "
            "window's start until its last record is committed:\n\n"
            "| partitions | system | records | not committed | record → committed, median s | p95 s | max s | "
            "records/s | CPU-ms / record: own processes | Kafka | Swift |\n"
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n" + "\n".join(rows) + "\n")
