"""`python -m matos_dev.stack up|down|status`: the local Kafka + Swift + Spark Connect stack,
with the project's Schema Registry stand-in.

    up      install what is missing, start Kafka, Swift, Spark Connect and the Schema
            Registry stand-in (if not running), wait until each answers, print where they are
    down    stop every process of the stack, by the PID recorded when it was started
    status  print each process's state, PID, port and log file; exit 0 if all run, else 1
    shard   shard a container of the local Swift with Swift's own sharder, as an operator
            does (`shard [CONTAINER] --rows N`; see the README, "Objects per Swift container")

Settings (see matos_dagster/core/settings.py): MATOS_DEVSTACK_DIR, MATOS_DEVSTACK_CACHE,
MATOS_DEVSTACK_KAFKA_PORT, MATOS_DEVSTACK_SWIFT_PORT, MATOS_DEVSTACK_SPARK_PORT,
MATOS_DEVSTACK_REGISTRY_PORT; and
MATOS_DEVSTACK_DAGSTER_STORAGE=postgres, with which `up` also starts a PostgreSQL server for
the production instance (dagster.postgres.yaml) and prints its DAGSTER_PG_* settings.

The Spark Connect server reuses its Python workers, which keep the modules they imported:
after changing the project's code, run `down` and `up` again for Spark tasks to see it.

A new subcommand is one more entry in COMMANDS: a function taking the parsed arguments
and returning the exit code, its help line, and optionally a function adding its options.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable, NamedTuple

from matos_dagster.core import settings
from matos_dev.stack.kafka import KAFKA_VERSION
from matos_dev.stack.keystone import KEYSTONE_VERSION
from matos_dev.stack.registry import NAME as REGISTRY_NAME
from matos_dev.stack.stack import (
    LocalStack,
    StackError,
    check_ports,
    keystone_enabled,
    keystone_server,
    local_stack,
    locked,
    postgres_enabled,
    postgres_server,
    registry_server,
    servers,
)
from matos_dev.stack.swift import SWIFT_VERSION

PROG = "python -m matos_dev.stack"


def up(args: argparse.Namespace) -> int:
    began = time.monotonic()
    stack = local_stack()
    kafka, swift, spark = stack
    postgres = postgres_server() if postgres_enabled() else None  # a wrong setting fails before anything starts
    with locked():
        check_ports(stack)
        if not kafka.installed():
            _say(f"Fetching the Kafka {KAFKA_VERSION} jars with Maven into {kafka.cache_dir} (once) ...")
        kafka.install()
        if not swift.installed():
            _say(f"Installing Swift {SWIFT_VERSION} into {swift.venv} (once) ...")
        swift.install()

        kafka_was_running = kafka.running()
        t = time.monotonic()
        kafka.start()
        _say(f"Kafka {KAFKA_VERSION}: {_how(kafka_was_running, t)}")
        keystone = keystone_server() if keystone_enabled() else None
        if keystone is not None:  # before Swift, whose proxy validates tokens with it
            if not keystone.installed():
                _say(f"Installing Keystone {KEYSTONE_VERSION} into {keystone.venv} (once) ...")
            keystone_was_running = keystone.running()
            t = time.monotonic()
            try:
                keystone.start()
            except BaseException:
                if not kafka_was_running:
                    kafka.stop()
                raise
            _say(f"Keystone {KEYSTONE_VERSION}: {_how(keystone_was_running, t)}")
        swift_was_running = swift.running()
        t = time.monotonic()
        try:
            swift.start()  # all or nothing: stops its servers again if it fails
        except BaseException:
            if keystone is not None and not keystone_was_running:
                keystone.stop()
            if not kafka_was_running:
                kafka.stop()  # leave things as they were
            raise
        _say(f"Swift {SWIFT_VERSION}: {_how(swift_was_running, t)}")
        spark_was_running = spark.running()
        t = time.monotonic()
        try:
            spark.start()  # stops its process again if it fails
        except BaseException:
            if not swift_was_running:
                swift.stop()
            if keystone is not None and not keystone_was_running:
                keystone.stop()
            if not kafka_was_running:
                kafka.stop()
            raise
        _say(f"Spark Connect {spark.version}: {_how(spark_was_running, t)}")
        registry = registry_server()
        registry_was_running = registry.running()
        t = time.monotonic()
        try:
            registry.start()  # stops its process again if it fails
        except BaseException:
            for server, was_running in ((spark, spark_was_running), (swift, swift_was_running),
                                        (keystone, keystone is None or keystone_was_running),
                                        (kafka, kafka_was_running)):
                if not was_running:
                    server.stop()
            raise
        _say(f"{REGISTRY_NAME}: {_how(registry_was_running, t)}")
        if postgres is not None:
            postgres_was_running = postgres.running()
            t = time.monotonic()
            try:
                postgres.start()  # stops it again if it fails
            except BaseException:
                for server, was_running in ((registry, registry_was_running),
                                            (spark, spark_was_running), (swift, swift_was_running),
                                            (keystone, keystone is None or keystone_was_running),
                                            (kafka, kafka_was_running)):
                    if not was_running:
                        server.stop()
                raise
            _say(f"PostgreSQL: {_how(postgres_was_running, t)}")

    print(f"\nThe local stack is up ({time.monotonic() - began:.1f} s).")
    print(f"  Kafka bootstrap servers  {kafka.bootstrap_servers}")
    if keystone is None:
        print(f"  Swift auth URL           {swift.auth_url}  (auth v1.0, user {swift.user}, key {swift.key})")
    else:
        print(f"  Keystone v3              {keystone.auth_url}  (Swift proxy {swift.url})")
        print(f"  Its credentials are in {keystone.state_file}; for the archive, as user id + project id:")
        for name, value in keystone.settings("user_id").items():
            if name == "MATOS_SWIFT_KEY":  # the password: read from the file, not shown
                value = (f"$({sys.executable} -c \"import json; print(json.load(open('{keystone.state_file}'))"
                         f"['archiver_password'])\")")
            print(f"    export {name}={value}")
    print(f"  Spark Connect            {spark.url}  ({spark.master})")
    print(f"  Schema Registry stand-in {registry.url}  (the project's own, Confluent-compatible; not Confluent's)")
    if postgres is not None:
        print(f"  PostgreSQL               {postgres.url().replace(postgres.password, '***')}")
        print("  For the production instance (dagster.postgres.yaml in DAGSTER_HOME):")
        for name, value in postgres.instance_env().items():
            if name == "DAGSTER_PG_PASSWORD":  # read from the file, not shown
                value = (f"$({sys.executable} -c \"import json; print(json.load(open('{postgres.state_file}'))"
                         f"['password'])\")")
            print(f"    export {name}={value}")
    _hint("MATOS_KAFKA_BOOTSTRAP_SERVERS", kafka.bootstrap_servers)
    _hint("MATOS_SWIFT_AUTH_URL", keystone.auth_url if keystone else swift.auth_url)
    _hint("MATOS_SPARK_MASTER", spark.url)
    print("  Logs")
    rows = servers(stack)
    width = max(len(s.name) for s in rows)
    for server in rows:
        print(f"    {server.name:<{width}} {server.log_file}")
    print(f"  Stop it with: {PROG} down")
    return 0


def down(args: argparse.Namespace) -> int:
    began = time.monotonic()
    stack = local_stack()
    with locked():
        running = [s for s in servers(stack) if s.pid is not None]
        registry_server().stop()
        stack.spark.stop()
        stack.swift.stop()
        keystone_server().stop()  # if it runs, whatever MATOS_DEVSTACK_AUTH says now
        postgres_server().stop()  # likewise, whatever MATOS_DEVSTACK_DAGSTER_STORAGE says
        stack.kafka.stop()
    if not running:
        print("The local stack was not running.")
        return 0
    width = max(len(s.name) for s in running)
    for server in running:
        print(f"stopped {server.name:<{width}} PID {server.pid}")
    print(f"The local stack is down ({time.monotonic() - began:.1f} s).")
    return 0


def status(args: argparse.Namespace) -> int:
    stack = local_stack()
    rows = servers(stack)
    width = max(len(s.name) for s in rows)
    for s in rows:
        state = "running" if s.pid is not None else "stopped"
        pid = f"PID {s.pid}" if s.pid is not None else "-"
        port = f"port {s.port}" if s.port else "-"
        print(f"{s.name:<{width}} {state:<8} {pid:<10} {port:<10} log {s.log_file}")
    _print_endpoints(stack)
    all_running = all(s.pid is not None for s in rows)
    print("All running." if all_running else "Not (all) running: start it with " f"{PROG} up")
    return 0 if all_running else 1


class Command(NamedTuple):
    run: Callable[[argparse.Namespace], int]
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None


def demo_data(args: argparse.Namespace) -> int:
    from dagster import DagsterInstance

    from matos_dagster import instance as home
    from matos_dev.demo import load_demo_data

    os.environ["DAGSTER_HOME"] = str(home.prepare())  # created once, under its lock
    with DagsterInstance.get() as instance:
        load_demo_data(instance)
    return 0


def demo(args: argparse.Namespace) -> int:
    from dagster import DagsterInstance

    from matos_dagster import instance as home
    from matos_dev.demo import run_demo

    os.environ["DAGSTER_HOME"] = str(home.prepare())  # created once, under its lock
    with DagsterInstance.get() as instance:
        run_demo(instance)
    return 0


def shard(args: argparse.Namespace) -> int:
    if args.rows < 1:
        raise ValueError(f"--rows is {args.rows}: give the rows (objects) per shard range, at least 1")
    swift = local_stack().swift
    if not swift.running():
        raise StackError(f"the local Swift is not running: start it with {PROG} up")
    container = args.container or settings.get("MATOS_SWIFT_CONTAINER")
    account = args.account or swift.account
    state = swift.sharding(container, account)
    if state["state"] == "sharded":
        print(f"{account}/{container} is sharded already, in {len(state['shard_ranges'])} shard ranges.")
    else:
        rows = state["object_count"]
        _say(f"Sharding {account}/{container} ({rows} objects) into shard ranges of {args.rows} rows ...")
        state = swift.shard(container, args.rows, account)
        print(f"{account}/{container} is sharded: {len(state['shard_ranges'])} shard ranges, "
              f"{state['passes']} sharder passes, {state['seconds']:.1f} s (log {swift.sharder_log}).")
    for r in state["shard_ranges"]:
        print(f"  {r['object_count']:>9} rows  {r['state']:<8} ({r['lower'] or '-'!r}, {r['upper'] or '+'!r}]")
    return 0


def _shard_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("container", nargs="?", help="the container (default: MATOS_SWIFT_CONTAINER)")
    parser.add_argument("--rows", type=int, required=True,
                        help="rows (objects) per shard range; production: 500000, Swift's rows_per_shard")
    parser.add_argument("--account", help="the account (default: the local Swift's tempauth account, AUTH_test)")


COMMANDS: dict[str, Command] = {
    "up": Command(up, "install what is missing, start Kafka, Swift, Spark Connect and the Schema Registry "
                      "stand-in, wait until each answers"),
    "down": Command(down, "stop the Schema Registry stand-in, Spark Connect, Swift and Kafka (by the PIDs "
                          "recorded when they started)"),
    "status": Command(status, "show PIDs, ports and log files; exit 0 if all run, 1 otherwise"),
    "demo-data": Command(demo_data, "produce demo records to the `demo` topic (needs the stack up)"),
    "demo": Command(demo, "load demo records, archive everything pending, print where it is in Swift"),
    "shard": Command(shard, "shard a container of the local Swift with Swift's own sharder (operator-driven)",
                     _shard_arguments),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="The local stack: a Kafka broker, a Swift all-in-one, a Spark Connect server and the "
                    "project's Schema Registry stand-in on 127.0.0.1.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, command in COMMANDS.items():
        sub = subparsers.add_parser(name, help=command.help, description=command.help)
        if command.add_arguments is not None:
            command.add_arguments(sub)
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command].run(args)
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return 130
    except (StackError, RuntimeError, OSError, ValueError) as e:
        # Expected failures (a port taken, no java, a server that did not start): the
        # message says what and where to look; a traceback would only hide it.
        print(f"{PROG} {args.command}: error: {e}", file=sys.stderr)
        return 1


def _say(line: str) -> None:
    print(line, flush=True)


def _how(was_running: bool, since: float) -> str:
    return "already running" if was_running else f"started in {time.monotonic() - since:.1f} s"


def _hint(name: str, value: str) -> None:
    if settings.get(name) != value:
        print(f"  (set {name}={value} for the archive to use it; it is {settings.get(name)!r})")


def _print_endpoints(stack: LocalStack) -> None:
    print(f"Kafka bootstrap servers: {stack.kafka.bootstrap_servers}")
    if stack.swift.keystone:
        print(f"Keystone v3 auth URL: {keystone_server().auth_url} (Swift proxy {stack.swift.url})")
    else:
        print(f"Swift auth URL: {stack.swift.auth_url} (user {stack.swift.user})")
    print(f"Spark Connect: {stack.spark.url}")
    print(f"{REGISTRY_NAME}: {registry_server().url} (the project's own, not Confluent's)")


if __name__ == "__main__":
    sys.exit(main())
