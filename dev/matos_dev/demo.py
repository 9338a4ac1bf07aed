"""Demo records for `make run`, and `make demo`: load, archive everything pending, headlessly.

Both run against the settings in the environment (by default the local stack) and record
their runs in the Dagster instance of $DAGSTER_HOME, so they show in the UI afterwards.
"""

from __future__ import annotations

from dagster import DagsterInstance, materialize

from matos_dagster import definitions
from matos_dagster.assets.archive import archive_asset
from matos_dagster.assets.monitor import CHECK_NAME, monitor_check
from matos_dagster.jobs.load import load

DEMO_TOPIC = "demo"
DEMO_PARTITIONS = 4
DEMO_RECORDS = 20_000


def demo_topic():
    for t in definitions.TOPICS:
        if t.name == DEMO_TOPIC:
            return t
    raise ValueError(f"the topics file has no topic {DEMO_TOPIC!r}; the demo archives that one")


def load_demo_data(instance: DagsterInstance, count: int = DEMO_RECORDS) -> int:
    """Produce `count` demo records to the `demo` topic (made with 4 partitions if missing).

    Only into an empty topic: `make run` calls this at every start, and a second start must
    not load another 20,000 records. Returns the records produced (0 if the topic had some).
    """
    demo_topic()
    kafka = definitions.RESOURCES["kafka"].process_config_and_initialize()  # its EnvVar settings, resolved
    kafka.create_topic(DEMO_TOPIC, DEMO_PARTITIONS)  # waits for the leaders of a fresh broker
    parts = kafka.partitions(DEMO_TOPIC)
    present = sum(high - low for low, high in kafka.watermarks(DEMO_TOPIC, parts).values())
    if present:
        print(f"topic {DEMO_TOPIC!r} has {present} records already: no demo records loaded")
        return 0
    config = {
        "topic": DEMO_TOPIC,
        "count": count,
        "value_bytes": 256,
        "key_pattern": "sensor-{i}",
        "headers": {"source": "matos-demo"},
        "create_partitions": DEMO_PARTITIONS,
    }
    result = load.execute_in_process(
        run_config={"ops": {"produce": {"config": config}}},
        resources={"kafka": kafka},
        instance=instance,
    )
    print(f"loaded {count} records into topic {DEMO_TOPIC!r} (run {result.run_id})")
    return count


def run_demo(instance: DagsterInstance) -> None:
    """Load demo records, cut everything pending into ranges, archive each, print where it went."""
    topic = demo_topic()
    load_demo_data(instance)
    add = definitions.defs.resolve_job_def("add_ranges").execute_in_process(
        run_config={"ops": {"add_range_keys": {"config": {"topic": topic.name}}}},
        instance=instance,
    )
    keys = add.output_for_node("add_range_keys")
    asset, check = archive_asset(topic), monitor_check(topic)
    for key in keys:
        result = materialize([asset, check], partition_key=key, instance=instance, resources=definitions.RESOURCES)
        (mat,) = result.asset_materializations_for_node(asset.op.name)
        meta = mat.metadata
        print(
            f"archived {key}: {meta['records'].value} records, {meta['objects'].value} object(s), "
            f"{meta['records_per_s'].value:.0f} records/s -> {meta['swift_location'].value}"
        )
        for evaluation in result.get_asset_check_evaluations():
            if evaluation.check_name == CHECK_NAME:
                print(f"  monitor: {evaluation.metadata['status'].value}")
    if not keys:
        print("nothing pending: every record of the demo topic is archived already")
