"""`python -m matos_dev.stack.with_postgres -- COMMAND`: run a command beside the local PostgreSQL.

`make run-postgres` runs `dg dev` this way: the server (.devstack/data/postgres) is started for
the command, its DAGSTER_PG_* settings are put in the command's environment, and the server is
stopped when the command ends.
"""

from __future__ import annotations

import argparse
import sys

from matos_dev.stack.postgres import PostgresError, run_with_server
from matos_dev.stack.stack import postgres_server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m matos_dev.stack.with_postgres",
        description="Run a command with the local PostgreSQL server (.devstack/data/postgres) started for it "
                    "and its DAGSTER_PG_* settings in the command's environment; stop the server after.")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command: e.g. python -m matos_dev.stack.with_postgres -- dg dev")
    try:
        return run_with_server(command, postgres_server())
    except PostgresError as e:
        print(f"{parser.prog}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
