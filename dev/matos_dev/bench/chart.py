"""The bench's throughput chart: one horizontal grouped bar chart per workload, drawn with
matplotlib (the `bench` extra) on its Agg canvas, so no display is needed.

Each path is a group of two bars, the timed work and the same with start-up (process, JVM,
Spark session) where the path has one; the archive stands twice, once per slice reader. The
dashed line is the CPU bound of reading plus writing on the machine's cores (report.cpu).
"""

from __future__ import annotations

import io

# (label of the timed work, label with start-up or None) in report.throughput's labels
GROUPS = [
    ("read limit (confluent-kafka)", None),
    ("write limit (swiftclient)", None),
    ("archive", "archive incl. Spark start"),
    ("archive, Python reader", "archive, Python reader incl. start"),
    ("Spark Kafka source", "Spark Kafka src incl. start"),
]
NAMES = ["read limit\n(confluent-kafka)", "write limit\n(swiftclient)", "archive\n(native reader)",
         "archive\n(Python reader)", "Spark's\nKafka source"]


def _short(v: float) -> str:
    return f"{v / 1e6:.2f}M" if v >= 1e6 else f"{v / 1e3:.0f}K" if v >= 1e4 else f"{v:,.0f}"


def throughput_png(results: dict, dpi: int = 100) -> bytes:
    """The chart of `results` (as `make bench` writes them, with report.summarize's figures) as PNG bytes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    workloads = results["workloads"]
    fig = Figure(figsize=(11, 0.8 + 4.2 * len(workloads)), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    title = (f"matos-dagster bench: {results['setting']} setting, {results['repeat']} repeat(s), "
             f"Spark {results.get('master', '?')}, {results.get('machine_cores', '?')} cores")
    fig.suptitle(title)
    for ax, (name, w) in zip(fig.subplots(len(workloads), 1, squeeze=False)[:, 0], workloads.items()):
        _workload_axes(ax, name, w)
    out = io.BytesIO()
    fig.savefig(out, format="png")
    return out.getvalue()


def _workload_axes(ax, name: str, w: dict) -> None:
    t = w["throughput"]
    spread = any((t.get(label) or {}).get("rps_n", 0) > 1 for label, _ in GROUPS)
    rows = range(len(GROUPS))
    for offset, which, color, legend in ((-0.2, 0, "tab:blue", "timed work"),
                                          (0.2, 1, "tab:gray", "incl. start-up (process, JVM, session)")):
        ys, values, errors = [], [], [[], []]
        for y, labels in zip(rows, GROUPS):
            s = t.get(labels[which]) if labels[which] else None
            if not s or s.get("rps_median") is None:
                continue
            ys.append(y + offset)
            values.append(s["rps_median"])
            errors[0].append(s["rps_median"] - s["rps_min"])
            errors[1].append(s["rps_max"] - s["rps_median"])
        bars = ax.barh(ys, values, height=0.38, color=color, label=legend,
                       xerr=errors if spread else None, capsize=3)
        ax.bar_label(bars, labels=[_short(v) for v in values], padding=4, fontsize=8)
    bound = (w.get("cpu") or {}).get("bound_records_per_s", {}).get("median")
    if bound:
        ax.axvline(bound, color="tab:red", linestyle="--", linewidth=1,
                   label=f"CPU bound of read + write: {_short(bound)}")
    ax.xaxis.set_major_formatter(lambda v, _: _short(v) if v else "0")
    ax.set_yticks(list(rows), NAMES)
    ax.invert_yaxis()  # the limits first, as in results.md
    ax.set_xlabel("records/s" + (" (median; whiskers min–max)" if spread else ""))
    ax.set_title(f"{name}: {w['records']:,} records of {w['value_bytes']} B")
    ax.margins(x=0.12)
    ax.legend(loc="lower right", fontsize=8)
