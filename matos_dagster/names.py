"""The names an archive gives its Dagster objects, every one derived from the archive's name.

Two archives in one deployment (two Kafka clusters, or two containers) must share no Dagster name:
asset keys (the name is their key prefix), dynamic partitions definitions (named instance-wide),
jobs, sensors, schedules, groups and resource keys. The archive named "" (the project's own
definitions.py) has the names it always had: `archive_demo`, `lag`, the resources `kafka`, `swift`
and `spark`. Runs of a named archive carry its name in a tag, so that its lag sensor and its runs
never wait for another archive's runs of a topic of the same name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from dagster import AssetKey, DagsterRun

from matos_dagster.core.topics import TopicConfig

ARCHIVE_TAG = "matos/archive"  # on a named archive's runs: the archive's name


@dataclass(frozen=True)
class Names:
    """The Dagster names of the archive called `archive` ("": the names of the project's own)."""

    archive: str = ""

    def __post_init__(self) -> None:
        if self.archive and not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", self.archive):
            raise ValueError(f"archive name {self.archive!r}: use letters, digits and `_`, starting with a letter "
                             "(it prefixes asset keys, job, sensor and resource names)")

    def of(self, base: str) -> str:
        """A job, sensor, schedule, group or resource name of this archive."""
        return f"{self.archive}_{base}" if self.archive else base

    @property
    def key_prefix(self) -> list[str]:
        return [self.archive] if self.archive else []

    def asset_key(self, topic: TopicConfig) -> AssetKey:
        """The topic's archive asset (`archive_<topic>`, under the archive's key prefix)."""
        return AssetKey([*self.key_prefix, topic.asset_name])

    def windows_key(self, topic: TopicConfig) -> AssetKey:
        """The topic's days (or hours) asset."""
        return AssetKey([*self.key_prefix, topic.windows_asset_name])

    def partitions(self, topic: TopicConfig) -> str:
        """The topic's dynamic partitions definition: its offset ranges, named in the whole instance."""
        return self.of(topic.partitions_name)

    def keys(self, *kinds: str) -> set[str]:
        """The resource keys of `kinds` (`kafka`, `swift`, `spark`): an op's `required_resource_keys`."""
        return {self.of(kind) for kind in kinds}

    def resource(self, context: Any, kind: str) -> Any:
        """The archive's `kafka`, `swift` or `spark` resource of an op's, asset's, check's or sensor's context."""
        return getattr(context.resources, self.of(kind))

    def resources(self, context: Any, *kinds: str) -> tuple:
        return tuple(self.resource(context, kind) for kind in kinds)

    @property
    def run_tags(self) -> dict[str, str]:
        return {ARCHIVE_TAG: self.archive} if self.archive else {}

    def owns(self, run: DagsterRun) -> bool:
        """Whether the run is one of this archive's: its tag, or for a run of one range that has not
        begun (the tag is written when it claims its turn), its asset keys' prefix."""
        if ARCHIVE_TAG in run.tags:
            return run.tags[ARCHIVE_TAG] == self.archive
        prefixes = {tuple(key.path[:-1]) for key in run.asset_selection or ()}
        if prefixes:
            return tuple(self.key_prefix) in prefixes
        return not self.archive  # the project's own archive tags nothing


DEFAULT = Names()
