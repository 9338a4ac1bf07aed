"""matos-dagster installed as a user installs it: `python -m build` makes a wheel and an sdist, and
the wheel goes into a fresh virtualenv outside the repository with pip (not editable); then used
as a user does in a Dagster project of their own, made by `create-dagster`, with `dg`.

The build compiles the native slice reader into the wheel where librdkafka's header is (setup.py);
the fresh virtualenv loads it against its own confluent-kafka. pip takes the dependencies from its
cache (the project's own install filled it) and compiles no bytecode, so the install is the
unpacking of the wheels.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import tomllib
import uuid
import zipfile
from pathlib import Path

import pytest
import yaml
from dagster import AssetKey, DagsterInstance
from helpers import check_archive, produce

from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.resources import SwiftResource

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "matos_dagster"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def runtime_modules() -> set[str]:
    out = set()
    for path in RUNTIME.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def build(tmp: Path) -> dict[str, Path]:
    """The sdist, and the wheel built from it, as `python -m build` makes them."""
    # Built from a copy: setuptools leaves build/ and *.egg-info beside the sources it builds.
    source = tmp / "source"
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".venv", ".devstack", ".bench", ".git", "build", "*.egg-info", "__pycache__", "test-output", "site",
        "_slice_reader.so", ".hypothesis", ".pytest_cache"))  # the last two: written by the running session
    p = _run([sys.executable, "-m", "build", "--outdir", str(tmp / "out"), str(source)], timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (wheel,) = (tmp / "out").glob("matos_dagster-*.whl")
    (sdist,) = (tmp / "out").glob("matos_dagster-*.tar.gz")
    return {"wheel": wheel, "sdist": sdist, "log": p.stdout + p.stderr}


def install(dist: dict[str, Path], tmp: Path) -> Path:
    """A fresh virtualenv outside the repository, with the wheel installed by pip."""
    venv = tmp / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=120).returncode == 0
    pip_install(venv, str(dist["wheel"]))
    return venv


# The build and the install (about 70 s on the 2-core CI, most of it pip writing 1.2 GB of
# dependencies) start in a thread when the session starts (conftest.py calls start_ahead), so they
# go on while the tests before this module run; the fixtures wait for them here.
_ahead: dict[str, concurrent.futures.Future] = {}
_running: set[subprocess.Popen] = set()


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    """subprocess.run, the process known to stop_ahead while it runs."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        _running.add(p)
        try:
            out, err = p.communicate(timeout=timeout)
        except BaseException:
            p.kill()
            raise
        finally:
            _running.discard(p)
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def start_ahead(tmp_path_factory, with_venv: bool) -> None:
    future = concurrent.futures.Future()

    def work():
        try:
            built = build(tmp_path_factory.mktemp("dist"))
            _ahead["dist"].set_result(built)
            if with_venv:
                _ahead["venv"].set_result(install(built, tmp_path_factory.mktemp("installed")))
        except BaseException as e:  # noqa: BLE001 - raised by the fixture that waits for it
            for f in _ahead.values():
                if not f.done():
                    f.set_exception(e)

    _ahead["dist"] = future
    if with_venv:
        _ahead["venv"] = concurrent.futures.Future()
    threading.Thread(target=work, name="test_install ahead", daemon=True).start()


def stop_ahead() -> None:
    """At the session's end (conftest.py): a build or install still going (the session stopped
    before this module) is stopped by its PID."""
    for p in list(_running):
        p.kill()
        p.wait(30)


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> dict[str, Path]:
    if "dist" in _ahead:
        return _ahead["dist"].result(timeout=1800)
    return build(tmp_path_factory.mktemp("dist"))


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


def pip_install(venv: Path, *args: str) -> None:
    p = _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
              "--no-compile", "--disable-pip-version-check", *args], timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]


@pytest.fixture(scope="module")
def venv(dist, tmp_path_factory) -> Path:
    if "venv" in _ahead:
        return _ahead["venv"].result(timeout=1800)
    return install(dist, tmp_path_factory.mktemp("installed"))


def test_the_wheel_installs_with_pip_into_a_fresh_virtualenv_outside_the_repository(dist, venv, tmp_path):
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


PAGE = ROOT / "docs" / "operations" / "your-project.md"
DAY_ASSET = ROOT / "docs" / "snippets" / "orders_of_the_day.py"  # the page's and event-time.md's example


def tutorial_blocks() -> list[tuple[str, str]]:
    """The tutorial's blocks the page marks `<!-- tutorial: run -->`, (language, text), in its order."""
    return re.findall(r"<!-- tutorial: run -->\n```(\w*)\n(.*?)```", PAGE.read_text(), flags=re.S)


def scaffolded_on_the_page() -> str:
    return re.search(r"<!-- scaffolded defs.yaml \(generated\) -->\n```yaml\n(.*?)```", PAGE.read_text(),
                     flags=re.S).group(1)


DAY_MS = 86_400_000


