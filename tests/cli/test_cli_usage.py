"""The command line as users expect it: an installed `matos`, --version, help with an example for
every command, a command for every job, and every refusal before the network in one line."""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import os
import shlex
import socket
import subprocess
import sys
import threading
import tomllib
from pathlib import Path

import pytest
from helpers import new_instance

from matos_dagster.cli import jobs, parser
from matos_dagster.core.settings import PROJECT_ROOT

MATOS = [sys.executable, "-m", "matos_dagster"]


def subcommands() -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_matos_is_an_installed_command_with_a_version():
    matos = Path(sys.executable).parent / "matos"
    p = subprocess.run([str(matos), "--version"], capture_output=True, text=True, timeout=120)
    version = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert p.returncode == 0 and p.stdout.strip() == f"matos {version}", p.stdout + p.stderr
    p = subprocess.run([*MATOS, "--version"], capture_output=True, text=True, timeout=120)
    assert p.stdout.strip() == f"python -m matos_dagster {version}"


@pytest.mark.parametrize("name", sorted(subcommands()))
def test_every_command_has_a_description_an_example_and_help_for_each_argument(name):
    command = subcommands()[name]
    assert command.description and len(command.description) > 20, name
    assert command.epilog and command.epilog.startswith("example:\n  matos "), name
    for action in command._actions:
        if not isinstance(action, argparse._HelpAction):
            assert action.help, f"{name}: {action.dest} has no help"
    # The example parses: it is a command this parser takes.
    parser().parse_args(shlex.split(command.epilog.split("\n  matos ", 1)[1]))


def test_every_job_that_takes_config_has_a_command():
    from matos_dagster import definitions
    commanded = {c.job for c in jobs.COMMANDS} | {"add_ranges", "backfill", "acknowledge_loss",
                                                  "archive_ranges",  # archive --one-run
                                                  "forget"}  # matos forget: the request, then the job
    with_config = {j.name for j in definitions.defs.resolve_all_job_defs()
                   # monitor_, days_, hours_: run by their schedule or sensor (a day's job takes a
                   # partition key, as `dagster asset materialize --partition` gives it, no config).
                   if not j.name.startswith(("monitor_", "days_", "hours_", "__ASSET_JOB")) and any(
                       n.definition.config_schema is not None and n.definition.config_schema.as_field().is_required
                       or n.definition.config_field is not None for n in j.nodes)}
    assert with_config <= commanded, with_config - commanded
    assert "monitor" in subcommands() and "check" in subcommands()


