"""Plain Python functions run as Spark tasks, on a classic session or over Spark Connect.

Spark Connect has no RDDs, so a task is one row of `spark.range(n)` cut into n partitions
(one item each) and mapped with `mapInArrow`, which both kinds of session run the same way:
task retries, executors' Python workers, nothing through a local disk. The items travel
inside the task's closure (they carry the clients' settings, secrets included, so never in
Spark settings, which Spark shows); each result comes back pickled in one binary cell.
No Dagster imports.
"""

from __future__ import annotations

import pickle
from typing import Any, Callable, Iterable, Iterator, TypeVar

import pyarrow as pa

from matos_dagster.core.records import arrays as arrow_arrays

T = TypeVar("T")
R = TypeVar("R")

_RESULT = pa.schema([pa.field("item", pa.int64()), pa.field("result", pa.binary())])
_RESULT_DDL = "item bigint, result binary"


def is_connect(spark: Any) -> bool:
    """Whether `spark` is a Spark Connect session (a client of a remote server)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def describe(spark: Any, text: str) -> None:
    """Name the next jobs in Spark's UI and logs (classic sessions; Connect has no SparkContext)."""
    if not is_connect(spark):
        spark.sparkContext.setJobDescription(text)


def item_frame(spark: Any, items: list[T], fn: Callable[[T], Iterator[pa.RecordBatch]], ddl: str) -> Any:
    """A DataFrame of schema `ddl` whose partition i holds the Arrow batches `fn(items[i])` yields.

    Lazy, like any DataFrame: the tasks run when an action asks for rows.
    """

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for i in batch.column(0).to_pylist():
                yield from fn(items[i])

    return spark.range(0, len(items), 1, len(items)).mapInArrow(task, ddl)


def result_batch(item: int, result: Any) -> pa.RecordBatch:
    """Task `item`'s result, pickled into one row of `_RESULT`. Built from buffers (arrow_arrays):
    `pa.array` would import pandas into the Python worker for these two cells."""
    pickled = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
    return pa.RecordBatch.from_arrays(
        [arrow_arrays.numbers([item], pa.int64()), arrow_arrays.binaries([pickled])], schema=_RESULT)


def run_tasks(spark: Any, fn: Callable[[T], R], items: Iterable[T], description: str = "") -> list[R]:
    """`[fn(item) for item in items]`, each call its own Spark task; results in item order.

    A task that fails is retried by Spark (spark.task.maxFailures); `fn` must be safe to run
    again. An exception that survives the retries is raised here.
    """
    items = list(items)
    if not items:
        return []
    if description:
        describe(spark, description)
    numbered = list(enumerate(items))

    def one(numbered_item: tuple[int, T]) -> Iterator[pa.RecordBatch]:
        i, item = numbered_item
        yield result_batch(i, fn(item))

    rows = item_frame(spark, numbered, one, _RESULT_DDL).collect()
    results = {row["item"]: pickle.loads(row["result"]) for row in rows}
    return [results[i] for i in range(len(items))]


def run_entries(spark: Any, fn: Callable[[T], list[dict]], items: Iterable[T], description: str,
                raised: type[Exception], as_error: Callable[[str], Exception],
                as_refused: Callable[[dict], Exception]) -> list[list[dict]]:
    """`run_tasks` of tasks that each return manifest entries (the archive's slices, compaction's
    groups): a task's `raised` error, found in Spark's, becomes `as_error(its message)`, and an
    entry a task marked "refused" (a refusal Spark must not retry: {"refused": its message, ...})
    `as_refused(that entry)`, so a caller sees the refusal, not a Spark failure."""
    try:
        written = run_tasks(spark, fn, items, description)
    except Exception as e:
        failed = task_error(e, raised)
        if failed is None:
            raise
        raise as_error(failed) from None
    refused = [o for entries in written for o in entries if "refused" in o]
    if refused:
        raise as_refused(refused[0])
    return written


def task_error(e: Exception, kind: type[Exception]) -> str | None:
    """The message of a `kind` error a task raised, found in the Spark error that carries the task's
    Python traceback; None if the task failed otherwise. The driver raises it again as what it is, so
    a caller sees the refusal, not a Spark failure."""
    text = str(e)
    mark = f"{kind.__name__}: "
    at = text.find(mark)
    if at < 0:
        return None
    return text[at + len(mark):].split("\n", 1)[0].strip()
