"""The topics an archive covers: topics named in the topics file, and patterns matched against
the cluster's topics, as Kafka Connect's `topics.regex` or Secor's topic filter do.

    topics:
      - name: payments                 # a topic by name
      - pattern: "orders\\..*"         # every topic whose whole name matches...
        exclude: ["orders\\.test\\..*"]  # ...but none of these
        batch: {age_s: 60}             # settings for each topic it matches

A pattern is matched against the whole topic name (Python `re.fullmatch`). A named topic wins
over any pattern; among patterns, the first in the file that matches wins. Kafka's internal
topics (`__consumer_offsets`, ...) and the Schema Registry's `_schemas` are never matched.
Resolution is pure: the caller lists the cluster's topics (core/kafka/many.py) and hands the
names in, at every tick of the sensor, so a topic created later is archived without a restart.
No Dagster imports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

from matos_dagster.core.kafka.many import is_internal

# TopicConfig (core/topics.py, which builds these from the file and imports this module): named
# only in annotations here, so that the two modules do not import each other.
TopicConfig = Any


@dataclass(frozen=True)
class TopicPattern:
    pattern: str
    exclude: tuple[str, ...] = ()
    # Builds the TopicConfig of a matching topic from the entry's settings (topics.parse made it,
    # having checked those settings once with a placeholder name).
    make: Callable[[str], TopicConfig] = field(default=None, compare=False, repr=False)  # type: ignore[assignment]
    # The settings a matching topic gets (made with a placeholder name): what every match has in common.
    settings: TopicConfig = field(default=None, compare=False, repr=False)

    def matches(self, topic: str) -> bool:
        return (not is_internal(topic) and re.fullmatch(self.pattern, topic) is not None
                and not any(re.fullmatch(x, topic) for x in self.exclude))


@dataclass(frozen=True)
class Resolved:
    """The topics a listing of the cluster gives: what to archive, and what could not be."""

    topics: list[TopicConfig]
    missing: list[str]  # named topics the cluster does not have (never created, or deleted)
    clashes: list[str]  # one line per topic left out: its asset name is another topic's


class TopicSet(Sequence[TopicConfig]):
    """The topics file: a sequence of its named topics, and its patterns.

    As a sequence it is the named topics only (what the file says without asking Kafka);
    `resolve` adds the cluster's topics that the patterns match; `get` finds the settings of
    any topic, named or matched, by its name.
    """

    def __init__(self, named: Iterable[TopicConfig] = (), patterns: Iterable[TopicPattern] = ()):
        self.named = tuple(named)
        self.patterns = tuple(patterns)
        self._by_name = {t.name: t for t in self.named}

    def __getitem__(self, i):  # type: ignore[override]
        return self.named[i]

    def __len__(self) -> int:
        return len(self.named)

    def __iter__(self) -> Iterator[TopicConfig]:
        return iter(self.named)

    def __repr__(self) -> str:
        return f"TopicSet(named={[t.name for t in self.named]}, patterns={[p.pattern for p in self.patterns]})"

    def get(self, name: str) -> TopicConfig | None:
        """The settings of topic `name`: its entry, or the first pattern matching it; None if neither."""
        if name in self._by_name:
            return self._by_name[name]
        for p in self.patterns:
            if p.matches(name):
                return p.make(name)
        return None

    def describe(self) -> str:
        """The file's topics and patterns, for a message: `orders, payments, pattern "logs\\..*"`."""
        return ", ".join([t.name for t in self.named] + [f"pattern {p.pattern!r}" for p in self.patterns])

    def resolve(self, existing: Iterable[str]) -> Resolved:
        """The named topics and the `existing` topics a pattern matches, sorted by name.

        A named topic is kept even when `existing` lacks it (its asset and archive stay; the
        caller says it is missing). A matched topic whose asset name another topic already has
        (`a-b` and `a_b`) is left out with a line saying so: named topics and then names in
        sorted order keep theirs, so what is already archived keeps its asset.
        """
        existing = set(existing)
        out = {t.name: t for t in self.named}
        taken = {t.asset_name: t.name for t in self.named}
        clashes = []
        for name in sorted(existing - set(out)):
            topic = self.get(name)
            if topic is None:
                continue
            if topic.asset_name in taken:
                clashes.append(f"topic {name!r} matches pattern {self._pattern_of(name)!r} but its asset name "
                               f"{topic.asset_name!r} is topic {taken[topic.asset_name]!r}'s: exclude one of them "
                               "from the pattern, or name it in the topics file")
                continue
            taken[topic.asset_name] = name
            out[name] = topic
        missing = sorted(t.name for t in self.named if t.name not in existing)
        return Resolved([out[n] for n in sorted(out)], missing, clashes)

    def _pattern_of(self, name: str) -> str:
        return next(p.pattern for p in self.patterns if p.matches(name))


def as_set(topics: "TopicSet | Iterable[TopicConfig]") -> TopicSet:
    """A TopicSet of `topics` (a list of TopicConfig is a set of named topics)."""
    return topics if isinstance(topics, TopicSet) else TopicSet(topics)


def not_found(topics: TopicSet, name: str, path: str = "") -> str:
    """The one line that says a topic is not in the topics file (at `path`, if given), and what is."""
    where = f" ({path})" if path else ""
    return f"topic {name!r} is not in the topics file{where}: no name or pattern matches it; it has {topics.describe()}"
