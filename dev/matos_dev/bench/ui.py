"""The UI after a simulated year: `python -m matos_dev.bench.ui` (`make bench-ui`).

A fresh `DAGSTER_HOME` (the project's `dagster.yaml`) gets what a year at the default policy
leaves with retention: one topic of 4 partitions, `MATOS_KEEP_KEYS` (1,000) keys per partition,
a materialisation of each, and `MATOS_KEEP_RUNS` (1,000) finished runs of the archive job
(the newest keys, one run each) and as many of the monitor's job. Then a real
`dagster-webserver` on loopback, loading the project's own definitions, answers the GraphQL
queries its UI sends for the archive asset's **Overview** and **Partitions** pages, taken
verbatim (fragments included) from the webserver's UI bundle. A page is timed as a browser
loads it: its queries sent at once, until the last answer; cold (the first load after the
webserver started) and warm (median of the next three). Each query is then timed alone.
Then the keys grow to 100,000 (the materialisations and runs stay) and the pages are timed
again: what the pages would cost without key retention.

Materialisations are reported as runless events (`report_runless_asset_event`) and runs added
as records (`add_run`), one at a time, as Dagster's public API allows: ~50 ms each on a loaded
2-core machine, so the year's 4,000 materialisations and 2,000 runs take a few minutes. Kafka,
Swift and Spark are not needed: the pages read only Dagster's storage.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import glob
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from contextlib import contextmanager
from pathlib import Path

from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.runs.retention import Policy
from matos_dagster.core.topics import TopicConfig

PARTITIONS = 4
RANGE_OFFSETS = 10_000
TARGET_S = 3.0
# The queries the asset page sends (ui-core: AssetView, AssetLiveDataProvider, useLatestEvents,
# AssetPartitions, usePartitionHealthData, AssetPartitionDetail), by the page's tab.
COMMON = ["AssetsOverviewRootQuery", "AssetViewDefinitionQuery", "AssetGraphLiveQuery", "AssetHealthQuery"]
PAGES = {
    "overview": COMMON + ["AssetOverviewMetadataEventsQuery", "PartitionHealthQuery", "AssetChecksQuery"],
    "partitions": COMMON + ["PartitionHealthQuery", "AssetPartitionDetailQuery", "AssetPartitionStaleQuery"],
}
_DEFINITION = re.compile(r"\b(query|fragment|mutation|subscription)\s+([A-Za-z_]\w*)")
_SPREAD = re.compile(r"\.\.\.\s*([A-Za-z_]\w*)")


def say(msg: str) -> None:
    print(f"bench-ui [{time.strftime('%H:%M:%S')}]: {msg}", flush=True)


# ---------------------------------------------------------------- the UI's own queries


def ui_definitions() -> dict[tuple[str, str], str]:
    """Every GraphQL definition (query or fragment) in dagster-webserver's UI bundle, by kind and name.

    The bundle keeps each `gql` template as a JS string literal that starts with a newline and
    the definition; fragments are interpolated, so they are collected separately and joined by name.
    """
    import dagster_webserver

    chunks = Path(dagster_webserver.__file__).parent / "webapp" / "build" / "_next" / "static" / "chunks"
    found: dict[tuple[str, str], str] = {}
    start = re.compile(r'"(?=\\n\s*(?:query|fragment|mutation|subscription) )')
    for path in glob.glob(str(chunks / "**" / "*.js"), recursive=True):
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        for m in start.finditer(text):
            k = m.end()
            while text[k] != '"':
                k += 2 if text[k] == "\\" else 1
            try:
                literal = json.loads('"' + text[m.end():k] + '"')
            except ValueError:
                continue
            for kind, name, body in _split(literal):
                found.setdefault((kind, name), body)
    if not found:
        raise RuntimeError(f"no GraphQL definitions found in {chunks}: has dagster-webserver's UI bundle moved?")
    return found


def _split(text: str):
    i = 0
    while (d := _DEFINITION.search(text, i)) is not None:
        j = text.index("{", d.end())
        depth = 0
        for k in range(j, len(text)):
            depth += {"{": 1, "}": -1}.get(text[k], 0)
            if depth == 0:
                break
        yield d.group(1), d.group(2), text[d.start():k + 1]
        i = k + 1


def ui_query(definitions: dict, name: str) -> str:
    """The query as the UI sends it: its text and every fragment it spreads, transitively."""
    if ("query", name) not in definitions:
        raise RuntimeError(f"query {name} is not in dagster-webserver's UI bundle: update bench/ui.py's PAGES")
    parts, todo, seen = [definitions[("query", name)]], [definitions[("query", name)]], set()
    while todo:
        for f in _SPREAD.findall(todo.pop()):
            if f not in seen and ("fragment", f) in definitions:
                seen.add(f)
                parts.append(definitions[("fragment", f)])
                todo.append(definitions[("fragment", f)])
    return "\n".join(parts)


def variables(name: str, asset_key: list[str], partition_key: str) -> dict:
    key = {"path": asset_key}
    if name in ("AssetGraphLiveQuery", "AssetHealthQuery"):
        return {"assetKeys": [key]}
    if name in ("AssetPartitionDetailQuery", "AssetPartitionStaleQuery"):
        return {"assetKey": key, "partitionKey": partition_key}
    return {"assetKey": key}


# ---------------------------------------------------------------- the simulated year


def bench_topic() -> TopicConfig:
    return TopicConfig("bench-ui", group="bench-ui-archiver")


def keys(cfg: TopicConfig, per_partition: int, first_range: int = 0) -> list[str]:
    """`per_partition` consecutive ranges of each partition, from range number `first_range` on."""
    return [OffsetRange(cfg.name, p, i * RANGE_OFFSETS, (i + 1) * RANGE_OFFSETS).key
            for i in range(first_range, first_range + per_partition) for p in range(PARTITIONS)]


def simulate_year(instance, cfg: TopicConfig, keep_keys: int, keep_runs: int, say) -> dict:
    """What retention leaves after a year: the newest keys, each materialised, and the newest runs.

    A year at the default policy is ~1.2 million ranges a partition; only the newest
    `keep_keys` a partition are added, numbered as the year's last ones.
    """
    from dagster import AssetKey, AssetMaterialization, DagsterRun, DagsterRunStatus

    from matos_dagster.assets.monitor import MONITOR_JOB
    from matos_dagster.dagster_compat import PARTITION_NAME_TAG

    year = 365 * 86_400 // 25  # ranges a partition gets in a year, one every ~25 s
    kept = keys(cfg, keep_keys, year - keep_keys)
    t = time.monotonic()
    instance.add_dynamic_partitions(cfg.partitions_name, kept)
    asset = AssetKey(cfg.asset_name)
    for k in kept:
        instance.report_runless_asset_event(AssetMaterialization(asset, partition=k))
    materialised_s = time.monotonic() - t
    t = time.monotonic()
    for k in kept[-keep_runs:]:
        instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id=str(uuid.uuid4()), status=DagsterRunStatus.SUCCESS,
                                    tags={PARTITION_NAME_TAG: k}))
    for _ in range(keep_runs):
        instance.add_run(DagsterRun(job_name=MONITOR_JOB, run_id=str(uuid.uuid4()),
                                    status=DagsterRunStatus.SUCCESS))
    runs_s = time.monotonic() - t
    say(f"simulated year: {len(kept):,} keys materialised in {materialised_s:.0f}s, {2 * keep_runs:,} runs in {runs_s:.0f}s")
    return {"keys": len(kept), "materialised": len(kept), "runs": 2 * keep_runs, "newest_key": kept[-1]}


# ---------------------------------------------------------------- the webserver


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def graphql(url: str, query: str, variables: dict | None = None, timeout: float = 600) -> tuple[dict, int]:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    req = urllib.request.Request(url + "/graphql", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        raw = resp.read()
    doc = json.loads(raw)
    if doc.get("errors"):
        raise RuntimeError(f"GraphQL errors: {json.dumps(doc['errors'])[:1000]}")
    return doc["data"], len(raw)


@contextmanager
def webserver(home: str, env: dict, log_path: Path, module: str = "matos_dagster.definitions",
              start_timeout_s: float = 600):
    """`dagster-webserver` on a free loopback port, the project's definitions loaded; stopped by PID."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    exe = str(Path(sys.executable).with_name("dagster-webserver"))
    log = open(log_path, "wb")
    proc = subprocess.Popen([exe, "-m", module, "-h", "127.0.0.1", "-p", str(port)],
                            env={**os.environ, **env, "DAGSTER_HOME": home}, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"dagster-webserver exited with {proc.returncode}; see {log_path}")
            try:
                data, _ = graphql(url, "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus "
                                       "locationOrLoadError { __typename ... on PythonError { message } } } } } }", timeout=10)
                entries = data["workspaceOrError"]["locationEntries"]
                if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                    for e in entries:
                        if e["locationOrLoadError"]["__typename"] == "PythonError":
                            raise RuntimeError(f"code location {e['name']} failed to load: "
                                               f"{e['locationOrLoadError']['message']}")
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError, socket.timeout):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"dagster-webserver did not load the definitions in {start_timeout_s:.0f}s; see {log_path}")
            time.sleep(1)
        yield url
    finally:
        # The webserver and its code server are in their own session: stop that group, by PID.
        for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            if proc.poll() is not None:
                break
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(wait_s)
            except subprocess.TimeoutExpired:
                pass
        log.close()


