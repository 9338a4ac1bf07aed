"""The documentation builds, and the README stays a page for users.

`mkdocs build --strict` (what `make docs` runs) fails on a broken link or anchor, a page missing
from the navigation or a missing included table, so `make test` fails on them too. The README is
at most 300 lines, links only inside the repository, and holds no dated measurement: those belong
to the performance page as current figures, and the story of how they were found to commit messages.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from matos_dagster.core.settings import PROJECT_ROOT

README = PROJECT_ROOT / "README.md"
DOCS = PROJECT_ROOT / "docs"
MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|December"
          "|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec")
DATED = [
    (rf"\b({MONTHS})\.? \d{{1,2}}\b", "a month followed by a day"),
    (rf"\b\d{{1,2}} ({MONTHS})\b", "a day followed by a month"),
    # An ISO timestamp, or a date in code (a window key, a setting's default), is not a log's date.
    (r"(?<!`)(?<!\")\b20\d\d-\d\d-\d\d\b(?![T`\"])", "a date"),
    (r"\bissue \d+", "an issue number"),
    (r"(?<![\w/])#\d{3,}\b", "an issue number"),
    (r"load average", "a load average"),
    (r"\bat load \d", "a machine's load"),
    (r"this (morning|afternoon|evening)|yesterday|today's", "a diary's time"),
]


def problems(text: str, rules) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern, what in rules:
            m = re.search(pattern, line, flags=re.I)
            if m:
                found.append(f"line {number}: {what}: {m.group(0)!r}")
    return found


def documents() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def test_the_documentation_builds_with_no_warning(tmp_path):
    """Strict: a broken link or anchor, a page not in the nav, a missing snippet, each fails the build."""
    site = tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                        str(PROJECT_ROOT / "mkdocs.yml"), "--site-dir", str(site)],
                       cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "WARNING" not in p.stderr, p.stderr[-3000:]
    for page in ("index.html", "configuration/index.html", "operations/index.html", "layout/index.html",
                 "design/index.html", "reliability/index.html", "performance/index.html", "development/index.html",
                 "changelog/index.html", "operations/installing/index.html", "operations/deployment/index.html",
                 "operations/troubleshooting/index.html", "operations/sizing/index.html", "performance/sizing/index.html",
                 "reference/cli/index.html"):
        assert (site / page).is_file(), page
    performance = (site / "performance" / "index.html").read_text()
    # The tables `make bench` writes are included (pymdownx.snippets), and its chart is beside them.
    assert "CPU bound of archiving" in performance and "ratio of minima" in performance
    assert 'src="throughput.png"' in performance and (site / "performance" / "throughput.png").is_file()
    # The Python API from the docstrings (mkdocstrings), and the deployment files as they are (snippets).
    python = (site / "reference" / "python" / "index.html").read_text()
    assert "read_table" in python and "The archive's Swift container" in python, python[:3000]
    deployment = re.sub(r"<[^>]+>", "", (site / "operations" / "deployment" / "index.html").read_text())
    assert "ExecStart=/opt/matos/venv/bin/dagster-daemon run -w /etc/matos/workspace.yaml" in deployment


def test_the_readme_is_a_page_for_users_of_at_most_300_lines():
    lines = README.read_text().splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines: move the detail into docs/"
    text = README.read_text()
    for heading in ("## Quick start", "## Connect your Kafka and Swift", "## Working with it"):
        assert heading in text, heading
    # Right after the two commands: how to point it at your own Kafka and Swift, then the preflight.
    quick = text.index("## Quick start")
    connect = text.index("## Connect your Kafka and Swift")
    assert "make run" in text[quick:connect] and "make test" in text[quick:connect]
    assert not re.search(r"^## ", text[quick + 1:connect], flags=re.M)
    section = text[connect:text.index("\n## ", connect)]
    assert "MATOS_KAFKA_BOOTSTRAP_SERVERS" in section and "MATOS_SWIFT_AUTH_URL" in section
    assert "topics:" in section and "matos check" in section


def test_the_readme_has_no_dated_measurement_nor_a_diary():
    found = problems(README.read_text(), DATED)
    assert not found, "README.md: " + "; ".join(found)


@pytest.mark.parametrize("path", documents()[1:], ids=lambda p: str(p.relative_to(PROJECT_ROOT)))
def test_no_document_has_a_dated_log_or_an_issue_number(path):
    found = problems(path.read_text(), DATED)
    assert not found, f"{path.relative_to(PROJECT_ROOT)}: " + "; ".join(found)


def test_the_readme_links_only_inside_the_repository():
    """Relative links point at files of the repository (the documentation's pages among them)."""
    text = README.read_text()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue  # a web address the reader may visit, e.g. the local UI
        path = target.split("#")[0]
        assert not path.startswith(".."), f"{target}: outside the repository"
        assert (PROJECT_ROOT / path).exists(), f"{target}: no such file in the repository"


# A file of the repository named in a document: a test, a module, a folder of the package.
NAMED_FILE = re.compile(r"(?<![\w/.-])((?:tests|matos_dagster|dev/matos_dev|docs)/[\w./-]*\w)")


def test_every_file_a_document_names_exists():
    missing = [f"{path.relative_to(PROJECT_ROOT)}: {name}"
               for path in documents() for name in NAMED_FILE.findall(path.read_text())
               if not (PROJECT_ROOT / name.split("::")[0]).exists()]
    assert missing == []
