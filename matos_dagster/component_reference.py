"""The generated parts of the page "In your own Dagster project" (docs/operations/your-project.md).

`python -m matos_dagster.component_reference` prints them: the `defs.yaml` that `dg scaffold defs
matos_dagster.KafkaArchive eu` writes, the table of the component's attributes (from its model:
what `dg check defs` validates), and the table of the archive's jobs with the op whose config
`dg launch --config-json` takes (from the definitions an archive named `eu` has). A test fails
when the page and these differ, so an attribute or a job added is documented the day it exists.
"""

from __future__ import annotations

import typing
from typing import Any

NAME = "eu"  # the archive of the page's examples


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(info: Any) -> str:
    from pydantic_core import PydanticUndefined

    default = info.default
    if info.is_required() or default is PydanticUndefined:
        return "(required)"
    if default in (None, "", {}, []) or repr(default).startswith("'__DAGSTER_UNSET"):
        return "(none)" if default is None or default == "" else "`{}`"
    return f"`{default}`"


def scaffolded(name: str = NAME) -> str:
    """The `defs.yaml` the scaffolder writes for a component folder called `name`, as a YAML block."""
    from matos_dagster.component import STARTER

    return "```yaml\n" + STARTER.format(type="matos_dagster.KafkaArchive", name=name) + "```\n"


def attributes() -> str:
    """Every attribute of the component (and every connection setting), its default and meaning."""
    from matos_dagster.component import KafkaArchive
    from matos_dagster.resources import KafkaResource, SparkResource, SwiftResource

    resources = {"kafka": KafkaResource, "swift": SwiftResource, "spark": SparkResource}
    rows = ["| attribute | default | meaning |", "| --- | --- | --- |"]
    for name, info in KafkaArchive.model().model_fields.items():
        rows.append(f"| `{name}` | {_default(info)} | {_cell(info.description or '')} |")
        if name in resources:
            for setting, field in resources[name].model_fields.items():
                meaning = field.description or ""
                if name == "spark" and setting == "conf":
                    meaning += " In `defs.yaml` also a mapping (`spark.executor.memory: 2g`)."
                rows.append(f"| `{name}.{setting}` | {_default(field)} | {_cell(meaning)} |")
    return "\n".join(rows) + "\n"


def jobs(name: str = NAME) -> str:
    """The archive's jobs, and for each the op `--config-json` configures with its fields."""
    from matos_dagster.library import archive_definitions
    from matos_dagster.resources import KafkaResource, SparkResource, SwiftResource

    defs = archive_definitions({"topics": [{"name": "orders"}]}, KafkaResource(bootstrap_servers="kafka:9092"),
                               SwiftResource(auth_url="https://swift.example/auth/v1.0"), SparkResource(),
                               name=name, topics_at_load=[])
    rows = ["| job | op of `--config-json` | its config |", "| --- | --- | --- |"]
    for job in sorted(defs.resolve_all_job_defs(), key=lambda j: j.name):
        if job.name.startswith("__"):  # Dagster's own asset jobs
            continue
        configured = [(op.name, list(op.config_schema.config_type.fields)) for op in job.graph.iterate_op_defs()
                      if op.config_schema is not None and getattr(op.config_schema.config_type, "fields", None)]
        for op, fields in configured or [("(none)", [])]:
            shown = ", ".join(f"`{f}`" for f in fields) or "(none)"
            rows.append(f"| `{job.name}` | {'`' + op + '`' if fields else op} | {shown} |")
    return "\n".join(rows) + "\n"


PARTS = {"scaffolded defs.yaml": scaffolded, "component attributes": attributes, "archive jobs": jobs}

if __name__ == "__main__":
    for label, part in PARTS.items():
        print(f"<!-- {label} (generated) -->\n{part()}<!-- end of the {label} -->\n")
