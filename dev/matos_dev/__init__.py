"""matos-dagster's development tooling, not part of the product's wheel: the local stack
(`python -m matos_dev.stack up`), the benchmarks (`python -m matos_dev.bench`) and the demo."""
