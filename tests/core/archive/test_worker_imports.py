"""An archive task imports no pandas into its Spark Python worker.

pyarrow imports pandas the first time it converts Python values (`pa.array`, `pa.scalar`,
`Array.to_numpy`): about 30 MiB of PSS in every Python worker, for nothing the archive uses
(README, Against Apache Iceberg: memory). A task runs in a worker that earlier tasks of the
same Spark may have used, so the check runs what a worker runs for one task - import the
task's modules, archive a slice from real Kafka into real Swift, build the task's result
batch - in a fresh interpreter, where nothing else can have imported pandas.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pytest
from test_native_reader import KEEP, job_for, mixed_records, produce

from matos_dagster.core.archive import native
from matos_dagster.core.records import arrays as arrow_arrays

# What a Spark Python worker runs for an archive task (spark_tasks.run_tasks: `fn(item)`, then
# the result batch), with the job from a pickle as Spark hands it over.
_TASK = """
import json, pickle, sys
from matos_dagster.core.archive import slice_task
from matos_dagster.core.spark import tasks as spark_tasks
jobs = pickle.load(open(sys.argv[1], "rb"))
entries = [o for job in jobs for o in slice_task.archive_slice(job)]
batch = spark_tasks.result_batch(0, entries)
print(json.dumps({"pandas": "pandas" in sys.modules, "readers": sorted({o["reader"] for o in entries}),
                  "records": sum(o["records"] for o in entries), "rows": batch.num_rows}))
"""


@pytest.mark.parametrize("reader", ["native", "python"])
def test_an_archive_task_imports_no_pandas_into_its_worker(reader, kafka, swift, new_topic, tmp_path):
    if reader == "native":
        assert native.why_not() is None, f"the native reader must be built for this test: {native.why_not()}"
    topic = new_topic(partitions=1, **KEEP)
    produce(kafka, topic, mixed_records(300))
    with swift.store() as store:
        # Both formats; small chunks and objects, so Batch seals and row groups are cut many times.
        jobs = [job_for(kafka, store, topic, 0, 300, format=fmt, object_bytes=50_000) for fmt in ("parquet", "jsonl")]
    (tmp_path / "jobs.pickle").write_bytes(pickle.dumps(jobs))
    env = {**os.environ, "MATOS_NATIVE_READER": "true" if reader == "native" else "false"}
    done = subprocess.run([sys.executable, "-c", _TASK, str(tmp_path / "jobs.pickle")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["readers"] == [reader] and got["records"] == 600 and got["rows"] == 1, got
    assert not got["pandas"], "pandas was imported by the archive task's code (see arrow_arrays)"


@pytest.mark.parametrize("values", [[b"a", None, b"", b"xyz"], [], [None], [b""], [b"\x00" * 3, b"\xff"]])
def test_binary_arrays_built_from_buffers_equal_pyarrows_own(values):
    import pyarrow as pa

    assert arrow_arrays.binaries(values).equals(pa.array(values, pa.binary()))
    strings = [None if v is None else v.decode("latin-1") for v in values]
    assert arrow_arrays.strings(strings).equals(pa.array(strings, pa.string()))


@pytest.mark.parametrize("values", [[1, -2, 2**62], [], [None, 5, None], [0]])
def test_number_arrays_built_from_buffers_equal_pyarrows_own(values):
    import pyarrow as pa

    for t in (pa.int64(), pa.int32(), pa.int8()):
        vals = [v if v is None or -100 < v < 100 else 7 for v in values] if t != pa.int64() else values
        assert arrow_arrays.optional_numbers(vals, t).equals(pa.array(vals, t))
        if None not in vals:
            assert arrow_arrays.numbers(vals, t).equals(pa.array(vals, t))
            got = arrow_arrays.to_numpy(arrow_arrays.numbers(vals, t).slice(min(1, len(vals))))
            assert got.tolist() == vals[min(1, len(vals)):]
