"""The peer path of `make bench BENCH_ARGS=--peer`: the Iceberg Kafka Connect sink on the bench's stack.

One run = a fresh Connect worker (by PID) and a fresh table, the sink over the topic's offset
ranges, timed from the connector's creation until the table's snapshot holds every record;
CPU-seconds of the worker JVM, the broker and Swift over that time; peak RSS and PSS of the worker.
"""

from __future__ import annotations

import contextlib
import statistics
import time
import uuid
from pathlib import Path

from matos_dev.bench import iceberg_connect as ic
from matos_dev.bench.fault_run import SteadyProducer, compare, read_source
from matos_dev.bench.memory import PeakSampler
from matos_dev.bench.paths import cpu_sample, cpu_used
from matos_dev.bench.stack import cache_dir


class PeerFailed(RuntimeError):
    pass


def catalog_for(stack, folder: Path) -> ic.Catalog:
    """A sqlite catalog in `folder` and a fresh bucket (Swift container) for its warehouse."""
    bucket = f"peer-{uuid.uuid4().hex[:8]}"
    conn = stack.swift_server.connection()
    try:
        conn.put_container(bucket)
    finally:
        conn.close()
    folder.mkdir(parents=True, exist_ok=True)
    return ic.Catalog(folder / "catalog.db", bucket, stack.swift_server.url, stack.swift_server.user,
                      stack.swift_server.key)


def create_control_topic(stack, name: str) -> None:
    # The sink's coordinator and workers talk over it (transactional producers); one partition
    # is what the sink's docs create.
    stack.create_topic(name, 1)


def wait_committed(worker: ic.ConnectWorker, connector: str, catalog, table: str, records: int,
                   timeout: float, on_count=None) -> float:
    """Poll the table until its snapshot holds `records`; the monotonic time it did."""
    deadline = time.monotonic() + timeout
    seen = -1
    while time.monotonic() < deadline:
        n = ic.committed_records(catalog, table)
        now = time.monotonic()
        if n != seen and on_count is not None:
            on_count(now, n)
        seen = n
        if n >= records:
            return now
        check_running(worker, connector)
        time.sleep(0.5)
    raise PeerFailed(f"the table {table} holds {seen:,} of {records:,} records after {timeout:.0f}s; "
                     f"see {worker.log_file}")


def check_running(worker: ic.ConnectWorker, connector: str) -> None:
    """Raise PeerFailed if the worker died or a task of the connector failed."""
    failed = worker.failed_tasks(connector) if worker.pid else []
    if failed:
        raise PeerFailed(f"the Iceberg sink failed: {failed[0][:3000]}")
    if worker.pid is None:
        raise PeerFailed(f"the Connect worker died; see {worker.log_file}:\n{worker.log_tail()}")


def commit_timeouts(log_text: str) -> int:
    """Commits the sink's coordinator gave up on because a task did not answer within
    iceberg.control.commit.timeout-ms (30 s): each one is a commit interval's wait spent for nothing.
    A task that has drained its topic answers only when Connect calls flush() (see
    iceberg_connect.OFFSET_FLUSH_INTERVAL_MS), so the worker's 60 s code default times out every
    commit until the next flush; Kafka's standalone config (10 s) does not."""
    return log_text.count("Commit timeout reached")


def steady_rate(counts: list[tuple[float, int]], records: int) -> float | None:
    """Records/s between the first commit that holds records and the one that holds them all:
    the sink's rate without its task start and first commit wait (None if one commit held all)."""
    nonzero = [(t, n) for t, n in counts if n > 0]
    if len(nonzero) < 2 or nonzero[0][1] >= records:
        return None
    (t_a, n_a), (t_b, n_b) = nonzero[0], nonzero[-1]
    return (n_b - n_a) / (t_b - t_a) if t_b > t_a else None


def _peer(stack, folder: Path, topic: str, partitions: int | None, commit_interval_ms: int, tasks: int, say,
          offset_flush_interval_ms: int = ic.OFFSET_FLUSH_INTERVAL_MS):
    """A fresh table, control topic and worker, and the connector's config on them (not yet started);
    a fresh `topic` too if `partitions` is given."""
    if partitions is not None:
        stack.create_topic(topic, partitions)
    table = table_name(topic)
    worker, catalog, cat, control = sink_setup(stack, folder, [table], say, offset_flush_interval_ms)
    config = ic.sink_config([topic], table, catalog, control, tasks, commit_interval_ms)
    return worker, cat, table, config


