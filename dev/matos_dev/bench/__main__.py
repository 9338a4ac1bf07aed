"""`python -m matos_dev.bench [--quick] [--repeat N] [--out DIR] [--latency] [--history]` (`make bench`).

Full setting: W1 = 1,000,000 records of 1 KiB, W2 = 5,000,000 records of 100 B (16-byte keys,
one header, 4 partitions), memory at W1 and 4×W1, then the typed workloads (bench/typed.py:
1,000,000 Avro and JSON events of 1 KiB; `--no-typed` skips them). `--quick`: 100,000 and
200,000 records, 20,000 events. Writes DIR/results.json, DIR/results.md and DIR/throughput.png
(and DIR/typed.json, DIR/typed.md). Each throughput path also counts the CPU-seconds of its own
processes and of the Kafka and Swift servers (`report.cpu`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

from matos_dagster.core.topics import TopicConfig
from matos_dev.bench import paths, report, spark_kafka, unwind_on_sigterm
from matos_dev.bench.chart import throughput_png
from matos_dev.bench.stack import SETTINGS, Workload, cache_dir, produce_workload, running_stack
from matos_dev.stack.kafka import kafka_classpath

# The load job's own producer settings (jobs/load.py), given to ProducerPerformance too.
PRODUCER = {"acks": "all", "enable.idempotence": "true", "linger.ms": "20", "batch.size": "1000000",
            "compression.type": "lz4"}
MIB = 1024**2


def say(msg: str) -> None:
    print(f"bench [{time.strftime('%H:%M:%S')}]: {msg}", flush=True)


def settle() -> None:
    """Write back the page cache's dirty data before a timed path.

    Producing the workloads leaves gigabytes of Kafka's log unwritten, and every path writes
    more (Swift's objects); Swift's object server fsyncs each object, and on ext4 (data=ordered)
    an fsync's journal commit can wait for other files' dirty data. So each timed path starts
    with no other path's writeback pending. (A slow W1 archive, 44.8 s, was first suspected to
    be this; it was the slice consumer's fetch backoff, see slice_task.py.)
    """
    os.sync()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m matos_dev.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small setting: W1 100,000 and W2 200,000 records")
    p.add_argument("--out", default=".bench", help="folder for results.json, results.md, throughput.png (.bench/)")
    p.add_argument("--repeat", type=int, default=3,
                   help="repeats of each measurement (default 3; --history: rounds over every N)")
    p.add_argument("--cores", type=int, default=os.cpu_count() or 2, help="cores Spark gets (default: all)")
    p.add_argument("--latency", action="store_true",
                   help="also measure record→manifest latency with `dagster dev` running (several minutes)")
    p.add_argument("--latency-rate", type=float, default=1000.0, help="records/s produced for --latency")
    p.add_argument("--latency-seconds", type=float, default=None, help="seconds of producing (300; quick 120)")
    p.add_argument("--no-sensor", action="store_true", help="skip the sensor tick measurement")
    p.add_argument("--history", action="store_true",
                   help="only the growth workload (bench/history.py): N = 0, 10,000, 100,000 ranges already "
                        "archived (--quick: 0 and 10,000)")
    p.add_argument("--no-month", action="store_true", help="--history without the simulated month of DAGSTER_HOME")
    p.add_argument("--history-n", type=lambda v: [int(x) for x in v.split(",")], default=None,
                   help="N values of --history, comma-separated (e.g. 0,10000,100000,1000000)")
    p.add_argument("--kept-keys", action="store_true",
                   help="--history with only the newest MATOS_KEEP_KEYS Dagster keys per N, as the retention "
                        "job leaves them (default: a key per range)")
    p.add_argument("--peer", action="store_true",
                   help="only the peer comparison (bench/peer.py): the archive and Apache Iceberg's Kafka Connect "
                        "sink on W1 and W2, the sink's latency at two commit intervals (--no-latency to skip)")
    p.add_argument("--no-latency", action="store_true", help="--peer without the sink's latency runs")
    p.add_argument("--typed", action="store_true",
                   help="only the typed workloads (bench/typed.py): 1,000,000 events of about 1 KiB (--quick: "
                        "20,000), Avro archived raw and typed, JSON typed against the Iceberg sink with JsonConverter")
    p.add_argument("--typed-records", type=int, default=None,
                   help="the typed workloads' events instead of 1,000,000 (--quick: 20,000)")
    p.add_argument("--no-typed", action="store_true", help="skip the typed workloads (bench/typed.py)")
    p.add_argument("--peer-faults", action="store_true",
                   help="--peer: also the sink and then the archive under the same faults (the Connect worker "
                        "or an archive run SIGKILLed 3 times, the broker stopped once), compared record by record")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.history:
        return history_main(args)
    if args.peer:
        from matos_dev.bench.peer import peer_main

        return peer_main(args, say)
    if args.typed:
        from matos_dev.bench.typed import typed_main

        return typed_main(args, say)
    setting = "quick" if args.quick else "full"
    sizes = SETTINGS[setting]
    out = Path(args.out).resolve()
    logs = out / "logs"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True, exist_ok=True)
    master = f"local[{args.cores}]"
    cache = cache_dir()
    jars, sk_version, spark_version = spark_kafka.fetch(cache, say=say)
    classpath = kafka_classpath(cache)
    defaults = TopicConfig("x")
    notes = [f"Slices of {defaults.slice_records:,} offsets, objects of up to {defaults.object_bytes // MIB} MiB "
             f"of records (the topic defaults); one Spark task per slice, ranges archived concurrently "
             f"(one per partition); read and write limits use {args.cores} processes, as Spark gets {args.cores} "
             "cores."]
    if sk_version != spark_version:
        notes.append(f"Spark's Kafka source: spark-sql-kafka-0-10 {spark_version} is not on Maven Central; "
                     f"used {sk_version} on Spark {spark_version}.")
    workloads = {
        "W1": Workload("W1", sizes["W1"], 1024),
        "W2": Workload("W2", sizes["W2"], 100),
        "4×W1": Workload("4xW1", 4 * sizes["W1"], 1024),
    }
    results: dict = {"setting": setting, "repeat": args.repeat, "master": master, "started": time.time(),
                     "machine_cores": os.cpu_count() or 1, "load_average": os.getloadavg(),
                     "spark": spark_version, "spark_sql_kafka": sk_version, "workloads": {}, "notes": notes,
                     "object_bytes": defaults.object_bytes}
    with running_stack() as stack:
        servers = paths.server_pids(stack)  # for the CPU accounting
        topics, setup = {}, {}
        for name, w in workloads.items():
            topic = f"bench-{w.name.lower()}-{uuid.uuid4().hex[:6]}"
            stack.create_topic(topic, w.partitions)
            say(f"producing {name}: {w.records:,} records of {w.value_bytes} B")
            setup[name] = produce_workload(stack.kafka(), topic, w)
            topics[name] = topic
        results["setup_production"] = setup
        runs: dict = {n: {"read": [], "write": [], "archive": [], "archive_python": [], "spark_kafka": []}
                      for n in ("W1", "W2")}
        memory1: list[dict] = []
        memory4: list[dict] = []
        scale = sizes["W1"] / SETTINGS["full"]["W1"]
        memory_slice = int(defaults.slice_records * scale)
        memory_object = int(defaults.object_bytes * scale)
        notes.append(f"Memory runs: slices of {memory_slice:,} offsets, objects of up to "
                     f"{memory_object / MIB:.1f} MiB of records" + (" (scaled like the records)." if scale != 1 else "."))
        produce: dict = {"load_job": [], "producer_performance": []}

        def spec(topic: str, container: str, **extra) -> dict:
            params = stack.swift_params(container)
            return {"master": master, "cores": args.cores, "bootstrap": stack.bootstrap, "topic": topic,
                    "ranges": [[r.topic, r.partition, r.start, r.end] for r in stack.ranges(topic)],
                    "swift": {k: getattr(params, k) for k in params.__dataclass_fields__},
                    "group": f"bench-{uuid.uuid4().hex[:6]}", "slice_records": defaults.slice_records,
                    "object_bytes": defaults.object_bytes, "servers": servers, **extra}

        for rep in range(args.repeat):
            for name in ("W1", "W2"):
                topic = topics[name]
                slices = [s for r in stack.ranges(topic) for s in r.slices(defaults.slice_records)]
                tag = f"{name.lower()}-{rep}-{uuid.uuid4().hex[:4]}"
                settle()
                r = paths.read_limit(stack.bootstrap, slices, args.cores, servers)
                runs[name]["read"].append(r)
                say(f"{name} #{rep + 1} read limit: {r['records']:,} records in {r['seconds']:.2f}s")

                container = f"bench-archive-{tag}"
                settle()
                a = paths.spark_run("archive", spec(topic, container, native_reader="true"), logs)
                stack.drop_container(container)
                runs[name]["archive"].append(a)
                say(f"{name} #{rep + 1} archive ({a['reader']} reader): {a['records']:,} records, {a['objects']} "
                    f"objects in {a['seconds']:.2f}s ({a['seconds_with_startup']:.1f}s with start-up), "
                    f"peak RSS {a['memory']['total'] / MIB:.0f} MiB")

                # The same archive with the Python slice reader, for the side-by-side table.
                container = f"bench-archive-python-{tag}"
                settle()
                ap = paths.spark_run("archive", spec(topic, container, native_reader="false"), logs)
                stack.drop_container(container)
                runs[name]["archive_python"].append(ap)
                say(f"{name} #{rep + 1} archive ({ap['reader']} reader): {ap['records']:,} records in "
                    f"{ap['seconds']:.2f}s")

                container = f"bench-write-{tag}"
                settle()
                wl = paths.write_limit(stack.swift_params(container), a["object_sizes"], args.cores, servers)
                stack.drop_container(container)
                runs[name]["write"].append(wl)
                say(f"{name} #{rep + 1} write limit: {wl['bytes'] / MIB:.0f} MiB in {wl['objects']} objects "
                    f"in {wl['seconds']:.2f}s")

                container = f"bench-sparkkafka-{tag}"
                settle()
                sk = paths.spark_run("spark-kafka", spec(topic, container, spark_conf={"spark.jars": ",".join(jars)}),
                                     logs)
                stack.drop_container(container)
                if sk["records"] != a["records"]:
                    raise RuntimeError(f"Spark's Kafka source wrote {sk['records']} records, the archive {a['records']}")
                runs[name]["spark_kafka"].append(sk)
                say(f"{name} #{rep + 1} Spark Kafka source: {sk['records']:,} records in {sk['seconds']:.2f}s "
                    f"({sk['seconds_with_startup']:.1f}s with start-up)")

            # Memory is bounded by the object size, so the quick setting scales slices and objects
            # with the records: W1's ranges then span several slices and objects, as at full size.
            for name, runs_of in (("W1", memory1), ("4×W1", memory4)):
                container = f"bench-memory-{rep}-{uuid.uuid4().hex[:6]}"
                settle()
                m = paths.spark_run("archive", spec(topics[name], container, slice_records=memory_slice,
                                                    object_bytes=memory_object), logs)
                stack.drop_container(container)
                runs_of.append(m)
                say(f"memory {name} #{rep + 1}: {m['records']:,} records, {m['objects']} objects in "
                    f"{m['seconds']:.1f}s, peak RSS {m['memory']['total'] / MIB:.0f} MiB")

            w2 = workloads["W2"]
            plain = {**w2.load_config(""), "key_pattern": "", "headers": {}}
            for kind in ("load_job", "producer_performance"):
                topic = f"bench-produce-{uuid.uuid4().hex[:6]}"
                stack.create_topic(topic, w2.partitions)
                if kind == "load_job":
                    p = paths.load_job(stack.bootstrap, {**plain, "topic": topic})
                else:
                    p = paths.producer_performance(classpath, stack.bootstrap, topic, w2.records, w2.value_bytes,
                                                   PRODUCER)
                admin = stack.kafka().admin()  # must outlive the future
                admin.delete_topics([topic])[topic].result(60)
                produce[kind].append(p)
                say(f"produce #{rep + 1} {kind}: {p['records_per_s']:,.0f} records/s")

        for name in ("W1", "W2"):  # their figures: report.summarize, below
            results["workloads"][name] = {"records": workloads[name].records,
                                          "value_bytes": workloads[name].value_bytes, "runs": runs[name]}
        results["memory"] = memory_summary(memory1, memory4, memory_object)
        lj = [p["records_per_s"] for p in produce["load_job"]]
        pp = [p["records_per_s"] for p in produce["producer_performance"]]
        ratio = [a / b for a, b in zip(lj, pp)]
        results["produce"] = {"records": workloads["W2"].records, "value_bytes": workloads["W2"].value_bytes,
                              "runs": produce, "load_job": report.stats(lj),
                              "producer_performance": report.stats(pp),
                              "ratio": {"per_repeat": ratio, **report.stats(ratio)}}
        if not args.no_sensor:
            say("sensor: the lag sensor's tick over 500 topics of 4 partitions")
            from matos_dev.bench.sensor import sensor_ticks

            results["sensor"] = sensor_ticks(stack, ticks=max(5, args.repeat))
            say(f"sensor: first tick {results['sensor']['first_s']:.2f}s, slowest {results['sensor']['max_s']:.2f}s")
        if args.latency:
            from matos_dev.bench import latency

            seconds = args.latency_seconds or (120 if args.quick else 300)
            say(f"latency: dagster dev, {args.latency_rate:g} records/s for {seconds:g}s")
            results["latency"] = latency.measure(stack, logs, args.latency_rate, seconds)
            say(f"latency: median {results['latency']['median_s']}s, p95 {results['latency']['p95_s']}s")
        if not args.no_typed:  # last: its Connect worker and registry come and go on this stack
            from matos_dev.bench import typed

            results["typed"] = typed.run(stack, args, say, logs)

    results["finished"] = time.time()
    results["load_average_finished"] = os.getloadavg()
    report.summarize(results)  # every workload's figures and the targets
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    md = report.markdown(results)
    (out / "results.md").write_text(md)
    (out / "throughput.png").write_bytes(throughput_png(results))
    print(md)
    if results.get("typed"):
        from matos_dev.bench import typed

        typed.write(results["typed"], out)
    say(f"wrote {out / 'results.json'}, {out / 'results.md'}, {out / 'throughput.png'}"
        + (f", {out / 'typed.json'}, {out / 'typed.md'}" if results.get("typed") else ""))
    return 0


def history_main(args: argparse.Namespace) -> int:
    from matos_dev.bench import history

    sizes = args.history_n or ([0, 10_000] if args.quick else [0, 10_000, 100_000])
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    with running_stack() as stack:
        kept = None
        if args.kept_keys:
            from matos_dagster.core.runs.retention import Policy

            kept = Policy().keep_keys  # the default; the retention job reads MATOS_KEEP_KEYS
        results = history.run(stack, sizes, say, month=not args.no_month, repeats=args.repeat, keep_keys=kept)
        # Written before the stack's folder goes (removing N manifests' files takes a while).
        md = history.markdown(results)
        (out / "history.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
        (out / "history.md").write_text(md)
    print(md)
    say(f"wrote {out / 'history.json'}, {out / 'history.md'}")
    return 0


def memory_summary(w1: list[dict], w4: list[dict], object_bytes: int) -> dict:
    def summary(runs: list[dict]) -> dict:
        out = {"records": runs[0]["records"] if runs else 0}
        # RSS per kind; and the tree's sum of PSS, which counts pages the forked Python workers
        # share once (bench/memory.py).
        for kind in ("total", "driver_python", "jvm", "python_workers", "pss_total"):
            out[f"{kind}_mib"] = report.stats([r["memory"].get(kind, 0) / MIB for r in runs])
        # One task's memory: the largest rise of a Python worker's RSS during the timed work
        # (a worker runs one task at a time), per run; and that over object_bytes.
        tasks = [[t["above_start"] for t in r.get("task_memory", [])] for r in runs]
        out["task_mib"] = report.stats([max(t) / MIB for t in tasks if t])
        out["task_over_object_bytes"] = report.stats([max(t) / object_bytes for t in tasks if t])
        out["tasks_per_run"] = [len(t) for t in tasks]
        return out

    a, b = summary(w1), summary(w4)
    per_rep = [y["memory"]["total"] / x["memory"]["total"] for x, y in zip(w1, w4)]
    return {"W1": a, "4×W1": b, "ratio": {"per_repeat": per_rep, **report.stats(per_rep)},
            "object_bytes": object_bytes}


if __name__ == "__main__":
    unwind_on_sigterm()
    sys.exit(main())
