"""The bench's results as figures: medians and spreads, ratios per repeat, targets met or not.

Ratios are taken within one repeat (the paths of a repeat run back to back on the same
machine state), then summarised like any other figure: median and min–max over repeats.
"""

from __future__ import annotations

import statistics

PATHS = [  # (key in a workload's results, label, which seconds)
    ("read", "read limit (confluent-kafka)", "seconds"),
    ("write", "write limit (swiftclient)", "seconds"),
    ("archive", "archive", "seconds"),
    ("archive", "archive incl. Spark start", "seconds_with_startup"),
    ("archive_python", "archive, Python reader", "seconds"),
    ("archive_python", "archive, Python reader incl. start", "seconds_with_startup"),
    ("spark_kafka", "Spark Kafka source", "seconds"),
    ("spark_kafka", "Spark Kafka src incl. start", "seconds_with_startup"),
]
READERS = (("archive", "native"), ("archive_python", "Python"))  # the archive's two paths


def stats(values: list[float]) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def _rate(run: dict, records: int, seconds_key: str) -> float:
    return records / run[seconds_key] if run[seconds_key] > 0 else 0.0


def throughput(workload: dict) -> dict:
    """Per path: records/s and record MB/s per repeat, and their stats."""
    out = {}
    archives = workload["archive"]
    for key, label, seconds_key in PATHS:
        rps, mbps = [], []
        for i, run in enumerate(workload.get(key, [])):
            # Every path moves the archive's records; the write limit moves its bytes.
            records = archives[i]["records"]
            rec_bytes = archives[i]["record_bytes"]
            r = _rate(run, records, seconds_key)
            rps.append(r)
            mbps.append(r * rec_bytes / records / 1e6 if records else 0.0)
        out[label] = {"records_per_s": rps, "mb_per_s": mbps, **{f"rps_{k}": v for k, v in stats(rps).items()},
                      "mbps_median": stats(mbps)["median"]}
    return out


def ratios(workload: dict) -> dict:
    per_rep_min_limit, per_rep_vs_spark, per_rep_vs_spark_start = [], [], []
    for read, write, arch, sk in zip(workload["read"], workload["write"], workload["archive"], workload["spark_kafka"]):
        n = arch["records"]
        a = n / arch["seconds"]
        limit = min(n / read["seconds"], n / write["seconds"])
        per_rep_min_limit.append(a / limit)
        per_rep_vs_spark.append(arch["seconds"] and sk["seconds"] / arch["seconds"])
        per_rep_vs_spark_start.append(sk["seconds_with_startup"] / arch["seconds_with_startup"])
    return {
        "archive_over_min_limit": {"per_repeat": per_rep_min_limit, **stats(per_rep_min_limit)},
        "archive_over_spark_kafka": {"per_repeat": per_rep_vs_spark, **stats(per_rep_vs_spark)},
        "archive_over_spark_kafka_with_startup": {"per_repeat": per_rep_vs_spark_start,
                                                  **stats(per_rep_vs_spark_start)},
    }


CPU_PATHS = [("read", "read limit"), ("write", "write limit"), ("archive", "archive"),
             ("archive_python", "archive, Python reader"), ("spark_kafka", "Spark Kafka source")]
CPU_PARTS = ("client", "kafka", "swift")  # the path's own processes, the broker, the Swift servers
SWIFT_SERVERS = ("proxy", "object", "container", "account")