def table_name(topic: str) -> str:
    return f"bench.{topic.replace('-', '_')}"


def sink_setup(stack, folder: Path, tables: list[str], say,
               offset_flush_interval_ms: int = ic.OFFSET_FLUSH_INTERVAL_MS):
    """A fresh catalog (with `tables` created), control topic and worker (not yet started):
    (worker, catalog, pyiceberg catalog, control topic)."""
    inst = ic.install(cache_dir(), say=say)
    run = folder / f"peer-{uuid.uuid4().hex[:6]}"
    catalog = catalog_for(stack, run)
    control = f"peer-control-{uuid.uuid4().hex[:6]}"
    create_control_topic(stack, control)
    cat = catalog.pyiceberg()
    for table in tables:
        ic.create_table(cat, table)
    catalog.use_wal()
    worker = ic.ConnectWorker(run / "connect", inst, stack.bootstrap, offset_flush_interval_ms=offset_flush_interval_ms)
    return worker, catalog, cat, control


def throughput(stack, topic: str, records: int, cores: int, folder: Path, servers: dict,
               commit_interval_ms: int, timeout: float = 3600, say=print,
               offset_flush_interval_ms: int = ic.OFFSET_FLUSH_INTERVAL_MS) -> dict:
    """One timed run of the sink over all of `topic`; records/s, CPU, peak RSS and PSS, files.

    `offset_flush_interval_ms` is the worker's: how often a task that has drained the topic
    answers the sink's commit requests (see iceberg_connect.OFFSET_FLUSH_INTERVAL_MS)."""
    worker, cat, table, config = _peer(stack, folder, topic, None, commit_interval_ms, cores, say,
                                       offset_flush_interval_ms=offset_flush_interval_ms)
    connector = f"iceberg-{uuid.uuid4().hex[:6]}"
    try:
        startup = worker.start()
        pid = worker.pid
        groups = {"client": [pid], **servers}
        with PeakSampler(pid) as mem:
            cpu0 = cpu_sample(groups)
            t0 = time.monotonic()
            worker.put_connector(connector, config)
            counts: list[tuple[float, int]] = []
            t1 = wait_committed(worker, connector, cat, table, records, timeout,
                                on_count=lambda t, n: counts.append((t, n)))
            cpu = cpu_used(cpu0, cpu_sample(groups))
        files = ic.table_files(cat, table)
        got = ic.committed_records(cat, table)
        timeouts = commit_timeouts(worker.log_file.read_text(errors="replace"))
        return {"records": got, "seconds": t1 - t0, "steady": steady_rate(counts, records), "startup_s": startup, "seconds_with_startup": t1 - t0 + startup,
                "cpu": cpu, "memory": {k: mem.peaks[k] for k in ("total", "pss_total")}, "files": files,
                "commit_interval_ms": commit_interval_ms, "offset_flush_interval_ms": offset_flush_interval_ms,
                "commit_timeouts": timeouts, "log": str(worker.log_file)}
    finally:
        with contextlib.suppress(Exception):
            worker.stop()



# ---------------------------------------------------------------------------------- latency


def commit_times(cat, table: str) -> dict[tuple[int, int], float]:
    """(partition, offset) -> wall time of the first snapshot that holds it (snapshot timestamps).

    Each snapshot's own data files only (those it added): the sink only appends, so a record is
    first in the snapshot that added its file, and each file is read once however many snapshots
    follow (scanning every snapshot whole read the table's early files once per later commit)."""
    t = cat.load_table(table)
    first: dict[tuple[int, int], float] = {}
    for snap in sorted(t.snapshots(), key=lambda s: s.sequence_number or 0):
        at = snap.timestamp_ms / 1000
        for p, o in added_offsets(t, snap):
            first.setdefault((p, o), at)
    return first


