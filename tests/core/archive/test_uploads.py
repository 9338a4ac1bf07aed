"""A task uploads each object in a thread while it reads the next one (pure: a fake store).

What `slice_task.Uploads` promises: one object uploads at a time and in offset order; the reading
goes on while it does, until the next object holds `READ_AHEAD` of `object_bytes`; the manifest entries
come back in order and equal a synchronous upload's; an upload's error fails the task and is not
lost, and no upload is left running once the task has ended.
"""

import threading

import pytest

from matos_dagster.core.archive import slice_task
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.records.batch import Batch
from matos_dagster.core.swift.store import SwiftError, SwiftParams

OBJECT_BYTES = 1000


class GatedStore:
    """A store whose PUTs wait until the test lets each one finish."""

    def __init__(self, fail: bool = False):
        self.started = threading.Semaphore(0)  # released once per PUT begun
        self.finish = threading.Semaphore(0)  # the test releases one per PUT allowed to end
        self.names: list[str] = []
        self.fail = fail
        self.closed = False
        self.in_flight = 0
        self.most_in_flight = 0
        self._lock = threading.Lock()

    def put(self, name: str, data: bytes, md5: str | None = None) -> str:
        with self._lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self.started.release()
        assert self.finish.acquire(timeout=60), "the test never let this upload end"
        with self._lock:
            self.in_flight -= 1
        if self.fail:
            raise SwiftError(f"write object {name}: Swift answered 503")
        self.names.append(name)
        return "md5-of-" + name

    def close(self) -> None:
        assert self.in_flight == 0, "closed with an upload in flight"
        self.closed = True


def job() -> slice_task.SliceJob:
    return slice_task.SliceJob(slice=OffsetRange("t", 0, 0, 100), directory="d", kafka_conf={}, group="g",
                               swift=SwiftParams(auth_url="http://127.0.0.1:1/auth/v1.0", container="c"),
                               object_bytes=OBJECT_BYTES)


def batch_of(first: int, n: int, value_bytes: int = 50) -> Batch:
    b = Batch("t", 0, fmt="parquet")
    for o in range(first, first + n):
        b.add(o, 1, 1_700_000_000_000 + o, None, b"v" * value_bytes, None, value_bytes)
    return b


def in_thread(fn) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def test_the_next_object_is_read_while_the_previous_one_uploads():
    store = GatedStore()
    uploads = slice_task.Uploads(job(), store)
    uploads.put(batch_of(0, 10))
    assert store.started.acquire(timeout=60)  # the first PUT is under way, and not allowed to end
    # The reader goes on: put() returned, and pacing a next object below READ_AHEAD does not wait.
    assert 200 < slice_task.READ_AHEAD * OBJECT_BYTES
    uploads.pace(batch_of(10, 4))  # 200 of 1,000 bytes
    store.finish.release()
    store.finish.release()
    uploads.put(batch_of(10, 4))
    assert [o["first_offset"] for o in uploads.finish()] == [0, 10]
    uploads.close()
    assert store.most_in_flight == 1 and store.closed


def test_the_reader_waits_for_the_upload_once_the_next_object_holds_its_read_ahead():
    store = GatedStore()
    uploads = slice_task.Uploads(job(), store)
    uploads.put(batch_of(0, 10))
    assert store.started.acquire(timeout=60)
    assert 500 >= slice_task.READ_AHEAD * OBJECT_BYTES
    paced = in_thread(lambda: uploads.pace(batch_of(10, 10)))  # 500 of 1,000 bytes
    paced.join(timeout=0.5)
    assert paced.is_alive(), "pace returned while the previous object was still uploading"
    store.finish.release()
    paced.join(timeout=60)
    assert not paced.is_alive()
    uploads.close()


def test_objects_upload_one_at_a_time_in_offset_order():
    store = GatedStore()
    uploads = slice_task.Uploads(job(), store)
    for i in range(5):
        store.finish.release()
    for first in (0, 10, 20, 30, 40):
        uploads.put(batch_of(first, 10))
    entries = uploads.finish()
    uploads.close()
    assert [o["first_offset"] for o in entries] == [0, 10, 20, 30, 40]
    assert store.names == [o["name"] for o in entries] and store.most_in_flight == 1


def test_the_manifest_entries_equal_a_synchronous_uploads():
    class Recording:
        def __init__(self):
            self.objects = {}

        def put(self, name, data, md5=None):
            self.objects[name] = data
            return "m"

        def close(self):
            pass

    direct, threaded = Recording(), Recording()
    expected = [slice_task._flush(batch_of(f, 10), job(), direct) for f in (0, 10)]
    uploads = slice_task.Uploads(job(), threaded)
    for f in (0, 10):
        uploads.put(batch_of(f, 10))
    assert uploads.finish() == expected
    assert threaded.objects == direct.objects  # the same bytes under the same names
    uploads.close()


def test_an_upload_error_fails_the_task_at_its_next_step():
    store = GatedStore(fail=True)
    uploads = slice_task.Uploads(job(), store)
    uploads.put(batch_of(0, 10))
    store.finish.release()
    with pytest.raises(SwiftError, match="503"):
        uploads.finish()
    uploads.close()
    assert store.closed


def test_a_task_that_fails_while_an_object_uploads_waits_for_it_before_closing_the_connection():
    store = GatedStore()
    uploads = slice_task.Uploads(job(), store)
    uploads.put(batch_of(0, 10))
    assert store.started.acquire(timeout=60)
    closing = in_thread(uploads.close)  # as the task's `finally` does after a read error
    closing.join(timeout=0.5)
    assert closing.is_alive() and not store.closed
    store.finish.release()
    closing.join(timeout=60)
    assert store.closed and store.in_flight == 0
