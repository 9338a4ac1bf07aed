"""Session-wide real services: a Kafka broker, a Swift all-in-one, a local Spark session, a
Spark Connect server, and the project's Schema Registry stand-in (Confluent-compatible, not
Confluent's), each started on first use by a test that asks for it.

Each runs on free ports of 127.0.0.1 with its data in a temporary folder, and is stopped
by PID when the session ends. Downloads (Kafka's jars, Swift's virtual environment) are
cached in the project's `.devstack/cache`, shared with `make run`.

At its very end the session checks that it left no process running: every process it
started (servers, `dagster dev`, CLI runs, Spark JVMs and their Python workers) inherits
SESSION_VARIABLE from it, so whatever is still alive with this session's value is a leak:
it is named, stopped, and the session fails.
"""

from __future__ import annotations

import gc
import itertools
import os
import signal
import sys
import time
import uuid
from pathlib import Path

# The repository's development setup (core/settings.py): the connections default to the local stack,
# which the fixtures replace where a test needs its own. A test of the installed product unsets it.
os.environ.setdefault("MATOS_DEV", "true")

import pytest  # noqa: E402
from confluent_kafka.admin import NewTopic
from matos_dev.stack.kafka import KafkaServer
from matos_dev.stack.process import free_port
from matos_dev.stack.registry import RegistryServer
from matos_dev.stack.spark import SparkConnectServer
from matos_dev.stack.swift import SwiftServer

from matos_dagster.core.settings import PROJECT_ROOT
from matos_dagster.resources import KafkaResource, SparkResource, SwiftResource

CACHE = Path(os.environ.get("MATOS_DEVSTACK_DIR", PROJECT_ROOT / ".devstack")) / "cache"
OUTPUT = PROJECT_ROOT / "test-output"

# Not MATOS_*: tests that hand a CLI run a clean MATOS_ environment must still pass it on.
SESSION_VARIABLE = "PYTEST_MATOS_SESSION"
# How long the session's end waits for its processes to exit before it names them as left running
# (a server stopped just now may take a moment). tests/test_leak_check.py's nested sessions, whose
# forgotten process never exits by itself, wait less.
LEAK_GRACE_VARIABLE = "PYTEST_MATOS_LEAK_GRACE_S"


# --------------------------------------------------------------------------- no process left


def pytest_configure(config):
    # Set before any test starts a process, so each one (and each of its children) carries it.
    os.environ[SESSION_VARIABLE] = f"{os.getpid()}-{uuid.uuid4().hex}"
    # A session ended by SIGTERM (CI cancelling, `timeout`) tears its fixtures down as on
    # Ctrl-C, so it stops its servers too; Python's default would exit at once, leaving them.
    signal.signal(signal.SIGTERM, _interrupted)


def _interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def processes_of_this_session() -> dict[int, str]:
    """pid -> command line of each live process (zombies aside) started under this session."""
    mark = f"{SESSION_VARIABLE}={os.environ[SESSION_VARIABLE]}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
            environ = (entry / "environ").read_bytes()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone, or not ours to read
            continue
        if mark in environ.split(b"\0") and stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
            found[int(entry.name)] = cmd[:300]
    return found


def _stop_leftovers(leftovers: dict[int, str]) -> dict[int, str]:
    """SIGTERM, then SIGKILL after 20 s; what still runs then (ours: they carry our mark)."""
    for sig, wait_s in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        for pid in leftovers:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while (leftovers := {p: c for p, c in processes_of_this_session().items() if p in leftovers}) \
                and time.monotonic() < deadline:
            time.sleep(0.5)
        if not leftovers:
            break
    return leftovers


def pytest_collection_finish(session):
    """tests/test_install.py's wheel and fresh virtualenv are made in the background from the
    session's start, if a selected test there needs them (start_ahead)."""
    needs = [item for item in session.items if item.path.name == "test_install.py"
             and {"dist", "venv"} & set(item.fixturenames)]
    if needs:
        needs[0].module.start_ahead(session.config._tmp_path_factory,
                                    with_venv=any("venv" in item.fixturenames for item in needs))


