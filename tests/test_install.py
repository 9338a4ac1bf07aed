"""matos-dagster installed as a user installs it: `python -m build` makes a wheel and an sdist, and
the wheel goes into a fresh virtualenv outside the repository with pip (not editable).

The build compiles the native slice reader into the wheel where librdkafka's header is (setup.py);
the fresh virtualenv loads it against its own confluent-kafka. pip takes the dependencies from its
cache (the project's own install filled it) and compiles no bytecode, so the install is the
unpacking of the wheels.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "matos_dagster"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def runtime_modules() -> set[str]:
    out = set()
    for path in RUNTIME.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> dict[str, Path]:
    """The sdist, and the wheel built from it, as `python -m build` makes them."""
    tmp = tmp_path_factory.mktemp("dist")
    # Built from a copy: setuptools leaves build/ and *.egg-info beside the sources it builds.
    source = tmp / "source"
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".venv", ".devstack", ".bench", ".git", "build", "*.egg-info", "__pycache__", "test-output", "site",
        "_slice_reader.so"))
    p = subprocess.run([sys.executable, "-m", "build", "--outdir", str(tmp / "out"), str(source)],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (wheel,) = (tmp / "out").glob("matos_dagster-*.whl")
    (sdist,) = (tmp / "out").glob("matos_dagster-*.tar.gz")
    return {"wheel": wheel, "sdist": sdist, "log": p.stdout + p.stderr}


def test_the_wheel_holds_the_runtime_its_instance_file_and_the_native_reader(dist):
    names = zipfile.ZipFile(dist["wheel"]).namelist()
    packaged = [n for n in names if ".dist-info/" not in n]
    assert all(n.startswith("matos_dagster/") for n in packaged), packaged
    assert not [n for n in packaged if any(x in n for x in ("bench", "devstack", "matos_dev", "demo"))]
    shipped = {n.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for n in packaged if n.endswith(".py")}
    assert shipped == runtime_modules(), "every runtime module, nothing else"
    others = sorted(n for n in packaged if not n.endswith(".py"))
    # The instance a new DAGSTER_HOME gets, the reader's source, and the reader built where it could be.
    reader = "matos_dagster/core/archive/native/_slice_reader.so"
    assert others == sorted(["matos_dagster/dagster.yaml", "matos_dagster/core/archive/native/slice_reader.c",
                             *([reader] if reader in others else [])]), others
    assert zipfile.ZipFile(dist["wheel"]).read("matos_dagster/dagster.yaml") == (ROOT / "dagster.yaml").read_bytes()
    if reader in others:  # a shared library of this platform: the wheel says so
        assert not dist["wheel"].name.endswith("-none-any.whl"), dist["wheel"].name
    else:  # said once, in the build's output, and the wheel is for any platform
        assert dist["log"].count("native slice reader not built") == 1, dist["log"][-3000:]
        assert dist["wheel"].name.endswith("-py3-none-any.whl"), dist["wheel"].name


def test_the_sdist_holds_the_sources_the_build_and_the_files_a_deployment_starts_from(dist):
    with tarfile.open(dist["sdist"]) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    for name in ("setup.py", "pyproject.toml", "README.md", "dagster.yaml", "dagster.postgres.yaml", "workspace.yaml",
                 "deploy/workspace.yaml", "deploy/systemd/matos-dagster-daemon.service",
                 "matos_dagster/core/archive/native/slice_reader.c", "matos_dagster/core/archive/native/build.py"):
        assert name in names, name
    assert not [n for n in names if n.startswith(("tests/", "dev/", ".devstack"))]


def test_the_wheel_installs_with_pip_into_a_fresh_virtualenv_outside_the_repository(dist, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    p = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
                        "--no-compile", "--disable-pip-version-check", str(dist["wheel"])],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    (tmp_path / "topics.yaml").write_text("topics:\n  - name: orders\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MATOS_", "DAGSTER_", "PYTHON"))}
    env.update(MATOS_TOPICS_FILE=str(tmp_path / "topics.yaml"), DAGSTER_HOME=str(tmp_path / "home"))

    def run(*args: str) -> subprocess.CompletedProcess:
        # From a folder outside the repository: nothing of the source tree is importable there.
        return subprocess.run(list(args), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    where = run(str(venv / "bin" / "python"), "-c", "import matos_dagster; print(matos_dagster.__file__)")
    assert where.stdout.strip().startswith(str(venv)), where.stdout + where.stderr
    usage = run(str(venv / "bin" / "matos"), "--help")
    assert usage.returncode == 0 and "check" in usage.stdout and "archive" in usage.stdout, usage.stderr
    assert run(str(venv / "bin" / "matos"), "--version").stdout.strip() == f"matos {VERSION}"
    # The reader the wheel carries loads against this virtualenv's own confluent-kafka.
    reader = run(str(venv / "bin" / "python"), "-c",
                 "from matos_dagster.core.archive import native; print(native.why_not())")
    if "matos_dagster/core/archive/native/_slice_reader.so" in zipfile.ZipFile(dist["wheel"]).namelist():
        assert reader.stdout.strip() == "None", reader.stdout + reader.stderr
    # A new DAGSTER_HOME gets the packaged dagster.yaml, its storage made under the lock.
    made = run(str(venv / "bin" / "matos"), "instance")
    assert made.returncode == 0 and "Dagster instance ready" in made.stdout, made.stdout + made.stderr
    assert "MatosInstance" in (tmp_path / "home" / "dagster.yaml").read_text()
    assert (tmp_path / "home" / "history" / "runs.db").is_file()
