"""The exporter's cost at estate scale: `matos metrics` scraped every 15 s at 1,000 partitions.

An estate of topics (250 of 4 partitions by default) on a Kafka of its own, each partition with
records, half of them archived (committed, and a verdict of each topic from one monitor evaluation
in a Dagster instance of its own), so that a scrape reads what it reads in production: the
offsets, the first waiting record's timestamp, the verdicts. The exporter runs as the operator runs
it (`python -m matos_dagster metrics`, a process of its own, so its CPU is its own); it is scraped
every `--interval-s` for `--duration-s`. Measured: each scrape's time (targets: under 2 s, p95),
the exporter's CPU over the scrapes in cores (target: at most 0.05), and the first scrape's time
(the first waiting record of every partition read once). Results in .bench/metrics.json and
.bench/metrics.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

from matos_dev.bench import cpu
from matos_dev.bench.stack import produce_records, running_stack
from matos_dev.stack.process import free_port

TARGET_SCRAPE_S = 2.0
TARGET_CORES = 0.05
RECORDS = 20  # per partition; the first half archived


def say(msg: str) -> None:
    print(f"bench metrics: {msg}", flush=True)


def estate(stack, tmp: Path, n_topics: int, per_topic: int) -> dict[str, str]:
    """The topics, their records and committed offsets, one verdict of each; the exporter's environment."""
    from confluent_kafka.admin import NewTopic
    from dagster import DagsterInstance

    from matos_dagster import instance as instances
    from matos_dagster.assets.monitor import evaluate
    from matos_dagster.core import topics as topics_file
    from matos_dagster.core.kafka import many
    from matos_dagster.resources import KafkaResource, SwiftResource

    base = f"m{uuid.uuid4().hex[:6]}"
    names = [f"{base}-{i:04d}" for i in range(n_topics)]
    kafka = KafkaResource(bootstrap_servers=stack.bootstrap, timeout_s=30)
    admin = kafka.admin()
    for f in admin.create_topics([NewTopic(t, num_partitions=per_topic, replication_factor=1) for t in names]).values():
        f.result(timeout=120)
    for t in names:
        produce_records(kafka, t, ((b"k", b"v" * 100, [], p) for p in range(per_topic) for _ in range(RECORDS)))
    group = f"g-{base}"
    many.commit(kafka, group, {(t, p): RECORDS // 2 for t in names for p in range(per_topic)})
    topics_yaml = tmp / "topics.yaml"
    topics_yaml.write_text(json.dumps({"topics": [{"pattern": f"{base}-\\d+"}]}))
    home = instances.prepare(tmp / "dagster", say=lambda line: None)
    swift = SwiftResource(auth_url=stack.swift_server.auth_url, user=stack.swift_server.user, key=stack.swift_server.key,
                          container=f"bench-{base}", prefix="kafka")
    topic_set = topics_file.load(str(topics_yaml), default_group=group)
    os.environ["DAGSTER_HOME"] = str(home)
    with DagsterInstance.get() as instance:
        listing = many.topics(kafka)
        done = evaluate(instance, kafka, swift, topic_set.resolve(listing).topics, listing)
        for e in done.evaluations:
            instance.report_runless_asset_event(e)
    say(f"{n_topics} topics of {per_topic} partitions, {len(done.evaluations)} verdicts")
    return {**os.environ, "DAGSTER_HOME": str(home), "MATOS_TOPICS_FILE": str(topics_yaml),
            "MATOS_KAFKA_GROUP": group, "MATOS_KAFKA_BOOTSTRAP_SERVERS": stack.bootstrap,
            "MATOS_SWIFT_AUTH_URL": stack.swift_server.auth_url, "MATOS_SWIFT_USER": stack.swift_server.user,
            "MATOS_SWIFT_KEY": stack.swift_server.key, "MATOS_SWIFT_CONTAINER": swift.container,
            "MATOS_SWIFT_PREFIX": swift.prefix}  # the exporter lists the erasure and expiry records


def scrape(url: str) -> tuple[float, str]:
    t0 = time.monotonic()
    with urllib.request.urlopen(url, timeout=60) as r:
        text = r.read().decode()
    return time.monotonic() - t0, text


def measure(stack, tmp: Path, n_topics: int, per_topic: int, interval_s: float, duration_s: float) -> dict:
    env = estate(stack, tmp, n_topics, per_topic)
    port = free_port()
    log = open(tmp / "exporter.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "matos_dagster", "metrics", "--address", "127.0.0.1", "--port",
                             str(port), "--timeout", "10"], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                first, text = scrape(url)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"the exporter did not answer: see {tmp / 'exporter.log'}") from None
                time.sleep(0.5)
        series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        before = cpu.cpu_sample({"exporter": [proc.pid]})
        t0 = time.monotonic()
        times = []
        while time.monotonic() - t0 < duration_s:
            took, text = scrape(url)
            times.append(took)
            if "matos_up{archive=\"\",component=\"kafka\"} 0.0" in text:
                say("a scrape served kafka as last known (matos_up 0)")
            time.sleep(max(0.0, interval_s - took))
        wall = time.monotonic() - t0
        used = cpu.cpu_used(before, cpu.cpu_sample({"exporter": [proc.pid]})).get("exporter", 0.0)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        log.close()
    times.sort()
    p95 = times[min(len(times) - 1, int(0.95 * len(times)))]
    result = {"partitions": n_topics * per_topic, "topics": n_topics, "series": series, "scrapes": len(times),
              "interval_s": interval_s, "first_scrape_s": round(first, 3), "median_scrape_s": round(times[len(times) // 2], 3),
              "p95_scrape_s": round(p95, 3), "max_scrape_s": round(times[-1], 3), "cores": round(used / wall, 4),
              "scrape_ok": p95 < TARGET_SCRAPE_S, "cores_ok": used / wall <= TARGET_CORES}
    say(json.dumps(result))
    return result


def markdown(results: list[dict]) -> str:
    rows = [f"| partitions | series | first scrape | median | p95 (target < {TARGET_SCRAPE_S:g} s) | "
            f"cores at one scrape per interval (target ≤ {TARGET_CORES:g}) |", "| --- | --- | --- | --- | --- | --- |"]
    for r in results:
        rows.append(f"| {r['partitions']:,} | {r['series']:,} | {r['first_scrape_s']} s | {r['median_scrape_s']} s | "
                    f"{r['p95_scrape_s']} s {'✓' if r['scrape_ok'] else '✗'} | "
                    f"{r['cores']} (every {r['interval_s']:g} s) {'✓' if r['cores_ok'] else '✗'} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m matos_dev.bench.metrics", description=__doc__.split("\n\n")[0])
    p.add_argument("--partitions", default="1000", help="sizes, comma-separated, in topics of 4 partitions")
    p.add_argument("--interval-s", type=float, default=15.0, help="seconds between scrapes (Prometheus' default)")
    p.add_argument("--duration-s", type=float, default=180.0)
    p.add_argument("--out", default=".bench")
    a = p.parse_args(argv)
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for n in (int(x) for x in a.partitions.split(",")):
        with running_stack() as stack:
            tmp = out / f"metrics-{n}-{uuid.uuid4().hex[:6]}"
            tmp.mkdir(parents=True)
            results.append(measure(stack, tmp, max(1, n // 4), 4, a.interval_s, a.duration_s))
        (out / "metrics.json").write_text(json.dumps(results, indent=2))
        (out / "metrics.md").write_text(markdown(results))
    print((out / "metrics.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
