"""librdkafka's own log, for every client of the driver: to Python logging, never straight to stderr."""

from __future__ import annotations

import logging
import re


class _OncePerCause(logging.Filter):
    """Pass each kind of librdkafka log line once per process.

    A client whose broker is down retries its connection every few milliseconds and logs each
    try (292 lines in the 15 s before the one error that says what to change): the first line of
    each kind says as much. Kinds differ in their words, not in their numbers (ports, ms, counts).
    """

    def __init__(self, most: int = 1000) -> None:
        super().__init__()
        self.seen: set[str] = set()
        self.most = most

    def filter(self, record: logging.LogRecord) -> bool:
        kind = re.sub(r"\d+", "#", record.getMessage())
        if kind in self.seen:
            return False
        if len(self.seen) >= self.most:  # bounded, whatever runs for months
            self.seen.clear()
        self.seen.add(kind)
        return True


# Given as `logger` to each client the driver makes. With no handler of the application's, nothing is
# shown (NullHandler: not Python's last-resort stderr handler); `matos -v` or the application's logging
# configuration shows it.
LIBRDKAFKA_LOG = logging.getLogger("matos_dagster.librdkafka")
LIBRDKAFKA_LOG.addFilter(_OncePerCause())
LIBRDKAFKA_LOG.addHandler(logging.NullHandler())
