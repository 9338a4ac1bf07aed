"""The typed bench's figures (bench/typed.py): per path records/s, CPU per record, a task's memory;
the ratios its targets are on, taken within a repeat; the tables of docs/performance/typed.md.
Apart from typed.py, which runs the paths, so that report.py can write the tables of a
typed.json without importing the runs (and the peer bench they use)."""

from __future__ import annotations

import statistics

PARTITIONS = 4
SINK_COMMIT_INTERVAL_MS = 10_000  # as bench/peer.py's throughput runs
# (key of the runs, label): the order of a repeat's runs and of the tables' rows
PATHS = (("avro_raw", "Avro topic, raw archive"), ("avro_typed", "Avro topic, typed archive (avro)"),
         ("json_raw", "JSON topic, raw archive"), ("json_typed", "JSON topic, typed archive (json)"),
         ("json_sink", "JSON topic, Iceberg sink (JsonConverter)"))
CPU_PARTS = ("client", "kafka", "swift")
MIB = 1024**2


# ----------------------------------------------------------------------------- the figures


def _stats(values: list) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def rate(run: dict) -> float | None:
    return run["records"] / run["seconds"] if run.get("seconds") else None


def cpu_us(run: dict, part: str = "total") -> float | None:
    """CPU-µs per record of the path's processes ("client"), the broker, Swift, or all three."""
    cpu = run.get("cpu")
    if not cpu or not run.get("records"):
        return None
    parts = CPU_PARTS if part == "total" else (part,)
    return 1e6 * sum(cpu.get(p, 0.0) for p in parts) / run["records"]


def task_over_object(run: dict, object_bytes: int) -> float | None:
    rises = [t["above_start"] for t in run.get("task_memory") or []]
    return max(rises) / object_bytes if rises else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def summarize(results: dict) -> dict:
    """Per path: records/s, CPU µs per record (per part), task memory, peak PSS; per repeat the
    ratios the targets are on (both sides of a ratio from the same repeat), then their medians."""
    runs, ob = results["runs"], results["object_bytes"]
    paths = {}
    for key, _ in PATHS:
        rs = runs.get(key) or []
        if not rs:
            continue
        paths[key] = {"records_per_s": _stats([rate(r) for r in rs]),
                      "cpu_us": {p: _stats([cpu_us(r, p) for r in rs]) for p in (*CPU_PARTS, "total")},
                      "python_workers_us": _stats([1e6 * r["cpu"]["client_kinds"]["python_workers"] / r["records"]
                                                   for r in rs if (r.get("cpu") or {}).get("client_kinds")]),
                      "task_mib": _stats([None if task_over_object(r, ob) is None else task_over_object(r, ob) * ob / MIB
                                          for r in rs]),
                      "task_over_object_bytes": _stats([task_over_object(r, ob) for r in rs]),
                      "peak_pss_mib": _stats([r["memory"].get("pss_total", 0) / MIB or None for r in rs])}
    pairs = {"avro_typed_over_raw": ("avro_typed", "avro_raw"), "json_typed_over_sink": ("json_typed", "json_sink"),
             "json_typed_over_raw": ("json_typed", "json_raw")}
    ratios = {}
    for name, (a, b) in pairs.items():
        reps = list(zip(runs.get(a) or [], runs.get(b) or []))
        if not reps:
            continue
        ratios[name] = {"records_per_s": _stats([ratio(rate(x), rate(y)) for x, y in reps]),
                        "cpu_per_record": _stats([ratio(cpu_us(x), cpu_us(y)) for x, y in reps]),
                        "peak_pss": _stats([ratio(x["memory"].get("pss_total"), y["memory"].get("pss_total"))
                                            for x, y in reps])}
    results["summary"] = {"paths": paths, "ratios": ratios}
    results["targets"] = targets(results)
    return results


