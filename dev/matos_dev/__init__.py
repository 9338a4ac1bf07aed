"""matos-dagster's development tooling, not part of the product's wheel: the local stack
(`python -m matos_dev.stack up`), the benchmarks (`python -m matos_dev.bench`) and the demo."""

import os

# The development tooling is the development setup: the connections default to the local stack.
os.environ.setdefault("MATOS_DEV", "true")