@contextlib.contextmanager
def listener():
    """A port that takes connections and counts them: the network a refusal must not reach.
    127.0.0.1:PORT, and the connections it took while open."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.settimeout(0.2)
    accepted = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}", accepted
    finally:
        stop.set()
        thread.join(5)
        for conn in accepted:
            conn.close()
        server.close()


def offline(tmp_path, bootstrap: str, **settings: str) -> dict:
    (tmp_path / "topics.yaml").write_text("topics:\n  - name: demo\n")
    home = new_instance(tmp_path / "dagster_home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MATOS_") or k in ("MATOS_DEVSTACK_DIR", "MATOS_DEV")}
    return {**env, "DAGSTER_HOME": str(home), "MATOS_TOPICS_FILE": str(tmp_path / "topics.yaml"),
            "MATOS_KAFKA_BOOTSTRAP_SERVERS": bootstrap, **settings}


REFUSALS = [
    (["add-ranges", "demo", "--start", "10", "--end", "5"], {},
     "add-ranges: --end (5) must be greater than --start (10): a range is [start, end)"),
    (["add-ranges", "demo", "--partition", "-3"], {}, "add-ranges: --partition must be -1 (not given) or >= 0, got -3"),
    (["add-ranges", "nosuch"], {}, "add-ranges: topic 'nosuch' is not in the topics file"),
    (["add-ranges", "demo"], {"MATOS_KAFKA_TIMEOUT_S": "abc"},
     "add-ranges: MATOS_KAFKA_TIMEOUT_S is 'abc': it takes a whole number of seconds, 1 or more"),
    (["archive", "demo:p0:1-2"], {}, "archive: "),
    (["verify", "demo", "--sample", "-5"], {}, "verify: --sample must be -1 or more, got -5"),
    (["compact", "demo"], {"MATOS_SWIFT_VERIFY_TLS": "0"},
     "compact: MATOS_SWIFT_VERIFY_TLS is '0': it takes one of true, false"),
    (["backfill", "demo"], {"MATOS_SENSOR_INTERVAL_S": "soon"},
     "backfill: MATOS_SENSOR_INTERVAL_S is 'soon': it takes a whole number of seconds, 1 or more"),
    (["monitor", "demo"], {"MATOS_MONITOR_INTERVAL_S": "every five minutes"},
     "monitor: MATOS_MONITOR_INTERVAL_S is 'every five minutes': it takes a whole number of seconds"),
    (["load", "demo"], {"MATOS_NATIVE_READER": "0"}, "load: MATOS_NATIVE_READER is '0': it takes one of true, false"),
    (["forget", "--topic", "demo", "--key", "hex:0g", "--reason", "t"], {},
     "forget: --key: after `hex:` give an even number of hex digits"),
    (["forget", "--topic", "demo", "--key", "customer-42", "--reason", "t"], {},
     "forget: MATOS_ERASURE_KEY is not set"),
    (["forget", "--topic", "demo", "--key", "customer-42"], {}, "forget: --reason is missing: say why"),
    (["forget", "--topic", "demo", "--index", "--key", "customer-42"], {},
     "forget: --index erases nothing: give it --topic only"),
]


@pytest.fixture(scope="module")
def refusal_runs(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, list]]:
    """Each refusal's command in a process of its own, four at a time (the 2-core machine runs two
    interpreters' start-up at a time instead of one), each with its own listening port and folder:
    its result and the connections its port took."""
    def one(args, settings, bootstrap, folder):
        return subprocess.run([*MATOS, *args], env=offline(folder, bootstrap, **settings), cwd=folder,
                              capture_output=True, text=True, timeout=300)

    with contextlib.ExitStack() as stack, concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        started = {}
        for args, settings, _ in REFUSALS:
            bootstrap, accepted = stack.enter_context(listener())
            started[refusal_id(args, settings)] = (
                pool.submit(one, args, settings, bootstrap, tmp_path_factory.mktemp("refusal")), accepted)
        return {name: (run.result(), list(accepted)) for name, (run, accepted) in started.items()}


def refusal_id(args, settings) -> str:
    return " ".join(args) + "".join(settings)


@pytest.mark.parametrize("args,settings,message", REFUSALS, ids=[refusal_id(a, s) for a, s, _ in REFUSALS])
def test_a_bad_argument_or_setting_is_one_line_and_never_reaches_kafka(refusal_runs, args, settings, message):
    p, accepted = refusal_runs[refusal_id(args, settings)]
    assert p.returncode == 2 and p.stdout == "", p.stdout + p.stderr
    assert len(p.stderr.splitlines()) == 1 and p.stderr.startswith(f"python -m matos_dagster {message}"), p.stderr
    assert accepted == [], "the refusal contacted Kafka first"


def test_an_unreachable_broker_is_one_line_not_hundreds(tmp_path):
    """Nothing listens: librdkafka retries every few ms and logs each try, to Python logging
    only, so the user sees the project's one line (it was 292 lines before it)."""
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = offline(tmp_path, f"127.0.0.1:{port}", MATOS_KAFKA_TIMEOUT_S="3")
    p = subprocess.run([*MATOS, "add-ranges", "demo"], env=env, cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 2 and p.stdout == "", p.stderr
    assert len(p.stderr.splitlines()) == 1, p.stderr
    assert p.stderr.startswith(f"python -m matos_dagster add-ranges: Kafka at 127.0.0.1:{port} (PLAINTEXT) did not "
                               "answer within 3s"), p.stderr
    assert "check MATOS_KAFKA_BOOTSTRAP_SERVERS" in p.stderr and "KafkaError{" not in p.stderr

    # -v shows librdkafka's log: each kind of line once, however often librdkafka wrote it.
    p = subprocess.run([*MATOS, "-v", "add-ranges", "demo"], env=env, cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    refused = [line for line in p.stderr.splitlines() if "matos_dagster.librdkafka" in line and "Connection refused" in line]
    assert len(refused) == 1, p.stderr[-3000:]
