"""What every command shares: its name as typed, a refusal, and a job run in this process."""

from __future__ import annotations

import re
import sys
from typing import Any


def prog() -> str:
    """The command as the user typed it: `matos`, or `python -m matos_dagster`."""
    return "python -m matos_dagster" if sys.argv[0].endswith("__main__.py") else "matos"


def command(*args: str) -> str:
    """A command line that runs as printed, from any folder: this Python, by its full path."""
    return " ".join([sys.executable, "-m", "matos_dagster", *args])


class Refused(Exception):
    """A request the project refuses before anything changed: the message says what to change."""


def quiet() -> dict:
    # The run's events are in the instance (and the UI); the console gets the outcome only.
    return {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def failure(result) -> str:
    """The user's exception of a failed in-process run: its message, without Dagster's wrapping."""
    for event in result.all_events:
        if event.is_step_failure:
            user = event.step_failure_data.user_failure_data  # a dagster Failure raised by the op
            if user is not None and user.description:
                return user.description.strip()
            error = event.step_failure_data.error
            while error.cause is not None and error.cls_name.startswith("Dagster"):
                error = error.cause
            # The message starts with the exception's class, qualified or not: the user needs its words.
            return re.sub(rf"^([\w.]+\.)?{re.escape(error.cls_name)}: ", "", error.message.strip())
        if event.is_run_failure and event.event_specific_data and event.event_specific_data.error:
            return event.event_specific_data.error.message.strip()
    return "the run failed; see it in the UI"


def run_job(job: str, op: str, config: dict) -> tuple[Any, Any]:
    """Run one of the archive's jobs in this process (`job`, `op`: their base names): (the op's output,
    the result); Refused if it fails."""
    from dagster import DagsterInstance

    from matos_dagster.cli import archive
    chosen = archive.current()
    with DagsterInstance.get() as instance:
        result = chosen.job(job).execute_in_process(
            run_config={"ops": {chosen.op(op): {"config": config}}, **quiet()}, instance=instance, raise_on_error=False
        )
    if not result.success:
        raise Refused(failure(result))
    return result.output_for_node(chosen.op(op)), result


def output_metadata(result, op: str) -> dict[str, Any]:
    """The plain values (numbers, text, flags) of the op's output metadata (`op`: its base name)."""
    from matos_dagster.cli import archive

    out = {}
    for event in result.events_for_node(archive.current().op(op)):
        if event.is_successful_output:
            for name, value in event.step_output_data.metadata.items():
                if isinstance(getattr(value, "value", None), (int, float, str, bool)):
                    out[name] = value.value
    return out


def topic_of(name: str):
    """The archive's entry for topic `name`; Refused (before anything reaches the network) if none."""
    from matos_dagster.cli import archive
    from matos_dagster.core.topic_set import not_found

    chosen = archive.current()
    topic = chosen.topic_set.get(name)
    if topic is None:
        raise Refused(not_found(chosen.topic_set, name).replace("the topics file", chosen.origin, 1))
    return topic