def added_offsets(t, snap) -> list[tuple[int, int]]:
    """(kafka_partition, kafka_offset) of the rows in the data files `snap` added to table `t`."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan
    from pyiceberg.manifest import ManifestContent, ManifestEntryStatus
    from pyiceberg.table import FileScanTask

    tasks = [FileScanTask(e.data_file) for m in snap.manifests(t.io)
             if m.content == ManifestContent.DATA and m.added_snapshot_id == snap.snapshot_id
             for e in m.fetch_manifest_entry(t.io)
             if e.status == ManifestEntryStatus.ADDED and e.snapshot_id == snap.snapshot_id]
    if not tasks:
        return []
    rows = ArrowScan(t.metadata, t.io, t.schema().select("kafka_partition", "kafka_offset"),
                     AlwaysTrue()).to_table(tasks)
    return list(zip(rows.column("kafka_partition").to_pylist(), rows.column("kafka_offset").to_pylist()))


def latency(stack, folder: Path, rate: float, seconds: float, commit_interval_ms: int, cores: int,
            value_bytes: int = 1024, partitions: int = 4, say=print) -> dict:
    """Records produced at `rate` for `seconds`; each one's time from produced to committed in the table."""
    import os as _os

    topic = f"peer-latency-{uuid.uuid4().hex[:6]}"
    worker, cat, table, config = _peer(stack, folder, topic, partitions, commit_interval_ms, cores, say)
    produced: dict[tuple[int, int], float] = {}
    try:
        worker.start()
        connector = f"iceberg-{uuid.uuid4().hex[:6]}"
        worker.put_connector(connector, config)
        producer = stack.kafka().producer(**{"linger.ms": 5})
        block = _os.urandom(value_bytes + 256)
        t0 = time.monotonic()
        i = 0
        while time.monotonic() - t0 < seconds:
            while i < int((time.monotonic() - t0) * rate):
                sent = time.time()
                producer.produce(topic, key=f"k{i:015d}".encode(), value=block[i % 256: i % 256 + value_bytes],
                                 headers=[("source", b"bench")], partition=i % partitions,
                                 on_delivery=lambda err, msg, sent=sent: err is None and produced.__setitem__(
                                     (msg.partition(), msg.offset()), sent))
                i += 1
            producer.poll(0)
            time.sleep(0.01)
        if producer.flush(60):
            raise PeerFailed("records left unsent")
        wait_committed(worker, connector, cat, table, len(produced), 3 * commit_interval_ms / 1000 + 600)
        first = commit_times(cat, table)
    finally:
        with contextlib.suppress(Exception):
            worker.stop()
    lat = sorted(first[k] - t for k, t in produced.items() if k in first)
    return {"records": len(produced), "committed": len(lat), "rate_per_s": rate, "seconds": seconds,
            "commit_interval_ms": commit_interval_ms, "snapshots": len(cat.load_table(table).snapshots()),
            "median_s": statistics.median(lat) if lat else None,
            "p95_s": lat[min(len(lat) - 1, round(0.95 * (len(lat) - 1)))] if lat else None,
            "max_s": lat[-1] if lat else None, "log": str(worker.log_file)}


# ----------------------------------------------------------------------------------- faults


def table_rows(cat, table: str) -> list[tuple[int, int, bytes]]:
    t = cat.load_table(table).scan(selected_fields=("kafka_partition", "kafka_offset", "value")).to_arrow()
    return list(zip(t.column("kafka_partition").to_pylist(), t.column("kafka_offset").to_pylist(),
                    t.column("value").to_pylist()))


