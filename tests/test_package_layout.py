"""The package's three floors, as a newcomer should find them.

- `matos_dagster/core/`: the logic, which imports no Dagster (and nothing of the Dagster shell);
- the Dagster shell around it: assets, resources, sensors, jobs, definitions, the CLI;
- the development tooling (local stack, benchmarks, demo): `dev/matos_dev`, not in the wheel.

And: no import cycle in either package, no runtime module over 400 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "matos_dagster"
DEV = ROOT / "dev" / "matos_dev"
DAGSTER = ("dagster", "dagster_pyspark", "dagster_webserver", "dagster_postgres", "dagster_dg_cli")
LONGEST = 400  # lines of a runtime module


def modules(package: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """What a module imports, anywhere in it (a function's late import is an import too): the
    modules of `known` it names, and the top-level name of every other import."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names]
            names = [n if n in known else node.module for n in names]
        else:
            continue
        for name in names:
            while name not in known and "." in name and name.split(".")[0] in ("matos_dagster", "matos_dev"):
                name = name.rsplit(".", 1)[0]
            out.add(name if name in known else name.split(".")[0])
    return out


def cycles(package: Path) -> list[list[str]]:
    """The import graph's strongly connected components of more than one module (Tarjan)."""
    known = modules(package)
    graph = {m: sorted(i for i in imports(p, known) if i in known and i != m) for m, p in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_core_imports_no_dagster_and_nothing_of_the_shell():
    known = modules(RUNTIME)
    offending = {}
    for name, path in known.items():
        if name == "matos_dagster.core" or name.startswith("matos_dagster.core."):
            bad = sorted(i for i in imports(path, known)
                         if i in DAGSTER or (i.startswith("matos_dagster") and not i.startswith("matos_dagster.core"))
                         or i.startswith("matos_dev"))
            if bad:
                offending[name] = bad
    assert not offending, f"core modules importing Dagster or the shell: {offending}"


def test_the_runtime_never_imports_the_development_tooling():
    known = modules(RUNTIME)
    offending = {n: "matos_dev" for n, p in known.items() if "matos_dev" in imports(p, known)}
    assert not offending


@pytest.mark.parametrize("package", [RUNTIME, DEV], ids=["matos_dagster", "matos_dev"])
def test_no_import_cycle(package):
    assert cycles(package) == []


def test_the_cycle_finder_finds_a_cycle(tmp_path):
    package = tmp_path / "matos_dagster"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from matos_dagster import b\n")
    (package / "b.py").write_text("def f():\n    from matos_dagster.a import x\n")
    assert cycles(package) == [["matos_dagster.a", "matos_dagster.b"]]


def test_no_runtime_module_over_400_lines():
    long = {n: len(p.read_text().splitlines()) for n, p in modules(RUNTIME).items()}
    assert {n: lines for n, lines in long.items() if lines > LONGEST} == {}
