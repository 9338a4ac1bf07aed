"""Which archive a `matos` command works on: the repository's own (definitions.py, from the MATOS_
settings), or with `--archive NAME` an archive of a Dagster project of one's own.

`matos --archive eu ...`, run from a `dg` project's folder, loads the project's definitions as `dg`
does (its `[tool.dg.project]` root module's `definitions`), or with `--module` those of any Python
module, and takes the archive named `eu` there (the `KafkaArchive` component's `name`, or
`archive_definitions(name=...)`). Its connections are its resources, resolved as they are in a run
(an `EnvVar` reads its variable now); its topics are its own, not the topics file's. Every command
asks `current()` for its archive, so a command added later works on either.
"""

from __future__ import annotations

import importlib
import os
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KINDS = ("kafka", "swift", "spark")


class NoArchive(ValueError):
    """No archive where `--archive` looks, said in one line with what to change (a ValueError: the CLI
    prints it as a refusal; common.py's Refused is not imported here, which imports this)."""


@dataclass(frozen=True)
class Archive:
    """An archive's definitions and what they were built of."""

    defs: Any  # dagster.Definitions
    names: Any  # matos_dagster.names.Names
    topic_set: Any  # core.topic_set.TopicSet
    topics: list  # the topics with assets (core.topics.TopicConfig)
    group: str
    origin: str  # where its topics are set, as a refusal names it

    def job(self, base: str):
        """The archive's job of that base name (`archive_ranges`, `verify`, ...)."""
        return self.defs.resolve_job_def(self.names.of(base))

    def op(self, base: str) -> str:
        return self.names.of(base)

    @property
    def resources(self) -> dict[str, Any]:
        """Its kafka, swift and spark resources, under their resource keys."""
        return {self.names.of(kind): self.defs.resources[self.names.of(kind)] for kind in KINDS}

    def resource(self, kind: str) -> Any:
        return self.defs.resources[self.names.of(kind)]


_chosen: tuple[str | None, str | None] = (None, None)
_current: Archive | None = None


def choose(name: str | None, module: str | None = None) -> None:
    """The archive of this command: `name` in `module` (None: the project's in this folder); both None:
    the repository's own."""
    global _chosen, _current
    _chosen, _current = (name, module), None


def arguments() -> list[str]:
    """`--archive NAME [--module M]` as this command was given them, for a command line it prints."""
    name, module = _chosen
    return ([f"--archive={name}"] if name is not None else []) + ([f"--module={module}"] if module else [])


def named() -> bool:
    """Whether the command works on an archive of the user's project (its connections are its resources')."""
    return _chosen != (None, None)


def current() -> Archive:
    """The command's archive, loaded once; NoArchive in one line if there is none such."""
    global _current
    if _current is None:
        name, module = _chosen
        _current = _own() if (name, module) == (None, None) else _load(name or "", module)
    return _current


def _own() -> Archive:
    from matos_dagster import definitions
    from matos_dagster.core import settings
    from matos_dagster.names import DEFAULT

    return Archive(definitions.defs, DEFAULT, definitions.TOPIC_SET, definitions.TOPICS, "archive",
                   f"the topics file {settings.get('MATOS_TOPICS_FILE')} (MATOS_TOPICS_FILE)")


def project_module(folder: Path) -> tuple[str, Path]:
    """The definitions module of the `dg` project in `folder` or above, and the project's folder."""
    for where in (folder, *folder.parents):
        pyproject = where / "pyproject.toml"
        if pyproject.is_file():
            dg = tomllib.loads(pyproject.read_text()).get("tool", {}).get("dg", {})
            project = dg.get("project", {})
            if dg.get("directory_type") == "project" and project.get("root_module"):
                return project.get("code_location_target_module") or f"{project['root_module']}.definitions", where
    raise NoArchive(f"no dg project in {folder} or above (a pyproject.toml with [tool.dg.project]): run matos from "
                  "your project's folder, or name the module of your definitions with --module")


def _load(name: str, module: str | None) -> Archive:
    from dagster import Definitions
    from dagster._core.workspace.autodiscovery import loadable_targets_from_loaded_module

    from matos_dagster import library

    if module is None:
        module, root = project_module(Path.cwd())
        for path in (root / "src", root):  # the project's own package, installed or not
            if path.is_dir() and str(path) not in sys.path:
                sys.path.insert(0, str(path))
    elif os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    library.BUILT.clear()
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise NoArchive(f"cannot import {module} ({e}): run matos from your project's folder, in its virtualenv") from None
    targets = loadable_targets_from_loaded_module(loaded)
    if len(targets) != 1:
        raise NoArchive(f"{module} has {len(targets)} Definitions (or @definitions functions): give it exactly one")
    defs = targets[0].target_definition
    if not isinstance(defs, Definitions):
        defs = defs()  # a @definitions function (a dg project's): its defs folder loaded now
    built = library.BUILT.get(name)
    if built is None:
        known = ", ".join(repr(n) for n in library.BUILT) or "none"
        raise NoArchive(f"no archive named {name!r} in {module} (archives there: {known}): give --archive the "
                      "`name` of its KafkaArchive component")
    return Archive(defs, built.names, built.topic_set, built.topics, built.group,
                   f"the archive {name!r} of {module}")