def faults(stack, folder: Path, rate: float, cores: int, commit_interval_ms: int = 30_000,
           kills: int = 3, value_bytes: int = 100, partitions: int = 4, say=print) -> dict:
    """The sink under the fault schedule, with records produced at `rate` throughout: its worker
    SIGKILLed `kills` times (and started again), the broker stopped once (and started again);
    then every record of the topic compared with the table.

    Each fault comes once the sink has committed since its last start, half a commit interval
    later: then it has written files that are not committed yet, the case a crash must not lose
    or commit twice (on a loaded machine, a fixed schedule would kill it before any commit).
    """
    topic = f"peer-faults-{uuid.uuid4().hex[:6]}"
    worker, cat, table, config = _peer(stack, folder, topic, partitions, commit_interval_ms, cores, say)
    connector = f"iceberg-{uuid.uuid4().hex[:6]}"
    events: list[dict] = []
    producer = SteadyProducer(stack, topic, rate, value_bytes, partitions)

    def after_a_commit(since: int) -> None:
        deadline = time.monotonic() + 3 * commit_interval_ms / 1000 + 300
        while ic.committed_records(cat, table) <= since and time.monotonic() < deadline:
            time.sleep(1)
        time.sleep(commit_interval_ms / 2000)

    waited = None
    try:
        worker.start()
        worker.put_connector(connector, config)
        started = time.monotonic()
        producer.start()
        schedule = ["kill"] * kills
        schedule.insert(min(2, len(schedule)), "broker")
        committed = 0
        for kind in schedule:
            after_a_commit(committed)
            committed = ic.committed_records(cat, table)
            t = round(time.monotonic() - started, 1)
            if kind == "kill":
                worker.kill()
                events.append({"fault": "Connect worker SIGKILL", "at_s": t, "committed_before": committed})
                worker.start()
                worker.put_connector(connector, config)  # standalone keeps no connector config
            else:
                stack.kafka_server.stop()
                events.append({"fault": "broker stopped", "at_s": t, "committed_before": committed})
                time.sleep(10)
                stack.kafka_server.start()
            say(f"peer faults: {events[-1]}")
        time.sleep(commit_interval_ms / 1000)  # records keep coming after the last fault
        producer.stop()
        source = read_source(stack, topic)
        try:
            wait_committed(worker, connector, cat, table, len(source), 3 * commit_interval_ms / 1000 + 600)
        except PeerFailed as e:  # lost records, or a failed task: compared and reported all the same
            waited = str(e)[:2000]
        # One more commit interval: a duplicate can come with a later commit.
        time.sleep(commit_interval_ms / 1000 + 5)
        result = compare(source, table_rows(cat, table))
    finally:
        producer.stop()
        with contextlib.suppress(Exception):
            worker.stop()
    return {**result, "produced": producer.sent, "produced_s": producer.seconds, "faults": events,
            "wait_error": waited,
            "commit_interval_ms": commit_interval_ms, "rate_per_s": rate,
            "snapshots": len(cat.load_table(table).snapshots()), "log": str(worker.log_file)}


# -------------------------------------------------------------------------- make bench --peer

# Throughput runs commit every 10 s, not at the sink's 5-minute default: at 5 minutes a W1 run would
# be mostly waiting for the commit. The latency runs use both the default and BATCH_INTERVAL_MS.
THROUGHPUT_INTERVAL_MS = 10_000
# Our batch policy cuts a range when it is 20 s old and the sensor looks every 30 s: 30 s.
BATCH_INTERVAL_MS = 30_000
MIB = 1024**2


def _archive_spec(stack, args, topic: str, container: str, servers: dict) -> dict:
    from matos_dagster.core.topics import TopicConfig

    d = TopicConfig("x")
    params = stack.swift_params(container)
    return {"master": f"local[{args.cores}]", "cores": args.cores, "bootstrap": stack.bootstrap, "topic": topic,
            "ranges": [[r.topic, r.partition, r.start, r.end] for r in stack.ranges(topic)],
            "swift": {k: getattr(params, k) for k in params.__dataclass_fields__},
            "group": f"bench-{uuid.uuid4().hex[:6]}", "slice_records": d.slice_records,
            "object_bytes": d.object_bytes, "servers": servers}