def targets(results: dict) -> list[dict]:
    """The issue's targets on the ratios of a repeat (medians over repeats). Memory per task is judged
    only with objects of the topic default's size: scaled-down objects (--quick) leave a task's
    fixed part (a Python worker's imports and buffers, about 100 MiB) to dominate."""
    s, out = results["summary"], []

    def target(what: str, stats: dict | None, ok, judged: bool = True) -> None:
        v = stats.get("median") if stats else None
        out.append({"target": what, "figure": _cell(stats, "×"), "met": None if v is None or not judged else bool(ok(v))})

    r = s["ratios"]
    if "avro_typed_over_raw" in r:
        target("Avro: typed archive ≥ 0.5 × the raw archive's records/s (same topic, cores and Swift)",
               r["avro_typed_over_raw"]["records_per_s"], lambda v: v >= 0.5)
    if "json_typed_over_sink" in r:
        target("JSON: typed archive ≥ 1.5 × the Iceberg sink's records/s", r["json_typed_over_sink"]["records_per_s"],
               lambda v: v >= 1.5)
        target("JSON: typed archive CPU per record ≤ the Iceberg sink's", r["json_typed_over_sink"]["cpu_per_record"],
               lambda v: v <= 1.0)
    full = results["object_bytes"] >= results.get("default_object_bytes", results["object_bytes"])
    for key in ("avro_typed", "json_typed"):
        p = s["paths"].get(key)
        if p and p["task_over_object_bytes"]["n"]:
            target(f"{dict(PATHS)[key]}: peak memory per task ≤ 3 × object_bytes"
                   + ("" if full else " (not judged: objects scaled down)"), p["task_over_object_bytes"],
                   lambda v: v <= 3.0, judged=full)
    return out


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def _cell(s: dict | None, unit: str = "") -> str:
    if not s or s.get("median") is None:
        return "n/a"
    if s["n"] > 1 and s["min"] != s["max"]:
        return f"{_num(s['median'])}{unit} ({_num(s['min'])}–{_num(s['max'])})"
    return f"{_num(s['median'])}{unit}"


RATIOS = {"avro_typed_over_raw": "Avro: typed archive / raw archive",
          "json_typed_over_sink": "JSON: typed archive / Iceberg sink",
          "json_typed_over_raw": "JSON: typed archive / raw archive"}


def markdown(results: dict) -> str:
    """The typed bench's tables: per path, the ratios within a repeat, the targets."""
    s, w = results["summary"], results["workload"]
    lines = [(f"Setting: **{results['setting']}**, {results['repeat']} repeat(s), {results['cores']} cores (Spark "
              f"`local[{results['cores']}]`, the sink's `tasks.max`); median (min–max) over repeats, each ratio "
              f"taken within a repeat. {results['records']:,} events of {w['leaf_fields']} fields per topic in "
              f"{PARTITIONS} partitions, 16-byte keys, one header: Avro values of {w['avro_value_bytes']:,.0f} B "
              f"on average (wire format), JSON values of {w['json_value_bytes']:,.0f} B. Objects of up to "
              f"{results['object_bytes'] / MIB:.1f} MiB of records, slices of {results['slice_records']:,} offsets; "
              f"the sink: Apache Iceberg Kafka Connect sink {results['iceberg']} on Kafka Connect "
              f"{results['connect']}, commit every {SINK_COMMIT_INTERVAL_MS / 1000:g} s."), "",
             ("| path | records/s | CPU µs per record: client | Kafka | Swift | total | of which Spark's Python "
              "workers | MiB per task | × object_bytes | peak MiB, sum of PSS |"),
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for key, label in PATHS:
        p = s["paths"].get(key)
        if p:
            c = p["cpu_us"]
            lines.append(f"| {label} | {_cell(p['records_per_s'])} | {_cell(c['client'])} | {_cell(c['kafka'])} | "
                         f"{_cell(c['swift'])} | {_cell(c['total'])} | {_cell(p['python_workers_us'])} | "
                         f"{_cell(p['task_mib'])} | {_cell(p['task_over_object_bytes'])} | "
                         f"{_cell(p['peak_pss_mib'])} |")
    lines += ["", "| ratio, within a repeat | records/s | CPU per record | peak memory (PSS) |",
              "| --- | ---: | ---: | ---: |"]
    for key, label in RATIOS.items():
        r = s["ratios"].get(key)
        if r:
            lines.append(f"| {label} | {_cell(r['records_per_s'], '×')} | {_cell(r['cpu_per_record'], '×')} | "
                         f"{_cell(r['peak_pss'], '×')} |")
    lines += ["", "| target | figure | met |", "| --- | --- | --- |"]
    met = {True: "met", False: "**not met**", None: "—"}
    lines += [f"| {t['target']} | {t['figure']} | {met[t['met']]} |" for t in results["targets"]]
    return "\n".join(lines) + "\n"