@pytest.hookimpl(trylast=True)  # after pytest's own, which tears down what is left
def pytest_sessionfinish(session, exitstatus):
    """After every fixture is torn down: fail the session if any process of it still runs."""
    # Finalise the session's garbage now, before the terminal summary imports (and pytest rewrites,
    # parsing it with `ast`) the modules a plugin loads late (hypothesis'): a finalizer that logs a
    # traceback (SQLAlchemy's, for a connection of a disposed instance) run by a collection inside
    # that parse parses too, and CPython 3.11's AST builder then fails the session with
    # "AST constructor recursion depth mismatch".
    gc.collect()
    ahead = sys.modules.get("test_install")
    if ahead is not None and hasattr(ahead, "stop_ahead"):  # begun at the start, still going: stopped first
        ahead.stop_ahead()
    if "pyspark" in sys.modules:  # a classic Spark some test made without the fixture
        stop_local_spark()
    deadline = time.monotonic() + float(os.environ.get(LEAK_GRACE_VARIABLE, "30"))
    while (leftovers := processes_of_this_session()) and time.monotonic() < deadline:
        time.sleep(0.5)
    if not leftovers:
        return
    survivors = _stop_leftovers(leftovers)
    lines = [f"  {pid}: {cmd}" for pid, cmd in sorted(leftovers.items())]
    message = ("PROCESSES LEFT RUNNING by this test session (now stopped"
               + (f"; {len(survivors)} survived SIGKILL" if survivors else "") + "):\n" + "\n".join(lines))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("=", "leaked processes", red=True, bold=True)
        reporter.write_line(message)
    else:
        print(message)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


# --------------------------------------------------------------------------- servers


@pytest.fixture(scope="session")
def kafka_server(tmp_path_factory):
    server = KafkaServer(tmp_path_factory.mktemp("kafka"), CACHE, port=free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def swift_server(tmp_path_factory):
    server = SwiftServer(tmp_path_factory.mktemp("swift"), CACHE, proxy_port=free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    """What `make run` gives the runs: a long-lived Spark, its tasks tried up to 3 times."""
    server = SparkConnectServer(tmp_path_factory.mktemp("spark-connect"), port=free_port(), master="local[2,3]")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def registry_server(tmp_path_factory):
    """The Schema Registry stand-in (dev/matos_dev/stack/registry.py), without auth. Its subjects are
    shared by the whole session: a test names its own (a unique topic, say)."""
    server = RegistryServer(tmp_path_factory.mktemp("registry"), port=free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def kafka(kafka_server) -> KafkaResource:
    return KafkaResource(bootstrap_servers=kafka_server.bootstrap_servers, timeout_s=10)


@pytest.fixture
def swift(swift_server) -> SwiftResource:
    """A fresh container for each test, so tests never see each other's archives."""
    return SwiftResource(
        auth_url=swift_server.auth_url,
        user=swift_server.user,
        key=swift_server.key,
        container=f"test-{uuid.uuid4().hex[:10]}",
        prefix="kafka",
        retries=2,
    )


@pytest.fixture(scope="session")
def spark_resource() -> SparkResource:
    # Two cores: two tasks at once, and retries of a failed task like a cluster would.
    resource = SparkResource(master="local[2,3]", conf="spark.sql.shuffle.partitions=2")
    yield resource
    if resource._session is not None:
        resource._session.stop()
    stop_local_spark()


def stop_local_spark() -> None:
    """Stop this process's classic Spark and its JVM: pyspark keeps the JVM until Python exits
    otherwise, and the end of the session checks that none of its processes still runs."""
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    gateway = SparkContext._gateway
    if gateway is None:
        return
    gateway.shutdown()
    proc = getattr(gateway, "proc", None)  # pyspark's Popen of the JVM; it exits when stdin closes
    if proc is not None:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(60)
        except Exception:  # noqa: BLE001 - left to the session's leak check, which names it
            pass
    SparkContext._gateway = None
    SparkContext._jvm = None


@pytest.fixture(scope="session")
def spark(spark_resource):
    return spark_resource.spark_session


_topic_numbers = itertools.count()


@pytest.fixture
def new_topic(kafka):
    """Make a topic with a unique name: new_topic(partitions=1, **topic_config) -> name."""

    def make(partitions: int = 1, **config: str) -> str:
        name = f"t{next(_topic_numbers)}-{uuid.uuid4().hex[:8]}"
        admin = kafka.admin()  # must outlive the future, or the request is cancelled
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config)]
        )
        futures[name].result(timeout=30)
        return name

    return make


@pytest.fixture
def output_dir(request) -> Path:
    """A folder under test-output/ named after the test, for screenshots and reports."""
    path = OUTPUT / request.node.name
    path.mkdir(parents=True, exist_ok=True)
    return path


# --------------------------------------------------------------------------- Dagster's current storage


@pytest.fixture(autouse=True)
def _no_instance_left_current():
    """Dagster makes an entered instance's state storage the current one (a context variable, read
    whenever Definitions load), holding the instance by a weak reference. A test serving metrics
    leaves it set once its instance is no longer used; when that instance is collected, every later
    test loading Definitions fails with "Attempted to resolve undefined DagsterInstance weakref".
    Each test starts with none current (Definitions then load without saved state, as outside a
    deployment); a test that enters an instance sets its own."""
    from dagster._core.storage.defs_state.base import _current_storage

    _current_storage.set(None)
    yield