def peer_main(args, say) -> int:
    """`python -m matos_dev.bench --peer`: archive and sink side by side, then latency and faults."""
    import json
    import os

    from matos_dev.bench import paths, report
    from matos_dev.bench.stack import SETTINGS, Workload, produce_workload, running_stack

    sizes = SETTINGS["quick" if args.quick else "full"]
    out = Path(args.out).resolve()
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    ic.install(cache_dir(), say=say)
    results: dict = {"setting": "quick" if args.quick else "full", "repeat": args.repeat, "cores": args.cores,
                     "started": time.time(), "load_average": os.getloadavg(), "iceberg": ic.ICEBERG_VERSION,
                     "connect": ic.CONNECT_VERSION, "throughput_commit_interval_ms": THROUGHPUT_INTERVAL_MS,
                     "workloads": {}}
    with running_stack() as stack:
        servers = paths.server_pids(stack)
        for name, value_bytes in (("W1", 1024), ("W2", 100)):
            w = Workload(name, sizes[name], value_bytes)
            topic = f"bench-{name.lower()}-{uuid.uuid4().hex[:6]}"
            stack.create_topic(topic, w.partitions)
            say(f"producing {name}: {w.records:,} records of {value_bytes} B")
            produce_workload(stack.kafka(), topic, w)
            runs: dict = {"archive": [], "peer": [], "peer_tuned": []}
            for rep in range(args.repeat):
                container = f"bench-archive-{name.lower()}-{rep}-{uuid.uuid4().hex[:4]}"
                a = paths.spark_run("archive", _archive_spec(stack, args, topic, container, servers), logs)
                stack.drop_container(container)
                runs["archive"].append(a)
                say(f"{name} #{rep + 1} archive: {a['records'] / a['seconds']:,.0f} records/s")
                p = throughput(stack, topic, w.records, args.cores, logs, servers, THROUGHPUT_INTERVAL_MS, say=say)
                runs["peer"].append(p)
                say(f"{name} #{rep + 1} Iceberg sink: {p['records'] / p['seconds']:,.0f} records/s "
                    f"(steady {format(p['steady'], ',.0f') if p['steady'] else 'n/a: one commit held all'}), "
                    f"{p['files']['files']} files")
                # The same with the one worker setting that lets a drained task answer commits at once.
                t = throughput(stack, topic, w.records, args.cores, logs, servers, THROUGHPUT_INTERVAL_MS, say=say,
                               offset_flush_interval_ms=ic.TUNED_OFFSET_FLUSH_INTERVAL_MS)
                runs["peer_tuned"].append(t)
                say(f"{name} #{rep + 1} Iceberg sink, tuned: {t['records'] / t['seconds']:,.0f} records/s")
            results["workloads"][name] = {"records": w.records, "value_bytes": value_bytes, "runs": runs,
                                          "summary": summarize(runs)}
        if not args.no_latency:
            seconds = args.latency_seconds or (120 if args.quick else 300)
            results["latency"] = {}
            for interval in (ic.DEFAULT_COMMIT_INTERVAL_MS, BATCH_INTERVAL_MS):
                say(f"peer latency: {args.latency_rate:g} records/s for {seconds:g}s, commit every {interval / 1000:g}s")
                results["latency"][str(interval)] = latency(stack, logs, args.latency_rate, seconds, interval,
                                                            args.cores, say=say)
        if args.peer_faults:
            from matos_dev.bench.archive_faults import archive_faults

            rate = 500 if args.quick else 1000
            say("peer faults: Connect worker SIGKILLed 3 times, broker stopped once")
            results["faults"] = f = faults(stack, logs, rate, args.cores, commit_interval_ms=BATCH_INTERVAL_MS, say=say)
            # The same schedule, rate and time for the archive; its sensor looks as often as the sink commits.
            say("archive faults: an archive run SIGKILLed 3 times, broker stopped once")
            results["archive_faults"] = archive_faults(stack, logs, rate, seconds=f["produced_s"],
                                                       sensor_interval_s=BATCH_INTERVAL_MS / 1000, say=say)
    results["finished"] = time.time()
    (out / "peer.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    md = markdown(results, report)
    (out / "peer.md").write_text(md)
    print(md)
    say(f"wrote {out / 'peer.json'}, {out / 'peer.md'}")
    return 0


def summarize(runs: dict) -> dict:
    """Per path: records/s, CPU-s per 1,000 records per process, peak sums of RSS and of PSS; medians
    over repeats."""
    out = {}
    for path, rs in runs.items():
        if not rs:
            continue
        rate = [r["records"] / r["seconds"] for r in rs]
        cpu = {k: statistics.median([1000 * r["cpu"].get(k, 0.0) / r["records"] for r in rs])
               for k in ("client", "kafka", "swift")}
        cpu["total"] = sum(cpu.values())
        out[path] = {"records_per_s": statistics.median(rate), "records_per_s_min": min(rate),
                     "records_per_s_max": max(rate), "cpu_s_per_1k": cpu,
                     "peak_rss_mib": statistics.median([r["memory"]["total"] / MIB for r in rs])}
        if all(r["memory"].get("pss_total") for r in rs):
            out[path]["peak_pss_mib"] = statistics.median([r["memory"]["pss_total"] / MIB for r in rs])
        steady = [r["steady"] for r in rs if r.get("steady")]
        if steady:
            out[path]["steady_records_per_s"] = statistics.median(steady)
        if path.startswith("peer"):
            out[path]["files"] = statistics.median([r["files"]["files"] for r in rs])
    return out


def markdown(results: dict, report=None) -> str:
    lines = [f"Peer: Apache Iceberg Kafka Connect sink {results['iceberg']} on Kafka Connect {results['connect']} "
             f"(standalone, tasks.max = {results['cores']}), setting **{results['setting']}**, "
             f"{results['repeat']} repeat(s), medians; sink commit interval "
             f"{results['throughput_commit_interval_ms'] / 1000:g} s in the throughput runs; worker "
             f"offset.flush.interval.ms {ic.OFFSET_FLUSH_INTERVAL_MS / 1000:g} s (Kafka's standalone config), "
             f"tuned: {ic.TUNED_OFFSET_FLUSH_INTERVAL_MS / 1000:g} s.", "",
             "| workload | path | records/s | CPU-s / 1,000 records: client | Kafka | Swift | total | "
             "peak MiB, sum of PSS | sum of RSS |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    ratios = []
    for name, w in results["workloads"].items():
        s = w["summary"]
        for path, label in PATH_LABELS:
            if path not in s:
                continue
            x = s[path]
            c = x["cpu_s_per_1k"]
            rate = f"{x['records_per_s']:,.0f}"
            if x.get("steady_records_per_s"):
                rate += f" (steady {x['steady_records_per_s']:,.0f})"
            lines.append(f"| {name} ({w['records']:,} × {w['value_bytes']} B) | {label} | {rate} | {c['client']:.4f} | "
                         f"{c['kafka']:.4f} | {c['swift']:.4f} | {c['total']:.4f} | {_mib(x.get('peak_pss_mib'))} | "
                         f"{_mib(x['peak_rss_mib'])} |")
        for peer, suffix in (("peer", ""), ("peer_tuned", ", sink tuned")):
            if "archive" not in s or peer not in s:
                continue
            a, p = s["archive"], s[peer]
            pss = (a["peak_pss_mib"] / p["peak_pss_mib"]) if a.get("peak_pss_mib") and p.get("peak_pss_mib") else None
            ratios.append((name + suffix, a["records_per_s"] / p["records_per_s"],
                           a["cpu_s_per_1k"]["total"] / p["cpu_s_per_1k"]["total"],
                           pss, a["peak_rss_mib"] / p["peak_rss_mib"]))
    if ratios:
        # The memory target is on PSS: the archive is a tree of forked processes sharing pages,
        # which a sum of RSS counts once per process (bench/memory.py); RSS is shown beside it.
        lines += ["", "| workload | archive / sink records/s (target ≥ 1.5) | archive / sink CPU per record (≤ 1) | "
                  "archive / sink peak memory, PSS (≤ 1) | same, RSS |", "| --- | ---: | ---: | ---: | ---: |"]
        lines += [f"| {n} | {r:.2f}× | {c:.2f}× | {'n/a' if m is None else f'{m:.2f}×'} | {rss:.2f}× |"
                  for n, r, c, m, rss in ratios]
    if results.get("latency"):
        lines += ["", "| sink latency, produced → committed | records | median s | p95 s | max s | snapshots |",
                  "| --- | ---: | ---: | ---: | ---: | ---: |"]
        for interval, l in results["latency"].items():
            lines.append(f"| commit every {int(interval) / 1000:g} s | {l['committed']:,} of {l['records']:,} | "
                         f"{l['median_s']:.1f} | {l['p95_s']:.1f} | {l['max_s']:.1f} | {l['snapshots']} |")
    lines += faults_markdown(results)
    return "\n".join(lines) + "\n"


PATH_LABELS = (("archive", "archive"), ("peer", "Iceberg sink"),
               ("peer_tuned", "Iceberg sink, tuned (offset.flush.interval.ms = 1 s)"))


def _mib(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f}"


def faults_markdown(results: dict) -> list[str]:
    """The sink and the archive under the same fault schedule, side by side; each side's exact cases."""
    sides = [(label, results[k]) for k, label in (("faults", "Iceberg sink"), ("archive_faults", "archive"))
             if results.get(k)]
    if not sides:
        return []

    def at(f: dict) -> str:
        return "; ".join(f"{e['fault']} at {e['at_s']:g} s ({e['committed_before']:,} committed before)"
                         + ("" if e.get("injected", True) else " **not injected**") for e in f["faults"])

    lines = ["", "| under faults | records produced | source | rows | lost | duplicated | mismatched | verifier | faults |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for label, f in sides:
        check = f.get("verify")
        verifier = "—" if check is None else (f"clean ({check['compared']:,} compared)" if check["ok"] else "**not clean**")
        lines.append(f"| {label} | {f['produced']:,} in {f.get('produced_s', 0):.0f} s | {f['source']:,} | {f['rows']:,} | "
                     f"{f['lost']} | {f['duplicated']} | {f['mismatched']} | {verifier} | {at(f)} |")
    for label, f in sides:
        for k in ("lost_examples", "duplicated_examples", "mismatched_examples"):
            if f.get(k):
                lines.append(f"- {label}, {k.replace('_', ' ')}: {f[k]}")
    return lines
