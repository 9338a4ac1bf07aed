"""Typed columns in the bench: `python -m matos_dev.bench --typed [--quick] [--repeat N]`.

Two workloads of nested events of about 1 KiB, 20 fields (bench/typed_workload.py), 16-byte
keys and one header, 4 partitions, on the bench's own Kafka and Swift:

- **Avro**: the events in the Confluent wire format, their schema registered once in the
  project's Schema Registry stand-in (started here, on a free port, stopped by PID). The same
  topic archived raw (`value_format: none`) and typed (`value_format: avro`): records/s and CPU
  per record of each, typed over raw (target ≥ 0.5× raw's records/s);
- **JSON**: the same events as JSON text, which both sides decode without a registry: the archive
  typed (`value_format: json`) beside Apache Iceberg's Kafka Connect sink with Kafka's own
  JsonConverter (`schemas.enable=false`) writing them as typed columns of a table created with the
  type the archive infers (targets: ≥ 1.5× the sink's records/s, at no more CPU per record); the
  raw archive of that topic too, for reference.

Every path gets the same cores (Spark `local[cores]`, the sink `tasks.max` = cores) and is
timed and counted as in bench/peer.py: CPU-seconds of its own processes, the broker and the
Swift servers; one task's peak memory (the largest rise of a Spark Python worker's RSS) over
`object_bytes`, and the peak PSS of each path's process tree. Writes DIR/typed.json and
DIR/typed.md; `python -m matos_dev.bench.report DIR/typed.json --markdown docs/performance/typed.md`
writes the page's tables again from the json.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from pathlib import Path

from matos_dev.bench.typed_report import (
    PARTITIONS,
    PATHS,
    SINK_COMMIT_INTERVAL_MS,
    cpu_us,
    markdown,
    rate,
    summarize,
)
from matos_dev.bench.typed_workload import (
    LEAF_FIELDS,
    Events,
    produce,
    register_schema,
    sink_config,
    sink_table_schema,
)

SETTINGS = {"full": 1_000_000, "quick": 20_000}


# ------------------------------------------------------------------------------ the runs


def _decoded(stack, container: str) -> dict:
    """What the typed run's manifests count: decoded, failed, nulls (a run whose records all failed
    to decode would look fast)."""
    from matos_dagster.core.swift.store import Store

    out = {"decoded": 0, "failed": 0, "nulls": 0}
    with contextlib.closing(Store(stack.swift_params(container))) as store:
        for item in store.list(""):
            if item["name"].endswith("_manifest.json"):
                typed = (store.get_json(item["name"]) or {}).get("typed", {}).get("value", {})
                for k in out:
                    out[k] += typed.get(k, 0)
    return out


def archive(stack, args, topic: str, servers: dict, logs: Path, sizes: dict, value_format: str) -> dict:
    from matos_dev.bench import paths

    container = f"bench-typed-{value_format}-{uuid.uuid4().hex[:6]}"
    params = stack.swift_params(container)
    spec = {"master": f"local[{args.cores}]", "cores": args.cores, "bootstrap": stack.bootstrap, "topic": topic,
            "ranges": [[r.topic, r.partition, r.start, r.end] for r in stack.ranges(topic)],
            "swift": {k: getattr(params, k) for k in params.__dataclass_fields__},
            "group": f"bench-{uuid.uuid4().hex[:6]}", "slice_records": sizes["slice_records"],
            "object_bytes": sizes["object_bytes"], "servers": servers, "native_reader": "true",
            "topic_config": {} if value_format == "none" else {"value_format": value_format}}
    os.sync()  # no other path's writeback pending (bench/__main__.py `settle`)
    run = paths.spark_run("archive", spec, logs)
    if value_format != "none":
        run["typed"] = _decoded(stack, container)
        if run["typed"]["decoded"] != run["records"]:
            raise RuntimeError(f"the typed archive decoded {run['typed']} of {run['records']:,} records; see {run['log']}")
    stack.drop_container(container)
    return run


def sink(stack, args, topic: str, records: int, servers: dict, logs: Path, events: Events, say) -> dict:
    """One timed run of the Iceberg sink over the JSON topic: as bench/peer.py's `throughput`."""
    from matos_dev.bench import iceberg_connect as ic
    from matos_dev.bench.memory import PeakSampler
    from matos_dev.bench.paths import cpu_sample, cpu_used
    from matos_dev.bench.peer import (
        catalog_for,
        commit_timeouts,
        create_control_topic,
        steady_rate,
        wait_committed,
    )
    from matos_dev.bench.stack import cache_dir

    inst = ic.install(cache_dir(), say=say)
    folder = logs / f"typed-sink-{uuid.uuid4().hex[:6]}"
    catalog = catalog_for(stack, folder)
    control = f"typed-control-{uuid.uuid4().hex[:6]}"
    create_control_topic(stack, control)
    table = f"bench.{topic.replace('-', '_')}"
    cat = catalog.pyiceberg()
    cat.create_namespace_if_not_exists("bench")
    cat.create_table(table, sink_table_schema(events), properties=ic.TABLE_PROPERTIES)
    catalog.use_wal()
    worker = ic.ConnectWorker(folder / "connect", inst, stack.bootstrap)
    config = sink_config(ic.sink_config([topic], table, catalog, control, args.cores, SINK_COMMIT_INTERVAL_MS))
    try:
        startup = worker.start()
        groups = {"client": [worker.pid], **servers}
        os.sync()
        connector = f"iceberg-{uuid.uuid4().hex[:6]}"
        with PeakSampler(worker.pid) as mem:
            cpu0 = cpu_sample(groups)
            t0 = time.monotonic()
            worker.put_connector(connector, config)
            counts: list[tuple[float, int]] = []
            t1 = wait_committed(worker, connector, cat, table, records, 3600,
                                on_count=lambda t, n: counts.append((t, n)))
            cpu = cpu_used(cpu0, cpu_sample(groups))
        check_rows(cat, table, events)
        return {"records": ic.committed_records(cat, table), "seconds": t1 - t0, "startup_s": startup,
                "steady": steady_rate(counts, records), "cpu": cpu,
                "memory": {k: mem.peaks[k] for k in ("total", "pss_total")}, "files": ic.table_files(cat, table),
                "commit_timeouts": commit_timeouts(worker.log_file.read_text(errors="replace")),
                "log": str(worker.log_file)}
    finally:
        with contextlib.suppress(Exception):
            worker.stop()