def cpu(workload: dict, cores: int) -> dict:
    """CPU-seconds per 1,000 records per path (client, Kafka, Swift), and the CPU bound of archiving.

    Reading and writing each need CPU on the same cores, so archiving (which does both) runs at
    most at cores / (read's CPU-s per record + write's), if it does no more work per record than
    they do; `archive_cpu_over_read_plus_write` says how much more (or less) it does.
    """
    paths = {}
    for key, _ in CPU_PATHS:
        per_1k: dict[str, list] = {p: [] for p in (*CPU_PARTS, "total")}
        busy = []
        for run, arch in zip(workload.get(key, []), workload["archive"]):
            if not run.get("cpu"):
                continue
            total = sum(run["cpu"].get(p, 0.0) for p in CPU_PARTS)
            for p in CPU_PARTS:
                per_1k[p].append(1000 * run["cpu"].get(p, 0.0) / arch["records"])
            per_1k["total"].append(1000 * total / arch["records"])
            busy.append(total / run["seconds"] if run["seconds"] else None)
        paths[key] = {"s_per_1k_records": {p: {"per_repeat": v, **stats(v)} for p, v in per_1k.items()},
                      "cores_busy": {"per_repeat": busy, **stats(busy)}}
        # Spark paths: the client's CPU by process kind (driver Python, JVM, Python workers).
        kinds = [(run["cpu"]["client_kinds"], arch["records"]) for run, arch in zip(workload.get(key, []),
                 workload["archive"]) if run.get("cpu", {}).get("client_kinds")]
        if kinds:
            paths[key]["client_kinds_s_per_1k_records"] = {
                k: stats([1000 * c[k] / n for c, n in kinds]) for k in kinds[0][0]}
        # Swift's CPU by server (results from before 25 November have the sum only).
        servers = [(run["cpu"], arch["records"]) for run, arch in zip(workload.get(key, []), workload["archive"])
                   if any(g.startswith("swift/") for g in run.get("cpu") or {})]
        if servers:
            paths[key]["swift_servers_s_per_1k_records"] = {
                s: stats([1000 * c.get(f"swift/{s}", 0.0) / n for c, n in servers]) for s in SWIFT_SERVERS}
    bound, bound_over_limit = [], []
    against: dict = {key: {"over_bound": [], "cpu_over_read_plus_write": []} for key, _ in READERS}
    for i, (read, write) in enumerate(zip(workload["read"], workload["write"])):
        if not (read.get("cpu") and write.get("cpu")):
            continue
        n = workload["archive"][i]["records"]
        r, w = (sum(x["cpu"].get(p, 0.0) for p in CPU_PARTS) / n for x in (read, write))
        bound.append(cores / (r + w))
        bound_over_limit.append(bound[-1] / min(n / read["seconds"], n / write["seconds"]))
        for key, _ in READERS:  # each reader's archive of this repeat against this repeat's bound
            runs = workload.get(key, [])
            if i < len(runs) and runs[i].get("cpu") and runs[i]["seconds"]:
                a = runs[i]
                against[key]["over_bound"].append(a["records"] / a["seconds"] / bound[-1])
                against[key]["cpu_over_read_plus_write"].append(
                    sum(a["cpu"].get(p, 0.0) for p in CPU_PARTS) / a["records"] / (r + w))
    readers_vs_bound = {key: {k: {"per_repeat": v, **stats(v)} for k, v in a.items()} for key, a in against.items()}
    return {"cores": cores, "paths": paths,
            "bound_records_per_s": {"per_repeat": bound, **stats(bound)},
            "bound_over_min_limit": {"per_repeat": bound_over_limit, **stats(bound_over_limit)},
            # the native reader's archive (the default), as before; both readers in `readers`
            "archive_over_bound": readers_vs_bound["archive"]["over_bound"],
            "archive_cpu_over_read_plus_write": readers_vs_bound["archive"]["cpu_over_read_plus_write"],
            "readers": readers_vs_bound}


