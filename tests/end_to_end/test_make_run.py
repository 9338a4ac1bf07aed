"""`make run` is the whole product on one machine: stack, demo records, UI, automatic archiving."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from helpers import check_archive, manifests, read_archive, read_kafka
from matos_dev.stack import process
from matos_dev.stack.process import free_port

from matos_dagster.core.settings import PROJECT_ROOT
from matos_dagster.resources import KafkaResource, SwiftResource

CACHE = PROJECT_ROOT / ".devstack" / "cache"


def stack_env(devstack: Path) -> tuple[dict[str, str], int]:
    """The environment of a `make run` on free loopback ports in its own devstack folder (the
    shared jar and venv cache reused), with the sensor every 5 s (the daemon's shortest loop); and
    the UI's port."""
    kport, sport, cport, dport = free_port(), free_port(), free_port(), free_port()
    env = {
        **os.environ,
        "MATOS_DEVSTACK_DIR": str(devstack),
        "MATOS_DEVSTACK_CACHE": os.environ.get("MATOS_DEVSTACK_CACHE") or str(CACHE),
        "MATOS_DEVSTACK_KAFKA_PORT": str(kport),
        "MATOS_DEVSTACK_SWIFT_PORT": str(sport),
        "MATOS_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{kport}",
        "MATOS_SWIFT_AUTH_URL": f"http://127.0.0.1:{sport}/auth/v1.0",
        "MATOS_DEVSTACK_SPARK_PORT": str(cport),
        "MATOS_SPARK_MASTER": f"sc://127.0.0.1:{cport}",  # the stack's Spark Connect server, like the default
        "MATOS_SENSOR_INTERVAL_S": "5",
    }
    return env, dport


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def test_make_run_brings_up_everything_and_archives_the_demo_records(tmp_path, output_dir):
    env, dport = stack_env(tmp_path / "devstack")
    log = open(output_dir / "make-run.log", "wb")
    make = subprocess.Popen(["make", "run", f"DAGSTER_PORT={dport}"], cwd=PROJECT_ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    kafka = KafkaResource(bootstrap_servers=env["MATOS_KAFKA_BOOTSTRAP_SERVERS"], timeout_s=5)
    try:
        # Generous bounds: on a loaded 2-core machine the stack alone took over 4 minutes.
        deadline = time.monotonic() + 600
        while not answers(f"http://127.0.0.1:{dport}/server_info"):
            assert make.poll() is None, (output_dir / "make-run.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the UI did not answer within 600 s"
            time.sleep(2)
        # The demo records are archived by the sensor, with nobody asking.
        deadline = time.monotonic() + 600
        while True:
            parts = kafka.partitions("demo")
            marks = kafka.watermarks("demo", parts)
            ends = {p: h for p, (_, h) in marks.items()}
            if sum(ends.values()) >= 20_000 and kafka.committed("demo", parts) == ends:
                break
            assert time.monotonic() < deadline, f"not archived within 600 s: {kafka.committed('demo', parts)} of {ends}"
            time.sleep(2)
        # ... and really in Swift: every demo record, once, equal to Kafka's in every field.
        swift = SwiftResource(auth_url=env["MATOS_SWIFT_AUTH_URL"], user="test:tester", key="testing",
                              container="matos-archive")
        with swift.store() as store:
            assert check_archive(kafka, store, "demo", "matos-archiver") == ends
            docs = sorted(manifests(store, "demo"), key=lambda m: (m["partition"], m["start"]))
            assert sum(d["records"] for d in docs) == sum(h - low for low, h in marks.values())
            for p in parts:
                archived = [r for d in docs if d["partition"] == p for r in read_archive(store, d)]
                assert archived == read_kafka(kafka, "demo", p), f"partition {p}: the archive differs from Kafka"
    finally:
        # Whatever failed above (or here), `make down` runs: it stops the stack's servers.
        try:
            with contextlib.suppress(ProcessLookupError):  # make's group may be gone already
                os.killpg(make.pid, signal.SIGTERM)
            try:
                make.wait(60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(make.pid, signal.SIGKILL)
                make.wait(30)
        finally:
            subprocess.run(["make", "down"], cwd=PROJECT_ROOT, env=env, capture_output=True, timeout=300)
            log.close()
    status = subprocess.run(["make", "status"], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True)
    assert status.returncode != 0, "the stack is still running after make down"
    assert group_gone(make.pid, 60), f"left behind: {group_members(make.pid)}"


group_members = process.group_members  # the name test_make_run_postgres imports


def group_gone(pgid: int, timeout: float) -> bool:
    """Dagster's processes shut down after `make` itself has exited: give them a moment."""
    deadline = time.monotonic() + timeout
    while group_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(1)
    return True
