"""The lag sensor's tick benchmark (bench/sensor.py) on the real broker, at a tiny estate: every
partition's range requested by the first tick, none below the batch policy, every figure the report
shows."""

from types import SimpleNamespace

from matos_dev.bench import report
from matos_dev.bench.sensor import sensor_ticks


def test_the_tick_benchmark_requests_every_partition_first_and_nothing_below_the_policy(kafka):
    out = sensor_ticks(SimpleNamespace(kafka=lambda: kafka), ticks=2, topics=3, per_topic=2)

    assert out["partitions"] == 6 and len(out["again_s"]) == len(out["below_policy_s"]) == 2
    assert out["max_s"] >= max(out["first_s"], out["median_s"]) > 0
    (target,) = [t for t in report.targets({"sensor": out, "workloads": {}}) if "lag sensor tick" in t["target"]]
    assert target["met"] is True and "6 partitions" in target["target"]
