# matos-dagster: `make run` for the whole product on this machine, `make test` for the tests.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NATIVE := matos_dagster/core/archive/native/_slice_reader.so
# The repository's development setup: the connections default to the local stack (core/settings.py).
export MATOS_DEV := true
export MATOS_DEVSTACK_DIR ?= $(CURDIR)/.devstack
export DAGSTER_HOME := $(MATOS_DEVSTACK_DIR)/dagster
DAGSTER_PORT ?= 3000
PYTEST_TIMEOUT ?= 1200

.PHONY: install run run-postgres up down status demo test test-all test-python-reader docs bench bench-peer bench-history bench-compaction bench-days bench-estate bench-ui bench-metrics bench-erasure bench-expiry clean

install: $(STAMP) $(NATIVE)

# The venv is rebuilt whenever pyproject.toml changes.
$(STAMP): pyproject.toml dev/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,docs]' -e ./dev
	touch $(STAMP)

# The native slice reader (matos_dagster/core/archive/native): built with `cc` where librdkafka's header is
# (Debian: librdkafka-dev); where it cannot be, the build says why and the Python reader is used.
$(NATIVE): matos_dagster/core/archive/native/slice_reader.c matos_dagster/core/archive/native/build.py $(STAMP)
	$(BIN)/python -m matos_dagster.core.archive.native.build

$(DAGSTER_HOME)/dagster.yaml: dagster.yaml
	mkdir -p $(DAGSTER_HOME)
	cp dagster.yaml $(DAGSTER_HOME)/dagster.yaml

# Also the Dagster instance, so the README's DAGSTER_HOME=$PWD/.devstack/dagster works with the
# stack alone (no `make run` needed): its storage is created once, under a lock, before anything
# may open it (matos_dagster/instance.py: two processes creating it at once break it for good).
up: install $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/python -m matos_dagster.instance $(DAGSTER_HOME)
	$(BIN)/python -m matos_dev.stack up

down:
	$(BIN)/python -m matos_dev.stack down

status:
	$(BIN)/python -m matos_dev.stack status

# The local stack, then the Dagster UI and daemon on http://127.0.0.1:3000 (Ctrl-C stops Dagster;
# `make down` stops Kafka, Swift and Spark Connect).
# Demo records are loaded only into an empty `demo` topic. `dg dev` runs in DAGSTER_HOME: run
# elsewhere, Dagster warns that the project's dagster.yaml (the template copied there) is unused.
# The archive's typed columns ask the local stack's Schema Registry stand-in, unless told otherwise.
MATOS_DEVSTACK_REGISTRY_PORT ?= 8081
run run-postgres demo: export MATOS_SCHEMA_REGISTRY_URL ?= http://127.0.0.1:$(MATOS_DEVSTACK_REGISTRY_PORT)

run: up
	$(BIN)/python -m matos_dev.stack demo-data
	cd $(DAGSTER_HOME) && $(CURDIR)/$(BIN)/dg dev -w $(CURDIR)/workspace.yaml -h 127.0.0.1 -p $(DAGSTER_PORT)

# `make run` on the production instance (dagster.postgres.yaml) instead of sqlite: the stack,
# then the local PostgreSQL server (.devstack/data/postgres) started for the demo records' load
# and `dg dev`, and stopped by its PID when `dg dev` ends (Ctrl-C); its own DAGSTER_HOME, so the
# sqlite instance stays as it is (the load's run too is stored in PostgreSQL).
DAGSTER_PG_HOME := $(MATOS_DEVSTACK_DIR)/dagster-pg
$(DAGSTER_PG_HOME)/dagster.yaml: dagster.postgres.yaml
	mkdir -p $(DAGSTER_PG_HOME)
	cp dagster.postgres.yaml $(DAGSTER_PG_HOME)/dagster.yaml

run-postgres: up $(DAGSTER_PG_HOME)/dagster.yaml
	DAGSTER_HOME=$(DAGSTER_PG_HOME) $(BIN)/python -m matos_dev.stack.with_postgres -- sh -c \
		'$(BIN)/python -m matos_dagster.instance && $(BIN)/python -m matos_dev.stack demo-data && \
		cd $(DAGSTER_PG_HOME) && \
		exec $(CURDIR)/$(BIN)/dg dev -w $(CURDIR)/workspace.yaml -h 127.0.0.1 -p $(DAGSTER_PORT)'

