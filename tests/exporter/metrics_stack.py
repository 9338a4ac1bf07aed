"""What the exporter's tests share: an archived topic on the real stack, a scrape, its values, and a
sensor tick recorded in Dagster's storage as the daemon records one."""

from __future__ import annotations

import base64
import time
import urllib.request
import uuid

from dagster import (AssetMaterialization, DagsterInstance, DagsterRun, DagsterRunStatus, MetadataValue,
                     build_sensor_context)
from dagster._core.events import DagsterEvent, DagsterEventType, StepOutputData
from dagster._core.execution.plan.outputs import StepOutputHandle
from dagster._core.remote_origin import RegisteredCodeLocationOrigin, RemoteInstigatorOrigin, RemoteRepositoryOrigin
from dagster._core.scheduler.instigation import (InstigatorState, InstigatorStatus, InstigatorType,
                                                   SensorInstigatorData, TickData, TickStatus)
from helpers import produce
from prometheus_client.parser import text_string_to_metric_families

from matos_dagster.core import topics as topics_file
from matos_dagster.core.kafka import many
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import layout
from matos_dagster.names import DEFAULT
from matos_dagster.sensors.monitor import monitor_sensor

AGE_S = 600  # the records are stamped this long ago: above the batch age (60 s) plus 5 minutes


class Archived:
    """A topic of 2 partitions of 10 records stamped AGE_S ago: [0, 6) of partition 0 archived (a manifest in
    Swift, offset 6 committed), nothing of partition 1; the monitor's verdict of it reported."""

    def __init__(self, kafka, swift, instance, new_topic):
        self.topic = new_topic(partitions=2)
        self.group = f"g-{uuid.uuid4().hex[:6]}"
        self.topics = topics_file.parse({"topics": [{"name": self.topic, "batch": {"age_s": 60}}]},
                                        default_group=self.group)
        stamp = int((time.time() - AGE_S) * 1000)
        for p in (0, 1):
            produce(kafka, self.topic, [(b"k", b"v", [])] * 10, partition=p, timestamp=stamp)
        with swift.store() as store:
            store.put_json(layout.manifest_name(store.params.prefix, OffsetRange(self.topic, 0, 0, 6)),
                           {"topic": self.topic, "partition": 0, "start": 0, "end": 6, "objects": []})
        many.commit(kafka, self.group, {(self.topic, 0): 6})
        # Its days are complete up to 2024-01-06 (the days sensor materialised the window of 2024-01-05).
        instance.report_runless_asset_event(AssetMaterialization(DEFAULT.windows_key(self.topics.resolve([]).topics[0]),
                                                                 partition="2024-01-05"))
        sensor = monitor_sensor(self.topics, 300, 30)
        result = sensor(build_sensor_context(instance=instance, sensor_name=sensor.name,
                                             resources={"kafka": kafka, "swift": swift}))
        for e in result.asset_events:
            instance.report_runless_asset_event(e)


def scrape(url: str, auth: tuple[str, str] | None = None, context=None) -> str:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    with urllib.request.urlopen(request, timeout=30, context=context) as r:
        return r.read().decode()


def values(text: str) -> dict[tuple, float]:
    """{(sample name, (label, value) pairs sorted): value} of an exposition."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def of(vals: dict, name: str, **labels) -> float:
    want = {k: str(v) for k, v in labels.items()}
    found = [v for (n, ls), v in vals.items() if n == name and want.items() <= dict(ls).items()]
    assert len(found) == 1, f"{name} {labels}: {found}"
    return found[0]


def record_tick(instance: DagsterInstance, sensor: str, cursor: str | None, took_s: float, ago_s: float) -> None:
    """A finished tick of `sensor` that took `took_s` and ended `ago_s` ago, its cursor kept, as the
    daemon keeps them (the exporter reads the latest of every code location)."""
    origin = RemoteInstigatorOrigin(RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("matos"), "__repository__"),
                                    sensor)
    state = InstigatorState(origin, InstigatorType.SENSOR, InstigatorStatus.DECLARED_IN_CODE,
                            SensorInstigatorData(cursor=cursor, last_tick_timestamp=time.time() - ago_s,
                                                 sensor_type=None))
    if instance.get_instigator_state(state.instigator_origin_id, state.selector_id) is None:
        instance.add_instigator_state(state)
    else:
        instance.update_instigator_state(state)
    end = time.time() - ago_s
    instance.create_tick(TickData(instigator_origin_id=state.instigator_origin_id, instigator_name=sensor,
                                  instigator_type=InstigatorType.SENSOR, status=TickStatus.SKIPPED,
                                  timestamp=end - took_s, end_timestamp=end, selector_id=state.selector_id,
                                  skip_reason="recorded by the test", cursor=cursor))


def record_compact_run(instance: DagsterInstance, unmerged_from: dict[str, dict[str, int]]) -> None:
    """A compact run that succeeded, its output's metadata saying where each partition's unmerged ranges
    begin (jobs/compact.py writes `unmerged_from` so), as Dagster records a run's output."""
    run = instance.add_run(DagsterRun(job_name="compact", run_id=str(uuid.uuid4()), status=DagsterRunStatus.SUCCESS))
    output = StepOutputData(StepOutputHandle("compact_archive", "result"),
                            metadata={"unmerged_from": MetadataValue.json(unmerged_from)})
    instance.report_dagster_event(DagsterEvent(DagsterEventType.STEP_OUTPUT.value, "compact",
                                               step_key="compact_archive", event_specific_data=output), run.run_id)


def expiry_record(topic: str, expired: dict[int, int]) -> dict:
    """An expiry run's record, as expiry by age writes it when done: per topic its settings and, per
    partition, the records expired (and more the exporter does not read)."""
    return {"id": uuid.uuid4().hex, "done_at": "2026-01-01T00:00:00Z", "records_expired": sum(expired.values()),
            "topics": {topic: {"retention_days": 30, "stamped_before": 0,
                               "partitions": {str(p): {"records_expired": n, "objects_deleted": []}
                                              for p, n in expired.items()}}}}
