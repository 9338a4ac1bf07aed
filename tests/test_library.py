"""The archive as a library: `archive_definitions` builds it for given topics and connections, every
Dagster name derived from the archive's name, so that two archives live in one deployment."""

from __future__ import annotations

import subprocess
import sys

import pytest
from dagster import AssetKey, DagsterRun, Definitions, EnvVar

from matos_dagster import archive_definitions
from matos_dagster.names import ARCHIVE_TAG, Names
from matos_dagster.resources import KafkaResource, SparkResource, SwiftResource

TOPICS = {"topics": [{"name": "orders", "time_window": "day"}, {"name": "payments"}]}


def connections(prefix: str = "") -> dict:
    return {
        "kafka": KafkaResource(bootstrap_servers=EnvVar(f"{prefix}KAFKA_SERVERS")),
        "swift": SwiftResource(auth_url=EnvVar(f"{prefix}SWIFT_AUTH_URL"), user="a:u", key=EnvVar("SWIFT_KEY"),
                               container=f"{prefix.lower()}archive"),
        "spark": SparkResource(master="local[1]"),
    }


def names_of(defs: Definitions) -> dict[str, set]:
    repo = defs.get_repository_def()
    return {
        "assets": {key.to_user_string() for key in repo.asset_graph.get_all_asset_keys()},
        "jobs": {j.name for j in repo.get_all_jobs() if not j.name.startswith("__")},
        "sensors": {s.name for s in repo.sensor_defs},
        "schedules": {s.name for s in repo.schedule_defs},
        "resources": set(defs.resources or {}),
        "partitions": {a.partitions_def.name for a in repo.asset_graph.assets_defs
                       if a.partitions_def is not None and hasattr(a.partitions_def, "name") and a.partitions_def.name},
    }


def test_the_default_archive_has_the_names_of_the_projects_own_definitions():
    defs = archive_definitions(TOPICS, **connections())
    got = names_of(defs)
    assert {"archive_orders", "archive_payments", "days_orders"} <= got["assets"]
    assert {"archive_ranges", "add_ranges", "backfill", "restore", "verify", "compact", "retention",
            "acknowledge_loss", "iceberg_table", "monitor_checks", "load", "expire"} <= got["jobs"]
    assert got["sensors"] == {"lag", "monitor", "days", "event_time_automation"}
    assert got["schedules"] == {"retention_schedule", "compact_schedule", "expire_schedule"}
    assert got["resources"] == {"kafka", "swift", "spark"}
    assert got["partitions"] == {"archive_orders_ranges", "archive_payments_ranges"}


def test_a_named_archive_derives_every_dagster_name_from_its_name():
    got = names_of(archive_definitions(TOPICS, **connections("EU_"), name="eu"))
    assert got["assets"] >= {"eu/archive_orders", "eu/archive_payments", "eu/days_orders"}
    assert all(a.startswith("eu/") for a in got["assets"])
    assert all(n.startswith("eu_") for kind in ("jobs", "sensors", "schedules", "resources", "partitions")
               for n in got[kind])


def test_two_archives_of_the_same_topics_live_side_by_side_in_one_deployment():
    eu = archive_definitions(TOPICS, **connections("EU_"), name="eu")
    us = archive_definitions(TOPICS, **connections("US_"), name="us")
    merged = Definitions.merge(eu, us)
    merged.validate_loadable(merged)
    repo = merged.get_repository_def()
    assert {AssetKey(["eu", "archive_orders"]), AssetKey(["us", "archive_orders"])} <= set(
        repo.asset_graph.get_all_asset_keys())
    # Each archive's ops and sensors ask for its own connections.
    op = repo.get_job("eu_archive_ranges").graph.node_defs[0]
    assert op.required_resource_keys == {"eu_kafka", "eu_swift", "eu_spark"}
    assert repo.get_sensor_def("us_lag").required_resource_keys == {"us_kafka"}
    assert merged.resources["us_kafka"].bootstrap_servers == EnvVar("US_KAFKA_SERVERS")


def test_a_named_archives_runs_carry_its_name_and_it_waits_only_for_its_own():
    eu, us, own = Names("eu"), Names("us"), Names("")
    eu_run = DagsterRun(job_name="eu_archive_ranges", run_id="a" * 36, tags={ARCHIVE_TAG: "eu"})
    plain = DagsterRun(job_name="archive_ranges", run_id="b" * 36, tags={})
    assert eu.owns(eu_run) and not us.owns(eu_run) and not own.owns(eu_run)
    assert own.owns(plain) and not eu.owns(plain)
    # A range's run that has not claimed its turn yet is known by its asset's key prefix.
    unclaimed = DagsterRun(job_name="__ASSET_JOB", run_id="c" * 36, tags={},
                           asset_selection=frozenset({AssetKey(["us", "archive_orders"])}))
    assert us.owns(unclaimed) and not eu.owns(unclaimed)


@pytest.mark.parametrize("bad, says", [
    ({"name": "eu-west"}, "archive name 'eu-west': use letters, digits and `_`"),
    ({"sensor_interval_s": 0}, "sensor_interval_s is 0: it takes a whole number of seconds"),
    ({"retention_cron": "hourly"}, "retention_cron is 'hourly': it takes"),
])
def test_a_bad_argument_is_refused_in_one_line_naming_it(bad, says):
    with pytest.raises(ValueError) as e:
        archive_definitions(TOPICS, **connections(), **bad)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_importing_the_package_reads_no_setting_and_imports_no_dagster():
    p = subprocess.run([sys.executable, "-c", "import sys, matos_dagster; "
                        "assert 'dagster' not in sys.modules, 'dagster imported'; "
                        "assert 'matos_dagster.definitions' not in sys.modules; print(matos_dagster.__all__)"],
                       capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    assert "archive_definitions" in p.stdout and "KafkaArchive" in p.stdout