def check_pages(url: str, definitions: dict, asset_key: list[str], partition_key: str, keys: int, materialised: int) -> None:
    """The pages show what was simulated (else the timings would be of empty pages)."""
    data, _ = graphql(url, ui_query(definitions, "PartitionHealthQuery"), variables("PartitionHealthQuery", asset_key, ""))
    node = data["assetNodeOrError"]
    shown = sum(len(d["partitionKeys"]) for d in node["partitionKeysByDimension"])
    done = len(node["assetPartitionStatuses"]["materializedPartitions"])
    detail, _ = graphql(url, ui_query(definitions, "AssetPartitionDetailQuery"),
                        variables("AssetPartitionDetailQuery", asset_key, partition_key))
    events = detail["assetOrError"]["assetEventHistory"]["results"]
    if (shown, done) != (keys, materialised) or not events:
        raise RuntimeError(f"the Partitions page shows {shown:,} keys, {done:,} materialised and {len(events)} events "
                           f"for {partition_key}; the simulation made {keys:,}, {materialised:,} and 1")


def time_pages(url: str, definitions: dict, asset_key: list[str], partition_key: str, repeat: int = 3) -> dict:
    """Each page as a browser loads it (its queries sent at once; seconds until the last answer),
    cold (first load) and warm (median of `repeat`); then each query alone, with its response bytes."""
    docs = {name: (ui_query(definitions, name), variables(name, asset_key, partition_key))
            for name in sorted({q for qs in PAGES.values() for q in qs})}
    pages: dict = {}
    with concurrent.futures.ThreadPoolExecutor(max(len(qs) for qs in PAGES.values())) as pool:
        for page, qs in PAGES.items():
            times = []
            for _ in range(1 + repeat):
                t = time.monotonic()
                sizes = list(pool.map(lambda q: graphql(url, *docs[q])[1], qs))
                times.append(time.monotonic() - t)
            pages[page] = {"cold_s": times[0], "warm_s": statistics.median(times[1:]), "bytes": sum(sizes)}
    queries: dict = {}
    for name, (doc, v) in docs.items():
        times = []
        for _ in range(repeat):
            t = time.monotonic()
            _, size = graphql(url, doc, v)
            times.append(time.monotonic() - t)
        queries[name] = {"warm_s": statistics.median(times), "bytes": size}
    for page, qs in PAGES.items():
        pages[page]["sum_of_queries_s"] = sum(queries[q]["warm_s"] for q in qs)
    return {"queries": queries, "pages": pages}