def readers(workload: dict, object_bytes: int) -> dict:
    """The archive with the native slice reader (`archive`) and with the Python one, per repeat.

    records/s and CPU-µs per record (the path's own processes, Kafka and Swift), one task's
    peak memory (the largest rise of a Python worker's RSS in the timed work; a worker runs
    one task at a time) in MiB and over `object_bytes` (of these runs' topic), and the Python
    reader's figures over the native one's (CPU ratio > 1: the native reader saves).
    """
    out: dict = {}
    for key, _ in READERS:
        rps, us, workers, task = [], [], [], []
        for run in workload.get(key, []):
            n = run["records"]
            rps.append(n / run["seconds"] if run["seconds"] else None)
            if run.get("cpu"):
                us.append(1e6 * sum(run["cpu"].get(p, 0.0) for p in CPU_PARTS) / n)
                kinds = run["cpu"].get("client_kinds") or {}
                workers.append(1e6 * kinds["python_workers"] / n if "python_workers" in kinds else None)
            rises = [t["above_start"] for t in run.get("task_memory") or []]
            task.append(max(rises) if rises else None)
        mib = [t / 1024**2 if t is not None else None for t in task]
        over = [t / object_bytes if t is not None else None for t in task]
        out[key] = {"task_mib": {"per_repeat": mib, **stats(mib)},
                    "task_over_object_bytes": {"per_repeat": over, **stats(over)},"records_per_s": {"per_repeat": rps, **stats(rps)},
                    "cpu_us_per_record": {"per_repeat": us, **stats(us)},
                    "python_workers_cpu_us_per_record": {"per_repeat": workers, **stats(workers)},
                    "reader": sorted({r.get("reader") or "?" for r in workload.get(key, [])})}
    pairs = list(zip(workload.get("archive", []), workload.get("archive_python", [])))
    speed = [(nat["records"] / nat["seconds"]) / (py["records"] / py["seconds"]) for nat, py in pairs
             if nat["seconds"] and py["seconds"]]
    cpu_ratio = [sum(py["cpu"].get(p, 0.0) for p in CPU_PARTS) / sum(nat["cpu"].get(p, 0.0) for p in CPU_PARTS)
                 for nat, py in pairs if nat.get("cpu") and py.get("cpu")]
    out["native_speed_over_python"] = {"per_repeat": speed, **stats(speed)}
    out["python_cpu_over_native"] = {"per_repeat": cpu_ratio, **stats(cpu_ratio)}
    return out


