"""The logic of the archive, without Dagster: every module here runs the same under Dagster, a CLI,
a Spark worker or a test (tests/test_package_layout.py keeps Dagster and the shell out)."""
