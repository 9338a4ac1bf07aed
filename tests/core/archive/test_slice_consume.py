"""A slice asks Kafka for no more messages than it still needs (pure: a fake consumer and store).

`Consumer.consume(n, timeout)` returns only when it has n messages or its timeout ends. Asked
for 5,000 with fewer left in the log past the slice's position, it waited the whole second:
measured on the local broker, 1,000 messages then end of log took 1.00 s asked for 5,000 and
0.001 s asked for 1,000 (README, Growth). The fake consumer here records what it is asked.
"""

import hashlib

import pytest

from matos_dagster.core.archive import slice_task
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift.store import SwiftParams


class FakeMessage:
    def __init__(self, offset: int):
        self._offset = offset

    def error(self):
        return None

    def offset(self):
        return self._offset

    def key(self):
        return b"k"

    def value(self):
        return b"v" * 10

    def headers(self):
        return None

    def timestamp(self):
        return (1, 1_700_000_000_000 + self._offset)


class FakeConsumer:
    """A partition holding offsets [0, log_end); consume returns what it holds, up to n."""

    asked: list[int] = []
    log_end = 0

    def __init__(self, conf):
        self.pos = 0

    def assign(self, tps):
        self.pos = tps[0].offset

    def consume(self, num_messages, timeout):
        FakeConsumer.asked.append(num_messages)
        end = min(self.pos + num_messages, FakeConsumer.log_end)
        msgs = [FakeMessage(o) for o in range(self.pos, end)]
        self.pos = end
        return msgs

    def position(self, tps):
        tps[0].offset = self.pos
        return tps

    def close(self):
        pass


class FakeStore:
    def __init__(self, params):
        self.objects = {}

    def put(self, name, data, md5=None):
        # As Swift does: an upload whose md5 is not its bytes' is refused.
        assert md5 in (None, hashlib.md5(data).hexdigest()), f"{name}: md5 {md5} is not the bytes'"
        self.objects[name] = data
        return hashlib.md5(data).hexdigest()

    def close(self):
        pass


@pytest.fixture
def fakes(monkeypatch):
    monkeypatch.setenv("MATOS_NATIVE_READER", "false")  # the fake consumer stands in for the Python reader's
    monkeypatch.setattr(slice_task, "Consumer", FakeConsumer)
    monkeypatch.setattr(slice_task, "Store", FakeStore)
    FakeConsumer.asked = []
    return FakeConsumer


def job(start: int, end: int) -> slice_task.SliceJob:
    return slice_task.SliceJob(slice=OffsetRange("t", 0, start, end), directory="d", kafka_conf={}, group="g",
                               swift=SwiftParams(auth_url="http://127.0.0.1:1/auth/v1.0", container="c"))


@pytest.mark.parametrize("start, end, log_end, asked", [
    (0, 1_200, 3_000, [1_200]),             # a small range with records behind it: one exact request
    (2_000, 9_000, 20_000, [5_000, 2_000]),  # a larger one: full batches, then what is left
    (0, 1_000, 1_000, [1_000]),             # a range ending at the log end
])
def test_a_slice_asks_for_no_more_messages_than_it_still_needs(fakes, start, end, log_end, asked):
    fakes.log_end = log_end
    written = slice_task.archive_slice(job(start, end))
    assert fakes.asked == asked
    assert sum(o["records"] for o in written) == end - start
    assert (written[0]["first_offset"], written[-1]["last_offset"]) == (start, end - 1)


def test_the_batch_asked_for_is_between_one_and_the_cap():
    assert [slice_task.consume_batch(n) for n in (0, 1, 4_999, 5_000, 10**9)] == [1, 1, 4_999, 5_000, 5_000]


def test_the_prefetch_is_bounded_in_bytes_and_in_messages():
    # librdkafka's own structures per queued message are a few hundred bytes: 8 MiB of 100-byte
    # records at its default 100,000 messages left a W2 task at 4x object_bytes (README, Performance).
    conf = slice_task.consumer_conf({}, "g")
    assert conf["queued.max.messages.kbytes"] * 1024 <= 8 * 1024**2
    assert conf["queued.min.messages"] <= 10_000
