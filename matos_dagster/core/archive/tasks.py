"""The Spark tasks of a batch: several slices a task, each slice's outcome its own.

A quiet partition's range is a few records, whose task would cost more to start than to run, so
consecutive slices share a task (`pack`); a slice that fails is that slice's outcome, not the
task's (`archive_slices`), so one bad partition does not hold back the estate. No Dagster imports.
"""

from __future__ import annotations

import time

from matos_dagster.core.archive.slice_task import RecordTooLarge, SliceJob, archive_slice

# A Spark task carries slices until they hold this many offsets or this many slices: a quiet
# partition's range is a few records, whose task would cost more to start than to run.
PACK_OFFSETS = 100_000
PACK_SLICES = 32
SLICE_TRIES = 2  # a slice that fails is tried again once in its task (a broker's moment away)


def pack(jobs: list[SliceJob], most_offsets: int = PACK_OFFSETS, most_slices: int = PACK_SLICES) -> list[list[SliceJob]]:
    """The slices as tasks, in order: consecutive slices share a task while together they hold at
    most `most_offsets` offsets and `most_slices` slices; a larger slice has a task of its own."""
    tasks: list[list[SliceJob]] = []
    size = 0
    for j in jobs:
        n = j.slice.end - j.slice.start
        if not tasks or size + n > most_offsets or len(tasks[-1]) >= most_slices:
            tasks.append([])
            size = 0
        tasks[-1].append(j)
        size += n
    return tasks


def archive_slices(jobs: list[SliceJob]) -> list[list[dict] | dict]:
    """A Spark task of several slices: each one's manifest entries, `[{"refused": why}]` for a slice
    no retry can archive (a record over max_record_bytes, a record that does not decode under
    decode_strict), or `{"failed": why}` for a slice that failed twice. Never raises for a slice: the other slices of the task, and the other
    ranges of the batch, go on; only its own range is not archived."""
    out: list[list[dict] | dict] = []
    for job in jobs:
        for attempt in range(1, SLICE_TRIES + 1):
            try:
                out.append(archive_slice(job))
                break
            except RecordTooLarge as e:  # no retry changes it: the topic's setting must
                out.append([{"refused": str(e)}])
                break
            except Exception as e:  # noqa: BLE001 - the slice's outcome; its range is retried by a later run
                if attempt == SLICE_TRIES:
                    out.append({"failed": f"slice {job.slice}: {one_line(e)}"})
                else:
                    time.sleep(1.0)
    return out


def one_line(e: BaseException) -> str:
    """An error as one line of at most 500 characters (a range's outcome, a slice's failure)."""
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 500 else text[:497] + "..."