def check_rows(cat, table: str, events: Events) -> None:
    """A few of the sink's rows hold the events' values in their typed columns, not nulls."""
    rows = cat.load_table(table).scan(limit=20).to_arrow().to_pylist()
    for row in rows:
        want = events.event(row["event_id"], "json")
        got = {k: row[k] for k in want}
        if got != want:
            raise RuntimeError(f"the sink's row of event {row['event_id']} is {got}, not {want}")
    if not rows:
        raise RuntimeError(f"the sink's table {table} has no rows")


def run(stack, args, say, logs: Path) -> dict:
    """Both workloads on `stack` (the registry stand-in started and stopped here); the raw runs."""
    from matos_dagster.core.topics import TopicConfig
    from matos_dev.bench import iceberg_connect as ic
    from matos_dev.bench import paths
    from matos_dev.stack.process import free_port
    from matos_dev.stack.registry import RegistryServer

    records = getattr(args, "typed_records", None) or SETTINGS["quick" if args.quick else "full"]
    setting = next((k for k, v in SETTINGS.items() if v == records), f"{records:,} events")
    d = TopicConfig("x")
    scale = min(1.0, records / SETTINGS["full"])  # fewer events: objects and slices scaled like them
    sizes = {"object_bytes": int(d.object_bytes * scale), "slice_records": max(1, int(d.slice_records * scale))}
    servers = paths.server_pids(stack)
    events = Events()
    registry = RegistryServer(logs / f"registry-{uuid.uuid4().hex[:6]}", port=free_port())
    registry.start()
    saved = os.environ.get("MATOS_SCHEMA_REGISTRY_URL")
    os.environ["MATOS_SCHEMA_REGISTRY_URL"] = registry.url  # the typed archive's worker reads it (typed.for_topic)
    try:
        avro_topic, json_topic = (f"bench-typed-{k}-{uuid.uuid4().hex[:6]}" for k in ("avro", "json"))
        schema_id = register_schema(registry.url, f"{avro_topic}-value")
        produced = {}
        for topic, value_of in ((avro_topic, lambda i: events.avro(i, schema_id)), (json_topic, events.json)):
            stack.create_topic(topic, PARTITIONS)
            say(f"typed: producing {records:,} events into {topic}")
            produced[topic] = produce(stack.kafka(), topic, records, value_of)
        runs: dict = {k: [] for k, _ in PATHS}
        for rep in range(args.repeat):
            order = [("avro_raw", avro_topic, "none"), ("avro_typed", avro_topic, "avro"),
                     ("json_raw", json_topic, "none"), ("json_typed", json_topic, "json")]
            if rep % 2:  # every other repeat the typed archive first: a drift in the machine's load
                order = [order[1], order[0], order[3], order[2]]  # falls on both sides alike
            for key, topic, fmt in order:
                r = archive(stack, args, topic, servers, logs, sizes, fmt)
                runs[key].append(r)
                say(f"typed #{rep + 1} {dict(PATHS)[key]}: {rate(r):,.0f} records/s, {cpu_us(r):.1f} CPU-µs per record")
            r = sink(stack, args, json_topic, records, servers, logs, events, say)
            runs["json_sink"].append(r)
            say(f"typed #{rep + 1} {dict(PATHS)['json_sink']}: {rate(r):,.0f} records/s, {cpu_us(r):.1f} CPU-µs per record")
    finally:
        if saved is None:
            os.environ.pop("MATOS_SCHEMA_REGISTRY_URL", None)
        else:
            os.environ["MATOS_SCHEMA_REGISTRY_URL"] = saved
        registry.stop()
    return {"kind": "typed", "setting": setting, "repeat": args.repeat, "cores": args.cores,
            "records": records, "schema_id": schema_id, **sizes, "default_object_bytes": d.object_bytes,
            "iceberg": ic.ICEBERG_VERSION,
            "connect": ic.CONNECT_VERSION,
            "workload": {"leaf_fields": LEAF_FIELDS, "avro_value_bytes": produced[avro_topic]["value_bytes"],
                         "json_value_bytes": produced[json_topic]["value_bytes"], "produced": produced},
            "runs": runs}


def typed_main(args, say) -> int:
    """`python -m matos_dev.bench --typed`: its own stack; DIR/typed.json and DIR/typed.md."""
    from matos_dev.bench.stack import running_stack

    out = Path(args.out).resolve()
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with running_stack() as stack:
        results = run(stack, args, say, logs)
    write(results, out)
    return 0


def write(results: dict, out: Path) -> str:
    summarize(results)
    (out / "typed.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    md = markdown(results)
    (out / "typed.md").write_text(md)
    print(md)
    return md