demo: up
	$(BIN)/python -m matos_dev.stack demo

# The crash proofs (faults, two runs of one range, scale-out, the secret search) are in
# `make test`; `slow` (make test-all only): what needs tens of minutes (the soak, ten quiet
# minutes), and variants whose claim a `make test` case proves already (pyproject.toml). The
# slowest tests are listed at the end; the session fails if a process it started still runs.
test: install
	$(BIN)/python -m pytest -m "not slow" --timeout=$(PYTEST_TIMEOUT) --durations=25 --junitxml=test-output/junit.xml

test-all: install
	$(BIN)/python -m pytest --timeout=$(PYTEST_TIMEOUT) --durations=25 --junitxml=test-output/junit.xml
	$(MAKE) test-python-reader

# The exactly-once, fault and fidelity proofs again with the Python slice reader, which a machine
# without the native one uses (MATOS_NATIVE_READER=false reaches the session's Spark workers; the
# reader test in the list checks that they really used it). Part of `make test-all`.
READER_PROOFS := tests/end_to_end/test_faults.py tests/core/archive/test_archive.py tests/end_to_end/test_one_run_per_range.py \
	tests/core/records/test_records.py tests/core/records/test_record_properties.py tests/core/test_reader.py tests/core/restore/test_restore.py \
	tests/core/archive/test_native_reader.py::test_a_spark_archive_run_names_the_reader_in_its_log_and_asset_metadata
test-python-reader: install
	MATOS_NATIVE_READER=false $(BIN)/python -m pytest -m "not slow" --timeout=$(PYTEST_TIMEOUT) --durations=10 \
		--junitxml=test-output/junit-python-reader.xml $(READER_PROOFS)

# The documentation (docs/, mkdocs.yml) into site/; --strict: a broken link or anchor fails it.
docs: install
	$(BIN)/mkdocs build --strict -d site

# Every benchmark, latency included (the throughput part about an hour on 2 cores); e.g.
# BENCH_ARGS="--quick --repeat 2" for a short run. Raw results in .bench/; the tables and the
# chart the documentation's performance page shows are written into docs/performance/.
BENCH_DOCS := docs/performance
bench: install
	$(BIN)/python -m matos_dev.bench --latency $(BENCH_ARGS)
	$(BIN)/python -m matos_dev.bench.report .bench/results.json --markdown $(BENCH_DOCS)/results.md \
		--chart $(BENCH_DOCS)/throughput.png
	$(BIN)/python -m matos_dev.bench --history $(HISTORY_ARGS)
	cp .bench/history.md $(BENCH_DOCS)/history.md
	$(BIN)/python -m matos_dev.bench.compaction
	$(BIN)/python -m matos_dev.bench.days $(DAYS_ARGS)
	cp .bench/days.md $(BENCH_DOCS)/days.md
	$(BIN)/python -m matos_dev.bench.ui $(UI_ARGS)
	$(BIN)/python -m matos_dev.bench.estate $(ESTATE_ARGS)
	cp .bench/estate.md $(BENCH_DOCS)/estate.md
	$(BIN)/python -m matos_dev.bench.metrics $(METRICS_ARGS)
	cp .bench/metrics.md $(BENCH_DOCS)/metrics.md
	$(BIN)/python -m matos_dev.bench.erasure $(ERASURE_ARGS)
	cp .bench/erasure.md $(BENCH_DOCS)/erasure.md
	$(BIN)/python -m matos_dev.bench.expiry $(EXPIRY_ARGS)
	cp .bench/expiry.md $(BENCH_DOCS)/expiry.md
	$(BIN)/python -m matos_dev.bench --peer --peer-faults $(PEER_ARGS)