def run(say, keep_keys: int = 1000, keep_runs: int = 1000, more_keys: int = 100_000,
        module: str = "matos_dagster.definitions") -> dict:
    from dagster import DagsterInstance

    from matos_dagster.core import settings
    cfg = bench_topic()
    definitions = ui_definitions()
    results: dict = {"keep_keys": keep_keys, "keep_runs": keep_runs, "partitions": PARTITIONS, "settings": []}
    with tempfile.TemporaryDirectory(prefix="matos-bench-ui-") as home:
        shutil.copy(settings.PROJECT_ROOT / "dagster.yaml", Path(home) / "dagster.yaml")
        topics_file = Path(home) / "topics.yaml"
        topics_file.write_text(f"topics:\n  - name: {cfg.name}\n    group: {cfg.group}\n")
        env = {"MATOS_TOPICS_FILE": str(topics_file)}
        instance = DagsterInstance.from_config(home)
        try:
            year = simulate_year(instance, cfg, keep_keys, keep_runs, say)
            with webserver(home, env, Path(home) / "webserver.log", module) as url:
                say(f"webserver up at {url}")
                # Timed before anything else asks the webserver about the asset: the first load is cold.
                r = time_pages(url, definitions, [cfg.asset_name], year["newest_key"])
                results["settings"].append({"name": "a year with retention", **year, **r, "load_average": os.getloadavg()})
                check_pages(url, definitions, [cfg.asset_name], year["newest_key"], year["keys"], year["materialised"])
                say(json.dumps(r["pages"]))
                if more_keys > year["keys"]:
                    per = (more_keys - year["keys"]) // PARTITIONS
                    t = time.monotonic()
                    instance.add_dynamic_partitions(cfg.partitions_name, keys(cfg, per))
                    total = len(instance.get_dynamic_partitions(cfg.partitions_name))
                    say(f"keys grown to {total:,} in {time.monotonic() - t:.0f}s (materialisations and runs unchanged)")
                    r = time_pages(url, definitions, [cfg.asset_name], year["newest_key"])
                    results["settings"].append({"name": "without key retention", **year, "keys": total, **r,
                                                "load_average": os.getloadavg()})
                    check_pages(url, definitions, [cfg.asset_name], year["newest_key"], total, year["materialised"])
                    say(json.dumps(r["pages"]))
        finally:
            instance.dispose()
    return results


