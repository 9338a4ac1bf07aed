"""Build the native slice reader: `python -m matos_dagster.core.archive.native.build` (`make install` runs it).

Compiles slice_reader.c with the system's C compiler into _slice_reader.so next to this file,
linked against the librdkafka that confluent-kafka's wheel bundles, so both readers run the same
librdkafka version. Only rdkafka.h is needed from the system (Debian: `apt-get install
librdkafka-dev`; its API is older than the bundled library's, and librdkafka keeps its ABI).
Without a compiler or the header the build says why and exits 0: the Python reader is used.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "slice_reader.c"
TARGET = HERE / "_slice_reader.so"
INCLUDE_DIRS = [os.environ.get("RDKAFKA_INCLUDE", ""), "/usr/include", "/usr/local/include"]


def bundled_librdkafka() -> Path | None:
    """The librdkafka shared library inside the confluent-kafka wheel, if there is one."""
    libs = Path(sysconfig.get_paths()["purelib"]) / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka-*.so*")) if libs.is_dir() else []
    return found[0] if found else None


def command() -> list[str]:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise RuntimeError("no C compiler (cc) on PATH: install one (Debian: apt-get install gcc)")
    include = next((d for d in INCLUDE_DIRS if d and (Path(d) / "librdkafka" / "rdkafka.h").is_file()), None)
    if include is None:
        raise RuntimeError("librdkafka/rdkafka.h not found: install it (Debian: apt-get install librdkafka-dev) "
                           "or set RDKAFKA_INCLUDE to the folder holding librdkafka/")
    lib = bundled_librdkafka()
    link = ([f"-L{lib.parent}", f"-l:{lib.name}", f"-Wl,-rpath,{lib.parent}"] if lib is not None else ["-lrdkafka"])
    return [cc, "-O2", "-Wall", "-fPIC", "-shared", f"-I{include}", "-o", str(TARGET), str(SOURCE), *link]


def build() -> str | None:
    """Build the module; return None, or why it could not be built."""
    try:
        cmd = command()
    except RuntimeError as e:
        return str(e)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        TARGET.unlink(missing_ok=True)
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