# The archive side by side with Apache Iceberg's Kafka Connect sink (bench/peer.py): W1 and W2,
# the sink's latency at its 5-minute commit interval and at 30 s, its fault comparison;
# PEER_ARGS="--quick --repeat 1" for a short run.
bench-peer: install
	$(BIN)/python -m matos_dev.bench --peer --peer-faults $(PEER_ARGS)

# The growth workload alone (N = 0, 10,000, 100,000 ranges already archived); HISTORY_ARGS=--quick
# for 0 and 10,000, or e.g. HISTORY_ARGS="--history-n 0,100000,1000000".
bench-history: install
	$(BIN)/python -m matos_dev.bench --history $(HISTORY_ARGS)
	cp .bench/history.md $(BENCH_DOCS)/history.md

clean: down
	rm -rf $(VENV) .devstack

# A day of small ranges compacted: objects, bytes, and one hour's read before and after.
bench-compaction: install
	$(BIN)/python -m matos_dev.bench.compaction

# Deciding which days are complete after a year of days (100 partitions x 365 ranges) against
# one day; DAYS_ARGS="--repeat 5" for more rounds (about 20 minutes on 2 cores, most of it writing
# the year's manifests and its first evaluation).
bench-days: install
	$(BIN)/python -m matos_dev.bench.days $(DAYS_ARGS)
	cp .bench/days.md $(BENCH_DOCS)/days.md

# An estate of topics kept archived by one deployment (bench/estate.py): 100 partitions (25 topics of 4,
# and 100 topics of 1) and 1,000 (250 of 4), a first backlog, idle CPU, latency under traffic, the
# monitor's verdicts, each size on the sqlite instance and on PostgreSQL (dagster.postgres.yaml on a
# fresh server, as `make run-postgres`); after the archive, the Iceberg Kafka Connect sink on each size's
# topics at commit intervals of 60 s and 300 s (a steady window each); then one busy topic's latency.
# About three hours on 2 cores; e.g. ESTATE_ARGS="--partitions 100x1 --instance sqlite --busy-latency-s 0 --peer none".
bench-estate: install
	$(BIN)/python -m matos_dev.bench.estate $(ESTATE_ARGS)
	cp .bench/estate.md $(BENCH_DOCS)/estate.md

# The asset's Overview and Partitions pages in dagster-webserver after a simulated year with
# retention (4 x MATOS_KEEP_KEYS keys), then at 100,000 keys (bench/ui.py; about 10 minutes).
bench-ui: install
	$(BIN)/python -m matos_dev.bench.ui $(UI_ARGS)

# The metrics exporter (`matos metrics`) scraped every 15 s at 1,000 partitions for 3 minutes: scrape
# time (target under 2 s) and its CPU (target at most 0.05 core) (bench/metrics.py; results in
# .bench/metrics.md); e.g. METRICS_ARGS="--partitions 100,1000 --duration-s 60".
bench-metrics: install
	$(BIN)/python -m matos_dev.bench.metrics $(METRICS_ARGS)
	cp .bench/metrics.md $(BENCH_DOCS)/metrics.md

# Erasing one key (in 20 objects) from an archive of 10,000 objects and 10 million records, with key
# indexes against a full scan: objects read (target at most 1 %) and time (target at most a tenth)
# (bench/erasure.py; the archive is written straight into Swift; about 30 minutes on 2 cores, most
# of it the full scan); ERASURE_ARGS=--quick for 200 objects.
bench-erasure: install
	$(BIN)/python -m matos_dev.bench.erasure $(ERASURE_ARGS)
	cp .bench/erasure.md $(BENCH_DOCS)/erasure.md

# Expiry by age over a year of daily ranges (4 partitions, retention 30 days): the daily run's
# manifests read and time on day 365 against day 31 (target at most twice), the first run over a
# year-old archive, and what a run without the cursor would read (bench/expiry.py; the archive is
# written straight into Swift; about 5 minutes on 2 cores, most of it the first run over the year);
# e.g. EXPIRY_ARGS="--partitions 20" for a larger one, "--partitions 2 --days 60" for a check.
bench-expiry: install
	$(BIN)/python -m matos_dev.bench.expiry $(EXPIRY_ARGS)
	cp .bench/expiry.md $(BENCH_DOCS)/expiry.md
