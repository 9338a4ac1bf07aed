"""The references of the documentation are the code's: the CLI page is generated from the parsers,
the Python API page is rendered from the docstrings, and both stay in step with the code."""

from __future__ import annotations

import inspect
import re

from matos_dagster.cli import reference
from matos_dagster.core.settings import PROJECT_ROOT

CLI_PAGE = PROJECT_ROOT / "docs" / "reference" / "cli.md"
PYTHON_PAGE = PROJECT_ROOT / "docs" / "reference" / "python.md"


def between(text: str, start: str, end: str) -> str:
    a = text.index(start)
    return text[text.index("\n", a) + 1:text.index(end)]


def test_the_cli_page_is_the_generated_reference():
    documented = between(CLI_PAGE.read_text(), "<!-- cli reference", "<!-- end of the cli reference")
    assert documented == reference.reference(), "run `python -m matos_dagster.cli.reference` and paste its output"


def test_every_command_and_every_option_of_the_cli_is_on_the_page():
    from matos_dagster.cli import parser

    page = CLI_PAGE.read_text()
    for name, command in reference.subcommands(parser()).items():
        assert f"## `matos {name}`" in page, name
        for action in command._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in page, f"matos {name} {option}"
    # Those no page named before the reference was generated.
    for option in ("--max-groups", "--audit-all", "--from-offset", "--keep-keys", "--rebuild", "--since-ms",
                   "--key-pattern", "--transactional", "--full"):
        assert f"`{option}" in page, option


def documented_objects() -> list[str]:
    return re.findall(r"^::: ([\w.]+)", PYTHON_PAGE.read_text(), flags=re.M)


def resolve(dotted: str):
    import importlib

    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_the_python_api_page_renders_the_reading_functions():
    assert {"matos_dagster.core.reader.read_table", "matos_dagster.core.reader.read_dataframe",
            "matos_dagster.core.days.read.read_window", "matos_dagster.core.iceberg.queries.duckdb_connection",
            "matos_dagster.core.iceberg.queries.spark_frame", "matos_dagster.core.iceberg.queries.window_filter"
            } <= set(documented_objects())


def test_every_argument_of_a_documented_function_is_described_in_its_docstring():
    """mkdocstrings renders the docstring's Args: an argument added without its line would show
    undocumented, so the page and the signature are compared here."""
    for dotted in documented_objects():
        obj = resolve(dotted)
        if not inspect.isfunction(obj):
            assert (obj.__doc__ or "").strip(), dotted
            continue
        doc = inspect.getdoc(obj) or ""
        args = re.split(r"^\S", doc.split("Args:", 1)[1], maxsplit=1, flags=re.M)[0] if "Args:" in doc else ""
        described = set(re.findall(r"^    (\w+):", args, flags=re.M))
        assert set(inspect.signature(obj).parameters) == described, dotted


METRICS_PAGE = PROJECT_ROOT / "docs" / "reference" / "metrics.md"


def test_the_metrics_page_is_the_generated_reference_of_every_metric_the_exporter_serves():
    from matos_dagster.core.metrics import catalog

    documented = between(METRICS_PAGE.read_text(), "<!-- metrics reference", "<!-- end of the metrics reference")
    assert documented == catalog.reference(), "run `python -m matos_dagster.core.metrics.catalog` and paste its output"
    for m in catalog.METRICS:  # Prometheus' conventions: the prefix, a unit last, `_total` on counters only
        assert m.name.startswith("matos_") and m.help, m.name
        assert m.name.endswith("_total") == (m.kind == "counter"), m.name
        assert not m.name.endswith(("_ms", "_s", "_milliseconds", "_kb")), m.name


YOUR_PROJECT = PROJECT_ROOT / "docs" / "operations" / "your-project.md"


def test_the_your_project_page_shows_the_scaffolded_yaml_the_attributes_and_the_jobs_as_generated():
    """The YAML `dg scaffold defs` writes, the component's attributes (from its model) and the archive's
    jobs with the op `--config-json` configures: `python -m matos_dagster.component_reference`."""
    from matos_dagster import component_reference

    page = YOUR_PROJECT.read_text()
    for label, part in component_reference.PARTS.items():
        documented = between(page, f"<!-- {label} (generated)", f"<!-- end of the {label}")
        assert documented == part(), f"run `python -m matos_dagster.component_reference` and paste its {label}"


def test_the_your_project_pages_launch_example_names_real_ops_and_keys_that_parse():
    import json
    import shlex

    from matos_dagster import component_reference
    from matos_dagster.core.offsets.ranges import parse_key

    jobs = component_reference.jobs()
    launches = re.findall(r"^dg launch (.*?)'$", YOUR_PROJECT.read_text().replace("\\\n", ""), flags=re.M)
    assert len(launches) == 2
    for launch in launches:
        args = shlex.split(launch + "'")
        job, config = args[args.index("--job") + 1], json.loads(args[args.index("--config-json") + 1])
        ((op, body),) = config["ops"].items()
        assert f"| `{job}` | `{op}` |" in jobs, (job, op)
        for field in body["config"]:
            assert f"`{field}`" in jobs.split(f"| `{job}` | `{op}` |")[1].split("\n")[0], (job, field)
        for key in body["config"].get("ranges", []):
            parse_key(key)