def readers_markdown(w: dict, names: list[str], object_bytes: int) -> list[str]:
    if not any(w[n].get("readers", {}).get("archive_python", {}).get("records_per_s", {}).get("n") for n in names):
        return []
    lines = ["", "The archive with each slice reader, side by side (same ranges, same run): records/s and its "
             "ratio to the CPU bound of read + write; CPU per record of the path's processes, Kafka and Swift, "
             "over read + write's, and the Python workers' (the Spark tasks) share; one task's peak memory "
             "(the largest rise of a Python worker's RSS during the timed work), objects of up to "
             f"{object_bytes / 1024**2:.0f} MiB:", "",
             "| workload | reader | records/s | × CPU bound | CPU µs per record | × read + write | of which Python "
             "workers | MiB per task | × object_bytes |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for n in names:
        r = w[n].get("readers")
        if not r:
            continue
        vs = (w[n].get("cpu") or {}).get("readers", {})
        for key, label in READERS:
            k, b = r[key], vs.get(key, {})
            lines.append(f"| {n} | {label} ({', '.join(k['reader'])}) | {_cell(k['records_per_s'])} | "
                         f"{_cell(b.get('over_bound', {}))} | {_cell(k['cpu_us_per_record'])} | "
                         f"{_cell(b.get('cpu_over_read_plus_write', {}))} | "
                         f"{_cell(k['python_workers_cpu_us_per_record'])} | {_cell(k.get('task_mib', {}))} | "
                         f"{_cell(k.get('task_over_object_bytes', {}))} |")
    for n in names:
        r = w[n].get("readers")
        if r and r["native_speed_over_python"]["n"]:
            lines.append("")
            lines.append(f"{n}: native reader {_cell(r['native_speed_over_python'])}× the Python reader's records/s; "
                         f"the Python reader uses {_cell(r['python_cpu_over_native'])}× the native one's CPU per record.")
    return lines


def targets(results: dict) -> list[dict]:
    out = []
    w = results["workloads"]
    for name in ("W1", "W2"):
        if name not in w:
            continue
        r = w[name]["ratios"]
        m = r["archive_over_min_limit"]
        out.append(_target(f"{name}: archive ≥ 0.8 × min(read limit, write limit)", m, lambda v: v >= 0.8, "×"))
        m = r["archive_over_spark_kafka"]
        out.append(_target(f"{name}: archive ≥ Spark's Kafka source", m, lambda v: v >= 1.0, "×"))
        # Issue 17's targets, for each slice reader: the machine's bound is what reading and
        # writing allow when they share its cores (report.cpu).
        c = w[name].get("cpu") or {}
        for key, label in READERS:
            vs = c.get("readers", {}).get(key)
            if vs and vs["over_bound"]["n"]:
                out.append(_target(f"{name}: archive ({label} reader) ≥ 0.6 × the CPU bound of read + write "
                                   f"({_num(c['bound_records_per_s']['median'])} records/s on {c['cores']} cores)",
                                   vs["over_bound"], lambda v: v >= 0.6, "×"))
                out.append(_target(f"{name}: archive ({label} reader) CPU per record ≤ 1.6 × read + write",
                                   vs["cpu_over_read_plus_write"], lambda v: v <= 1.6, "×"))
            task = w[name].get("readers", {}).get(key, {}).get("task_over_object_bytes")
            if task and task["n"]:
                out.append(_target(f"{name}: archive ({label} reader) peak memory per task ≤ 3 × object_bytes",
                                   task, lambda v: v <= 3.0, "×"))
    mem = results.get("memory")
    if mem:
        out.append(_target("peak memory at 4×W1 within 10% of W1", mem["ratio"], lambda v: v <= 1.10, "×"))
        for n in ("W1", "4×W1"):
            if mem[n].get("task_over_object_bytes", {}).get("n"):
                out.append(_target(f"{n} (memory runs, default reader): peak memory per task ≤ 3 × object_bytes",
                                   mem[n]["task_over_object_bytes"], lambda v: v <= 3.0, "×"))
    sensor = results.get("sensor")
    if sensor:
        half = sensor["timeout_s"] / 2
        out.append(_target(f"lag sensor tick, {sensor['partitions']:,} partitions, slowest ≤ {half:g} s (half of "
                           "Dagster's sensor timeout)", {"median": sensor["max_s"], "min": None, "max": None},
                           lambda v: v <= half, " s"))
    lat = results.get("latency")
    if lat and lat.get("median_s") is not None:
        out.append(_target("latency median < 60 s", {"median": lat["median_s"]}, lambda v: v < 60, " s"))
        out.append(_target("latency p95 < 120 s", {"median": lat["p95_s"]}, lambda v: v < 120, " s"))
    else:
        out.append({"target": "latency median < 60 s, p95 < 120 s", "figure": "not measured (run with --latency)",
                    "met": None})
    prod = results.get("produce")
    if prod:
        out.append(_target("load job ≥ 0.8 × ProducerPerformance", prod["ratio"], lambda v: v >= 0.8, "×"))
    return out


def _target(what: str, s: dict, ok, unit: str) -> dict:
    v = s.get("median")
    spread = f" ({_num(s['min'])}–{_num(s['max'])})" if s.get("min") is not None and s.get("max") != s.get("min") else ""
    return {"target": what, "figure": f"{_num(v)}{unit}{spread}" if v is not None else "n/a",
            "met": None if v is None else bool(ok(v))}


def _num(v) -> str:
    if v is None:
        return "n/a"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def object_bytes(results: dict) -> int:
    """The throughput runs' object size: the topic default (runs before it was recorded used it too)."""
    from matos_dagster.core.topics import TopicConfig

    return results.get("object_bytes") or TopicConfig("x").object_bytes


def summarize(results: dict) -> dict:
    """`results` with every workload's figures and the targets computed from its runs, so an
    older results.json is reported as a new one would be."""
    for w in results["workloads"].values():
        runs = w["runs"]
        w.update(throughput=throughput(runs), ratios=ratios(runs), cpu=cpu(runs, results["machine_cores"]),
                 readers=readers(runs, object_bytes(results)))
    results["targets"] = targets(results)
    return results


def _cpu_s(v) -> str:
    return "n/a" if v is None else f"{v:.4f}"


def _cell(s: dict, fmt=_num) -> str:
    if not s or s.get("median") is None:
        return "n/a"
    if s["n"] > 1:
        return f"{fmt(s['median'])} ({fmt(s['min'])}–{fmt(s['max'])})"
    return fmt(s["median"])


def markdown(results: dict) -> str:
    w = results["workloads"]
    names = [n for n in ("W1", "W2") if n in w]
    lines = [
        f"Setting: **{results['setting']}**, {results['repeat']} repeat(s), Spark `{results['master']}`; "
        "median (min–max) over repeats. Records/s of the same offset ranges; MB/s of record bytes "
        "(key + value + headers).",
        "",
        "| path | " + " | ".join(f"{n} ({w[n]['records']:,} × {w[n]['value_bytes']} B) records/s | {n} MB/s"
                                 for n in names) + " |",
        "| --- | " + " | ".join("---: | ---:" for _ in names) + " |",
    ]
    for _, label, _ in PATHS:
        if not w[names[0]]["throughput"].get(label, {}).get("rps_n"):
            continue  # a path this run did not measure (an older run: no Python reader)
        cells = []
        for n in names:
            t = w[n]["throughput"][label]
            cells.append(_cell({"median": t["rps_median"], "min": t["rps_min"], "max": t["rps_max"], "n": t["rps_n"]}))
            cells.append(_num(t["mbps_median"]))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if any(w[n].get("cpu") for n in names):
        lines += ["", "CPU-seconds per 1,000 records in the timed part, counted per process (/proc/<pid>/stat), so "
                  "other load on the machine does not count: client = the path's own processes (pool workers; "
                  "for Spark the driver, JVM and Python workers), Kafka = the broker, Swift = its four servers (and each one's share). "
                  "Cores busy = CPU-seconds / wall seconds.", "",
                  "| workload | path | client | of which driver / JVM / Python workers | Kafka | Swift "
                  "| of which proxy / object / container / account | total | cores busy |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for n in names:
            c = w[n].get("cpu")
            if not c:
                continue
            for key, label in CPU_PATHS:
                k = c["paths"][key]
                if not k["cores_busy"]["n"]:
                    continue
                kinds = k.get("client_kinds_s_per_1k_records")
                split = " / ".join(_cpu_s(kinds[kind]["median"]) for kind in ("driver_python", "jvm",
                                                                               "python_workers")) if kinds else ""
                servers = k.get("swift_servers_s_per_1k_records")
                by_server = " / ".join(_cpu_s(servers[s]["median"]) for s in SWIFT_SERVERS) if servers else ""
                cells = [_cpu_s(k["s_per_1k_records"][p]["median"]) for p in (*CPU_PARTS, "total")]
                lines.append(f"| {n} | {label} | {cells[0]} | {split} | {cells[1]} | {cells[2]} | {by_server} "
                             f"| {cells[3]} | {_num(k['cores_busy']['median'])} |")
        for n in names:
            c = w[n].get("cpu")
            if c and c["bound_records_per_s"]["n"]:
                lines.append("")
                lines.append(f"{n}: CPU bound of archiving on {c['cores']} cores = cores / (read + write CPU-s per "
                             f"record) = {_cell(c['bound_records_per_s'])} records/s, "
                             f"{_cell(c['bound_over_min_limit'])}× min(read limit, write limit); the archive reaches "
                             f"{_cell(c['archive_over_bound'])}× of it and uses "
                             f"{_cell(c['archive_cpu_over_read_plus_write'])}× the CPU per record of read + write.")
    lines += readers_markdown(w, names, object_bytes(results))
    prod = results.get("produce")
    if prod:
        lines += ["", f"Producing {prod['records']:,} records of {prod['value_bytes']} B "
                  "(no key, no header; acks=all, idempotent, lz4, linger 20 ms, batch 1 MB):", "",
                  "| producer | records/s |", "| --- | ---: |",
                  f"| load job | {_cell(prod['load_job'])} |",
                  f"| Kafka ProducerPerformance | {_cell(prod['producer_performance'])} |"]
    mem = results.get("memory")
    if mem:
        # The tree's PSS (runs that sampled it): forked Python workers' shared pages count once.
        kinds = ["total", "driver_python", "jvm", "python_workers"]
        if all(mem[n].get("pss_total_mib", {}).get("median") for n in ("W1", "4×W1")):
            kinds.append("pss_total")
        lines += ["", "Peak RSS of the archive's process tree (MiB; local mode: the executor is the driver JVM)"
                  + ("; the tree's PSS counts the pages its processes share once:" if "pss_total" in kinds else ":"), "",
                  "| workload | total | driver Python | JVM | Python workers |" + (" tree's PSS |" if "pss_total" in kinds
                                                                              else ""),
                  "| --- " + "| ---: " * len(kinds) + "|"]
        for n in ("W1", "4×W1"):
            k = mem[n]
            lines.append(f"| {n} ({k['records']:,} records) | " + " | ".join(_cell(k[f"{kind}_mib"]) for kind in kinds)
                         + " |")
        if mem["W1"].get("task_mib", {}).get("n"):
            ob = mem.get("object_bytes", 0) / 1024**2
            lines += ["", f"Peak memory of one task (the largest rise of a Python worker's RSS during the timed "
                      f"work; a worker runs one task at a time), objects of up to {ob:.1f} MiB of records:", "",
                      "| workload | MiB per task | × object_bytes |", "| --- | ---: | ---: |"]
            for n in ("W1", "4×W1"):
                k = mem[n]
                lines.append(f"| {n} | {_cell(k['task_mib'])} | {_cell(k['task_over_object_bytes'])} |")
    sensor = results.get("sensor")
    if sensor:
        lines += ["", f"Lag sensor tick over an estate of {sensor['partitions']:,} partitions ({sensor['topics']} "
                  f"topics, one pattern): first tick ({sensor['partitions']:,} ranges requested) "
                  f"{sensor['first_s']:.2f} s ({sensor['first_cpu_s']:.2f} s of the sensor's CPU); the next ticks, "
                  f"every range requested and held {_cell(stats(sensor['again_s']))} s; below the batch policy "
                  f"{_cell(stats(sensor['below_policy_s']))} s."]
    lat = results.get("latency")
    if lat and lat.get("median_s") is not None:
        lines += ["", f"Latency record → manifest in Swift (`dagster dev`, sensor every {lat['sensor_interval_s']} s, "
                  f"default batch policy, {lat['rate_per_s']:g} records/s for {lat['seconds']:g} s): "
                  f"median {lat['median_s']:.0f} s, p95 {lat['p95_s']:.0f} s, max {lat['max_s']:.0f} s "
                  f"({lat['archived']:,} of {lat['records']:,} records archived)."]
        runs = lat.get("runs")
        if runs and runs.get("archive_runs"):
            lines[-1] += (f" Runs are clients of a Spark Connect server, as with `make run`: {runs['archive_runs']} "
                          f"archive runs (and {runs['monitor_runs']} monitor runs), median {runs['queued_s']} s "
                          f"queued, {runs['starting_s']} s starting, {runs['step_s']} s archiving; "
                          f"{runs['total_s']} s from queued to done.")
    notes = results.get("notes", [])
    lines += ["", "| target | figure | met |", "| --- | --- | --- |"]
    for t in results["targets"]:
        met = {True: "met", False: "**not met**", None: "—"}[t["met"]]
        lines.append(f"| {t['target']} | {t['figure']} | {met} |")
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """`python -m matos_dev.bench.report RESULTS.json [--markdown OUT.md] [--chart OUT.png]`.

    With a results.json that holds the typed workloads, their tables go to typed.md beside OUT.md;
    a typed.json (`--typed`) gives those tables alone."""
    import argparse
    import json
    from pathlib import Path

    p = argparse.ArgumentParser(prog="python -m matos_dev.bench.report",
                                description="Tables and chart of a `make bench` run, again from its results.json.")
    p.add_argument("results", type=Path, help="results.json of a run (e.g. .bench/results.json)")
    p.add_argument("--markdown", type=Path, help="write the tables here (default: print them)")
    p.add_argument("--chart", type=Path, help="draw the throughput chart here (PNG)")
    args = p.parse_args(argv)
    results = json.loads(args.results.read_text())
    if results.get("kind") == "typed":  # a typed.json (`python -m matos_dev.bench --typed`): its tables only
        from matos_dev.bench import typed_report

        md = typed_report.markdown(typed_report.summarize(results))
        if args.markdown:
            args.markdown.write_text(md)
        else:
            print(md, end="")
        return 0
    results = summarize(results)
    md = markdown(results)
    if args.markdown:
        args.markdown.write_text(md)
        if results.get("typed"):  # the typed workloads' tables beside it (included by the performance page)
            from matos_dev.bench import typed_report

            typed = typed_report.summarize(results["typed"])
            args.markdown.with_name("typed.md").write_text(typed_report.markdown(typed))
    else:
        print(md, end="")
    if args.chart:
        from matos_dev.bench.chart import throughput_png

        args.chart.write_bytes(throughput_png(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