def test_the_tutorial_of_the_your_project_page_runs_as_written_and_a_users_dg_project_archives_two_topics_and_reads_a_day(
        venv, tmp_path, kafka, kafka_server, swift_server, connect_server):
    """As a user does: a new project (create-dagster), matos-dagster installed from the wheel into its
    virtualenv; then the tutorial's commands, as the page has them (its topic and container made
    unique), from the scaffolded component to the records read back, `matos --archive` included;
    then a second archive side by side, a range archived with `dg launch`, and the page's own asset
    on a day of the archive."""
    tag = uuid.uuid4().hex[:6]
    topic, day_topic = f"orders_{tag}", f"sales_{tag}"  # `_`: the asset names are the topics'
    container = f"user-{uuid.uuid4().hex[:8]}"
    home = tmp_path / "dagster_home"
    home.mkdir()
    # Not the development setup (no MATOS_ variable at all): the connections are the component's.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MATOS_", "DAGSTER_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}:{env['PATH']}", DAGSTER_HOME=str(home),
               DAGSTER_DG_UPDATE_CHECK_ENABLED="0", COLUMNS="200",  # create-dagster: no look at PyPI
               KAFKA_BOOTSTRAP_SERVERS=kafka_server.bootstrap_servers, SWIFT_AUTH_URL=swift_server.auth_url,
               SWIFT_USER=swift_server.user, SWIFT_KEY=swift_server.key, SPARK_MASTER=connect_server.url)
    project = tmp_path / "shop"
    took = {}

    def run(*args: str, cwd: Path = project) -> str:
        began = time.monotonic()
        p = subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        took[" ".join(args[:3])] = round(time.monotonic() - began, 1)
        print(f"{' '.join(args[:4])}: {took[' '.join(args[:3])]} s")
        said = p.stdout + p.stderr
        assert p.returncode == 0, "\n".join([" ".join(args)] + [line for line in said.splitlines()
                                                                 if "ERROR" in line or "Failure" in line]
                                            + [said[-3000:]])
        return said

    def ours(text: str) -> str:  # the container, not the group `matos-archiver`
        return re.sub(r"\bmatos-archive\b", container, text.replace("orders", topic))

    run(str(Path(sys.executable).parent / "create-dagster"), "project", "--no-uv-sync", str(project), cwd=tmp_path)
    pip_install(venv, "--no-deps", "--editable", str(project))  # the user's own package, as `uv sync` makes it
    defs = project / "src" / "shop" / "defs"
    # Found through the package's entry point: a package without it has nothing to list or scaffold.
    assert "matos_dagster.KafkaArchive" in run("dg", "list", "components")

    said = {}
    for language, text in tutorial_blocks():
        if language == "python":  # a file, named on its first line, that a later command runs
            (project / text.splitlines()[0].removeprefix("#").strip()).write_text(ours(text))
            continue
        for line in filter(None, (line.split("  #")[0].strip() for line in text.splitlines())):
            said[line] = run(*shlex.split(ours(line)))
            if line.startswith("dg scaffold defs"):  # what the page shows, then set to this test's topic
                written = (defs / "eu" / "defs.yaml").read_text()
                assert written == scaffolded_on_the_page()
                (defs / "eu" / "defs.yaml").write_text(ours(written))
    assert "All definitions loaded successfully." in said["dg check defs"]
    checked = said["matos --archive eu check"]
    parts = ("settings", "topics", "kafka", "swift", "spark", "reader", "dagster")
    assert [line.split()[:2] for line in checked.splitlines() if line.split()[:1] in ([p] for p in parts)] == [
        [part, "OK"] for part in parts], checked
    assert "1000 records, offsets 0 to 999" in said["python read.py"]
    verified = said["matos --archive eu verify orders --sample -1"]
    assert "  ok: True" in verified and "  compared_with_kafka: 1000" in verified, verified
    swift = SwiftResource(auth_url=swift_server.auth_url, user=swift_server.user, key=swift_server.key,
                          container=container)
    with swift.store() as store:
        assert check_archive(kafka, store, topic, "matos-archiver") == {0: 1000}

    # A second archive beside the first, both of the two topics; the page's asset on the second's days.
    run("dg", "scaffold", "defs", "matos_dagster.KafkaArchive", "us")
    for name in ("eu", "us"):
        doc = yaml.safe_load((defs / name / "defs.yaml").read_text())
        assert doc["attributes"]["name"] == name
        doc["attributes"]["topics"] = [{"name": t} for t in (topic, day_topic)]
        doc["attributes"]["swift"]["container"] = container if name == "eu" else f"{container}-us"
        (defs / name / "defs.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    (defs / f"{day_topic}_of_the_day.py").write_text(DAY_ASSET.read_text().replace("orders", day_topic))

    # Records of the day before yesterday (within Kafka's retention), and one of the next day: the day
    # is complete once they are archived.
    day_ms = int(time.time() * 1000) // DAY_MS * DAY_MS - 2 * DAY_MS
    day = time.strftime("%Y-%m-%d", time.gmtime(day_ms / 1000))
    kafka.create_topic(day_topic, 1)
    produce(kafka, day_topic, [(b"k", f"v{i}".encode(), []) for i in range(20)], timestamp=day_ms + 3_600_000)
    produce(kafka, day_topic, [(b"k", b"next day", [])], timestamp=day_ms + DAY_MS + 3_600_000)
    key = OffsetRange(day_topic, 0, 0, 21).key
    run("dg", "launch", "--job", "eu_add_ranges",
        "--config-json", json.dumps({"ops": {"eu_add_range_keys": {"config": {"topic": day_topic}}}}))
    run("dg", "launch", "--job", "eu_archive_ranges",
        "--config-json", json.dumps({"ops": {"eu_archive_batch": {"config": {"ranges": [key]}}}}))
    with swift.store() as store:
        assert check_archive(kafka, store, day_topic, "matos-archiver") == {0: 21}
    # The days sensor's evaluation (the daemon's, here one tick by hand) finds the day complete.
    run("dagster", "sensor", "preview", "eu_days", "-m", "shop.definitions")
    run("dg", "launch", "--assets", f"eu/days_{day_topic},{day_topic}_of_the_day", "--partition", day)
    with DagsterInstance.from_config(str(home)) as instance:
        (record,) = instance.fetch_materializations(AssetKey(f"{day_topic}_of_the_day"), limit=1).records
    assert record.asset_materialization.partition == day
    assert record.asset_materialization.metadata["records"].value == 20
    print(f"user's project steps, seconds: {took}")
