"""Build the native slice reader: `python -m matos_dagster.core.archive.native.build`.

Compiles slice_reader.c with the system's C compiler into _slice_reader.so next to this file (or
where `build(target)` says: the package build puts it into the wheel, setup.py). Only rdkafka.h
is needed from the system (Debian: `apt-get install gcc librdkafka-dev`; its API is older than
the library's, and librdkafka keeps its ABI). No librdkafka is linked: the module takes its
`rd_kafka_*` functions from the librdkafka that confluent-kafka has loaded (its wheel's own), made
visible to it when it is loaded (native/__init__.py), so both readers run the same librdkafka
and one build serves any confluent-kafka release. Without a compiler or the header the build
says why and exits 0: the Python reader is used.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "slice_reader.c"
TARGET = HERE / "_slice_reader.so"
INCLUDE_DIRS = [os.environ.get("RDKAFKA_INCLUDE", ""), "/usr/include", "/usr/local/include"]


def command(target: Path = TARGET) -> list[str]:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise RuntimeError("no C compiler (cc) on PATH: install one (Debian: apt-get install gcc)")
    include = next((d for d in INCLUDE_DIRS if d and (Path(d) / "librdkafka" / "rdkafka.h").is_file()), None)
    if include is None:
        raise RuntimeError("librdkafka/rdkafka.h not found: install it (Debian: apt-get install librdkafka-dev) "
                           "or set RDKAFKA_INCLUDE to the folder holding librdkafka/")
    return [cc, "-O2", "-Wall", "-fPIC", "-shared", f"-I{include}", "-o", str(target), str(SOURCE)]


def build(target: Path = TARGET) -> str | None:
    """Build the module into `target`; return None, or why it could not be built."""
    try:
        cmd = command(target)
    except RuntimeError as e:
        return str(e)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        target.unlink(missing_ok=True)
        return f"{' '.join(cmd)} failed:\n{done.stderr.strip()}"
    return None


def main() -> int:
    why = build()
    if why is None:
        print(f"native slice reader built: {TARGET}")
    else:
        print(f"native slice reader NOT built ({why}); the archive uses the Python reader", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
