"""`matos check`: before the first run, is every setting right? One line per part, OK or what to change.

Settings and the topics file first (no network), then Kafka with the configured security (every
topic of the topics file, and its group's committed offsets), Swift (authenticated, and the
container proven writable by a probe object, removed again), the Spark master, the slice reader
this installation has (native or Python: never a failure), and the Dagster instance. Each part within its configured timeout; a part that cannot be asked (its settings are
wrong) is skipped, said so. Exit status 0 when every part is OK, else 1.
"""

from __future__ import annotations

import shutil
import socket
import time
import uuid
from typing import Callable, Iterator
from urllib.parse import urlsplit

from matos_dagster.core import settings

OK, FAIL, SKIP = "OK", "FAIL", "SKIPPED"


def run(say: Callable[[str], None] = print) -> int:
    failed = False
    for part, status, text in parts():
        say(f"{part:<10} {status:<8} {text}")
        failed |= status != OK
    return 1 if failed else 0


def parts() -> Iterator[tuple[str, str, str]]:
    from matos_dagster.cli import archive

    problems = settings.problems(connections=not archive.named())  # a project's archive has its own
    if problems:
        yield "settings", FAIL, "; ".join(problems)
        for part in ("topics", "kafka", "swift", "spark", "reader", "dagster"):
            yield part, SKIP, "the settings must be right first"
        return
    yield "settings", OK, "every MATOS_ setting is valid"
    try:
        chosen = archive.current()
    except Exception as e:  # noqa: BLE001 - a broken topics file, or no such archive, names itself
        yield "topics", FAIL, str(e).splitlines()[0]
        for part in ("kafka", "swift", "spark", "reader", "dagster"):
            yield part, SKIP, "the topics must load first"
        return
    topics = chosen.topic_set
    yield "topics", OK, f"{chosen.origin}: {topics.describe()}"
    yield _part("kafka", lambda: _kafka(chosen.resource("kafka"), topics))
    yield _part("swift", lambda: _swift(chosen.resource("swift")))
    yield _part("spark", lambda: _spark(chosen.resource("spark")))
    yield _part("reader", _reader)
    yield _part("dagster", _dagster)


def _part(name: str, ask: Callable[[], str]) -> tuple[str, str, str]:
    started = time.monotonic()
    try:
        text = ask()
    except Exception as e:  # noqa: BLE001 - each part's own errors say what to change
        return name, FAIL, " ".join(str(e).split())
    return name, OK, f"{text} ({time.monotonic() - started:.1f}s)"


def _kafka(resource, topic_set) -> str:
    from matos_dagster.core.kafka import many
    from matos_dagster.core.kafka.errors import UnknownTopic

    kafka = resource.process_config_and_initialize()
    with kafka.kept_clients():
        existing = many.topics(kafka)
        resolved = topic_set.resolve(existing)
        if resolved.missing:
            raise UnknownTopic(f"topic {resolved.missing[0]!r} of the topics file does not exist on "
                               f"{kafka.bootstrap_servers}: create it, or take it out of the topics file")
        found, parts, done = [], 0, 0
        for group in sorted({t.group for t in resolved.topics}):
            mine = [t for t in resolved.topics if t.group == group]
            committed = many.committed(kafka, group, [(t.name, p) for t in mine for p in existing[t.name]])
            parts += len(committed)
            done += sum(o is not None for o in committed.values())
        for t in resolved.topics[:5]:
            found.append(f"{t.name} ({len(existing[t.name])} partitions)")
    more = f" and {len(resolved.topics) - 5} more" if len(resolved.topics) > 5 else ""
    matched = len(resolved.topics) - len(topic_set)
    by_pattern = f" ({matched} by pattern)" if topic_set.patterns else ""
    return (f"{kafka.bootstrap_servers} ({kafka.security_protocol}): {len(resolved.topics)} topic(s){by_pattern}, "
            f"{parts} partitions, committed on {done}: " + ", ".join(found) + more)


def _swift(resource) -> str:

    from matos_dagster.core.swift import layout
    from matos_dagster.core.swift.store import Store

    swift = resource.process_config_and_initialize()
    params = swift.params()
    with Store(params) as store:
        if not store.container_exists():  # authenticated: the first archive run creates the container
            return (f"{params.auth_url} (auth v{params.auth_version}): container {store.container} does not exist "
                    "yet; the first archive run creates it (private)")
        probe = layout.probe_name(params.prefix, uuid.uuid4().hex)
        store.put(probe, b"matos check: this object is removed at once")
        store.delete(probe)
    return f"{params.auth_url} (auth v{params.auth_version}): container {store.container} writable (probe written, removed)"


def _spark(resource) -> str:
    from dagster import EnvVar

    # Its setting resolved as a run resolves it (an EnvVar read now); no session is made.
    master = resource.master.get_value() if isinstance(resource.master, EnvVar) else resource.master
    master = (master or "").strip()
    if master.startswith("sc://"):
        from matos_dagster.resources.spark import _check_reachable

        _check_reachable(master, timeout_s=15.0)
        return f"Spark Connect server {master} answers"
    if master.startswith("local"):
        if not shutil.which("java") and not _java_home():
            raise RuntimeError(f"MATOS_SPARK_MASTER is {master}, a driver of its own, which needs Java 17 or later: "
                               "install it (apt-get install openjdk-17-jre-headless) or set JAVA_HOME")
        return f"{master}: each run starts its own Spark driver (Java found)"
    where = urlsplit(master)
    if where.hostname and where.port:
        socket.create_connection((where.hostname, where.port), timeout=10).close()
        return f"{master} answers"
    return f"{master}: not checked (only sc://, local and host:port masters are)"


def _reader() -> str:
    """Which slice reader this installation's tasks use: never a failure, the Python one writes the same bytes."""
    from matos_dagster.core.archive import native

    why = native.why_not()
    if why is None:
        return "native slice reader (C, librdkafka) of this installation; Spark workers use their own"
    return (f"Python slice reader ({why}); where librdkafka's header is, "
            "`python -m matos_dagster.core.archive.native.build` builds the native one")


def _java_home() -> bool:
    import os
    from pathlib import Path

    home = os.environ.get("JAVA_HOME")
    return bool(home) and (Path(home) / "bin" / "java").exists()


def _dagster() -> str:
    from dagster import DagsterInstance

    with DagsterInstance.get() as instance:
        kind = type(instance.run_storage).__name__
        return f"instance {instance.root_directory} opened ({kind})"
