"""The typed bench (bench/typed.py, bench/typed_workload.py): its events, its sink's setup, its
figures and tables, from small dicts; no servers. The whole bench on a real stack is
`python -m matos_dev.bench --typed --quick` (a few minutes: Spark, a Connect worker)."""

from __future__ import annotations

import io
import json

import fastavro
import pyarrow as pa
import pytest
from matos_dev.bench import iceberg_connect as ic
from matos_dev.bench import typed_report as typed
from matos_dev.bench.report import main as report_main
from matos_dev.bench.typed_workload import (
    LEAF_FIELDS,
    SCHEMA,
    Events,
    sink_config,
    sink_table_schema,
    zigzag,
)

MIB = 1024**2
N = 1000  # events per run


@pytest.fixture(scope="module")
def events() -> Events:
    return Events()


def leaves(t: pa.DataType) -> int:
    if pa.types.is_struct(t):
        return sum(leaves(f.type) for f in t)
    return 1


def test_the_avro_events_are_what_fastavro_reads_framed_with_the_schema_id(events):
    parsed = fastavro.parse_schema(SCHEMA)
    sizes = []
    for i in (0, 1, 7, 4098, 123_456, 999_999):
        value = events.avro(i, 42)
        assert value[:5] == b"\x00\x00\x00\x00\x2a"  # magic byte, schema id 42
        buf = io.BytesIO(value[5:])
        got = fastavro.schemaless_reader(buf, parsed, None)
        assert buf.tell() == len(value) - 5  # nothing left after the record
        got["created_at"] = int(got["created_at"].timestamp() * 1000)
        assert got == events.event(i)
        sizes.append(len(value))
    assert 900 < sum(sizes) / len(sizes) < 1150  # about 1 KiB
    assert events.avro(5, 1) != events.avro(5 + 4099, 1)  # no two events alike


def test_the_json_events_are_the_same_events_as_json_text(events):
    for i in (0, 3, 8190, 777_777):
        assert json.loads(events.json(i)) == events.event(i, "json")
    assert 900 < sum(len(events.json(i)) for i in range(200)) / 200 < 1150
    # The type the archive infers for them (the map of 3 attributes an object of 3 fields): the sink's
    # table has it, and the record's place.
    schema = sink_table_schema(events)
    assert sum(leaves(f.type) for f in schema) == LEAF_FIELDS + 2 + 3
    assert schema.names[-3:] == ["kafka_partition", "kafka_offset", "kafka_timestamp"]


def test_zigzag_is_avros_long():
    for n in (0, -1, 1, 63, -64, 64, 2**31, -(2**40)):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, "long", n)
        assert zigzag(n) == buf.getvalue()


def test_the_sink_decodes_json_with_kafkas_converter_into_the_tables_columns():
    base = ic.sink_config(["t"], "bench.t", ic.Catalog("/c.db", "b", "http://s", "u", "k"), "ctl", 2)
    cfg = sink_config(base)
    assert cfg["value.converter"] == "org.apache.kafka.connect.json.JsonConverter"
    assert cfg["value.converter.schemas.enable"] == "false"
    # No HoistField (the value is a map of the JSON's fields); InsertField adds the record's place.
    assert cfg["transforms"] == "meta" and not any(k.startswith("transforms.hoist") for k in cfg)
    assert cfg["transforms.meta.offset.field"] == "kafka_offset"
    assert cfg["tasks.max"] == "2" and cfg["iceberg.tables"] == "bench.t"


def spark_run(seconds: float, cpu: float, task_mib: float, pss_mib: float = 800, python: float | None = None) -> dict:
    return {"records": N, "seconds": seconds, "memory": {"total": 900 * MIB, "pss_total": pss_mib * MIB},
            "cpu": {"client": cpu, "kafka": 0.1, "swift": 0.2,
                    "client_kinds": {"driver_python": 0.0, "jvm": 0.0, "python_workers": python or cpu / 2}},
            "task_memory": [{"above_start": task_mib * MIB / 2}, {"above_start": task_mib * MIB}]}


def results(object_mib: float = 64, default_mib: float = 64) -> dict:
    runs = {"avro_raw": [spark_run(1.0, 0.7, 100), spark_run(1.2, 0.7, 110)],
            "avro_typed": [spark_run(1.6, 1.2, 150), spark_run(2.0, 1.3, 170)],
            "json_raw": [spark_run(1.0, 0.6, 100), spark_run(1.0, 0.6, 100)],
            "json_typed": [spark_run(2.5, 2.0, 160), spark_run(2.5, 2.0, 200)],
            "json_sink": [{"records": N, "seconds": 5.0, "cpu": {"client": 4.7, "kafka": 0.1, "swift": 0.2},
                           "memory": {"total": 1000 * MIB, "pss_total": 1000 * MIB}}] * 2}
    return {"kind": "typed", "setting": "full", "repeat": 2, "cores": 2, "records": N, "schema_id": 1,
            "object_bytes": int(object_mib * MIB), "default_object_bytes": int(default_mib * MIB),
            "slice_records": 500_000, "iceberg": "1.10.1", "connect": "4.1.0",
            "workload": {"leaf_fields": 20, "avro_value_bytes": 1027.6, "json_value_bytes": 1025.2}, "runs": runs}


