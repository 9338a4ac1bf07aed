"""`python -m matos_dagster`: the same as the `matos` command (matos_dagster/cli)."""

import sys

from matos_dagster.cli import main

if __name__ == "__main__":
    sys.exit(main())