def markdown(results: dict) -> str:
    rows = ["| setting | keys | materialised | runs | Overview page: cold / warm | Partitions page: cold / warm | "
            "bytes (Partitions) | slowest query alone | load average |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for s in results["settings"]:
        o, p = s["pages"]["overview"], s["pages"]["partitions"]
        slow = max(s["queries"].items(), key=lambda kv: kv[1]["warm_s"])
        rows.append(f"| {s['name']} | {s['keys']:,} | {s['materialised']:,} | {s['runs']:,} | {o['cold_s']:.2f} s / "
                    f"{o['warm_s']:.2f} s | {p['cold_s']:.2f} s / {p['warm_s']:.2f} s | {p['bytes']:,} | "
                    f"{slow[0]} {slow[1]['warm_s']:.2f} s | {s['load_average'][0]:.1f} |")
    rows += ["", "| query alone (warm, bytes) | " + " | ".join(s["name"] for s in results["settings"]) + " |",
             "| --- |" + " ---: |" * len(results["settings"])]
    for q in sorted(results["settings"][0]["queries"]):
        rows.append(f"| {q} | " + " | ".join(
            f"{s['queries'][q]['warm_s']:.3f} s, {s['queries'][q]['bytes']:,} B" for s in results["settings"]) + " |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m matos_dev.bench.ui", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=".bench", help="folder for ui.json and ui.md (.bench/)")
    policy = Policy()  # the retention job's defaults
    p.add_argument("--keep-keys", type=int, default=policy.keep_keys, help="keys per partition after retention (MATOS_KEEP_KEYS)")
    p.add_argument("--keep-runs", type=int, default=policy.keep_runs, help="runs per job after retention (MATOS_KEEP_RUNS)")
    p.add_argument("--more-keys", type=int, default=100_000, help="keys of the comparison without key retention")
    p.add_argument("--module", default="matos_dagster.definitions", help="the code location's module (-m)")
    args = p.parse_args(argv)
    results = run(say, args.keep_keys, args.keep_runs, args.more_keys, args.module)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    md = markdown(results)
    (out / "ui.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "ui.md").write_text(md)
    print(md)
    worst = max(s["pages"][page]["cold_s"] for s in results["settings"][:1] for page in PAGES)
    say(f"a year with retention: slowest page {worst:.2f} s cold (target {TARGET_S:.0f} s); "
        f"wrote {out / 'ui.json'}, {out / 'ui.md'}")
    return 0


if __name__ == "__main__":
    from matos_dev.bench import unwind_on_sigterm

    unwind_on_sigterm()
    sys.exit(main())