def test_each_ratio_is_taken_within_a_repeat_then_the_median_over_repeats():
    s = typed.summarize(results())["summary"]
    avro = s["ratios"]["avro_typed_over_raw"]
    # Repeat 1: 625 / 1,000 records/s; repeat 2: 500 / 833.
    assert avro["records_per_s"]["min"] == pytest.approx(0.6) and avro["records_per_s"]["max"] == pytest.approx(0.625)
    assert avro["cpu_per_record"]["median"] == pytest.approx((1.5 / 1.0 + 1.6 / 1.0) / 2)
    sink = s["ratios"]["json_typed_over_sink"]
    assert sink["records_per_s"]["median"] == pytest.approx(2.0)  # 400 against 200 records/s
    assert sink["cpu_per_record"]["median"] == pytest.approx(2.3 / 5.0)
    assert sink["peak_pss"]["median"] == pytest.approx(0.8)
    typed_path = s["paths"]["avro_typed"]
    assert typed_path["cpu_us"]["total"]["median"] == pytest.approx(1e6 * 1.55 / N)
    assert typed_path["task_mib"]["max"] == pytest.approx(170)


def test_the_targets_are_the_issues_and_memory_is_judged_on_full_size_objects_only():
    rows = {t["target"]: (t["figure"], t["met"]) for t in typed.summarize(results())["targets"]}
    assert rows["Avro: typed archive ≥ 0.5 × the raw archive's records/s (same topic, cores and Swift)"] == (
        "0.61× (0.60–0.62)", True)
    assert rows["JSON: typed archive ≥ 1.5 × the Iceberg sink's records/s"] == ("2.00×", True)
    assert rows["JSON: typed archive CPU per record ≤ the Iceberg sink's"] == ("0.46×", True)
    assert rows["Avro topic, typed archive (avro): peak memory per task ≤ 3 × object_bytes"] == (
        "2.50× (2.34–2.66)", True)
    assert rows["JSON topic, typed archive (json): peak memory per task ≤ 3 × object_bytes"] == (
        "2.81× (2.50–3.12)", True)

    scaled = typed.summarize(results(object_mib=1.28))["targets"]
    memory = [t for t in scaled if "memory" in t["target"]]
    assert memory and all(t["met"] is None and "not judged" in t["target"] for t in memory)

    slow = results()
    slow["runs"]["avro_typed"] = [spark_run(3.0, 2.5, 150)] * 2
    rows = {t["target"]: t["met"] for t in typed.summarize(slow)["targets"]}
    assert rows["Avro: typed archive ≥ 0.5 × the raw archive's records/s (same topic, cores and Swift)"] is False


def test_the_tables_and_the_report_writer(tmp_path):
    md = typed.markdown(typed.summarize(results()))
    assert ("| Avro topic, typed archive (avro) | 562.5 (500.0–625.0) | 1,250 (1,200–1,300) | 100.0 | 200.0 | "
            "1,550 (1,500–1,600) | 625.0 (600.0–650.0) | 160.0 (150.0–170.0) | 2.50 (2.34–2.66) | 800.0 |") in md
    assert "| JSON topic, Iceberg sink (JsonConverter) | 200.0 | 4,700 | 100.0 | 200.0 | 5,000 | n/a | n/a | n/a |" in md
    assert "| JSON: typed archive / Iceberg sink | 2.00× | 0.46× | 0.80× |" in md
    assert "| JSON: typed archive ≥ 1.5 × the Iceberg sink's records/s | 2.00× | met |" in md
    assert "1,000 events of 20 fields" in md and "Avro values of 1,028 B" in md

    # A typed.json alone, and a results.json holding the typed workloads: typed.md beside results.md.
    (tmp_path / "typed.json").write_text(json.dumps(results()))
    report_main([str(tmp_path / "typed.json"), "--markdown", str(tmp_path / "alone.md")])
    assert (tmp_path / "alone.md").read_text() == md
    from test_bench_report import results as throughput_results

    (tmp_path / "results.json").write_text(json.dumps({**throughput_results(), "typed": results()}))
    report_main([str(tmp_path / "results.json"), "--markdown", str(tmp_path / "results.md")])
    assert (tmp_path / "typed.md").read_text() == md and "typed archive" not in (tmp_path / "results.md").read_text()


def test_the_avro_events_are_archived_typed_by_the_archives_own_slice_task(kafka, swift, new_topic, registry_server,
                                                                            events):
    # Real Kafka, Swift and the registry stand-in, the slice task's own code in this process (no Spark):
    # the bench's events decode, every one, into the data fastavro reads from them.
    import pyarrow.parquet as pq
    from matos_dev.bench.typed_workload import produce, register_schema

    from matos_dagster.core.archive.slice_task import SliceJob, archive_slice
    from matos_dagster.core.offsets.ranges import OffsetRange
    from matos_dagster.core.schemas import typed as typed_columns
    from matos_dagster.core.schemas.sources import RegistrySource
    from matos_dagster.core.topics import TopicConfig

    topic = new_topic()
    sid = register_schema(registry_server.url, f"{topic}-value")
    produce(kafka, topic, 3000, lambda i: events.avro(i, sid), partitions=1)
    typing = typed_columns.for_topic(TopicConfig(topic, value_format="avro"), RegistrySource(registry_server.url))
    with swift.store() as store:
        written = archive_slice(SliceJob(slice=OffsetRange(topic, 0, 0, 3000), directory=f"typed/{topic}",
                                         kafka_conf=kafka.client_config(), group=f"g-{topic}", swift=store.params,
                                         object_bytes=2 * MIB, typing=typing))
        assert sum(o["typed"]["value"]["decoded"] for o in written) == 3000 and len(written) > 1
        t = pq.read_table(io.BytesIO(store.get(written[1]["name"])))
    parsed = fastavro.parse_schema(SCHEMA)
    for row in t.slice(0, 50).to_pylist():
        assert row["value_error"] is None and row["value_schema_id"] == sid
        want = fastavro.schemaless_reader(io.BytesIO(row["value"][5:]), parsed, None)
        want["attributes"] = list(want["attributes"].items())
        assert row["value_data"] == want
