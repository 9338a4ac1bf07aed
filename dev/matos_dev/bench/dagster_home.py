"""`DAGSTER_HOME` after a simulated month, with and without the retention job's rules for runs.

Runs are synthesised cheaply from two real templates (two runs made by the history benchmark on
the same SQLite instance): each copy is the template's run record
under a new id plus a copy of its per-run event-log file, so it costs what the template costs
on disk. The bytes a run costs are measured over the copies; the month without retention is
that times the month's runs; the month with retention is measured after the job's run rules
(`delete_runs`, the default `MATOS_KEEP_RUNS`) ran over more copies than they keep, which is
where the size stays whatever the elapsed time. In-process runs capture no compute logs; a run
worker's compute logs are deleted with its run by the same rules.
"""

from __future__ import annotations

import math
import os
import shutil
import time
import uuid

from dagster import DagsterRunStatus

from matos_dagster.core.runs.retention import Policy
from matos_dagster.dagster_compat import event_log_shard
from matos_dagster.jobs.retention import delete_runs

RANGE_EVERY_S = 25  # a range per partition every 20-30 s at the default batch policy
SENSOR_INTERVAL_S = 30  # MATOS_SENSOR_INTERVAL_S: a tick with ranges due requests one archive_ranges run
RUN_MAX_RANGES = 1000  # MATOS_RUN_MAX_RANGES: the ranges one run carries at most
SCHEDULED_PER_DAY = 2 * 24  # the compact and retention schedules, hourly each


def folder_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def month_runs(partitions: int, days: int = 30) -> dict:
    """A month's runs at the default policy with records arriving all the time: each sensor tick
    requests one `archive_ranges` run for every range due, of every partition (a few when more than
    RUN_MAX_RANGES are due), and the compaction and retention schedules run hourly. The monitor and
    the days are the sensors' evaluations, recorded without a run."""
    ticks = days * 86_400 // SENSOR_INTERVAL_S
    due = partitions * SENSOR_INTERVAL_S / RANGE_EVERY_S  # ranges due a tick
    return {"archive": ticks * max(1, math.ceil(due / RUN_MAX_RANGES)), "scheduled": days * SCHEDULED_PER_DAY}


def simulate_month(instance, home: str, archive_run_id: str, monitor_run_id: str, say, partitions: int = 4,
                   copies_per_job: int = 1500) -> dict:
    policy = Policy()
    if copies_per_job <= policy.keep_runs:
        raise ValueError("simulate more runs a job than retention keeps")
    before = folder_bytes(home)
    t = time.monotonic()
    for template_id in (archive_run_id, monitor_run_id):
        template = instance.get_run_by_id(template_id)
        shard = event_log_shard(instance, template_id)
        for _ in range(copies_per_job):
            run_id = str(uuid.uuid4())  # what Dagster uses for run ids
            instance.add_run(template._replace(run_id=run_id, status=DagsterRunStatus.SUCCESS))
            if shard and os.path.exists(shard):
                shutil.copyfile(shard, event_log_shard(instance, run_id))
    synth_s = time.monotonic() - t
    after = folder_bytes(home)
    per_run = (after - before) / (2 * copies_per_job)
    runs = month_runs(partitions)
    t = time.monotonic()
    deleted = delete_runs(instance, policy, dry_run=False)
    retention_s = time.monotonic() - t
    kept = folder_bytes(home)
    out = {
        "partitions": partitions, "month_runs": runs, "bytes_per_run": per_run,
        "synthesised_runs": 2 * copies_per_job, "synthesise_s": synth_s,
        "bytes_before_retention": after, "runs_deleted": deleted, "retention_s": retention_s,
        "bytes_with_retention": kept, "keep_runs": policy.keep_runs,
        "month_bytes_without_retention": per_run * sum(runs.values()) + before,
    }
    say(f"DAGSTER_HOME: {per_run / 1024:.0f} KiB a run; a month at {partitions} partitions "
        f"({sum(runs.values()):,} runs) without retention {out['month_bytes_without_retention'] / 1e9:.1f} GB; "
        f"with retention {kept / 1e6:.0f} MB ({deleted} of {2 * copies_per_job} runs deleted in {retention_s:.0f}s)")
    return out
