"""The kinds of value a setting takes (core/settings.py): each checks a value and says what it
takes, in the words the refusal uses. No Dagster imports."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# -- kinds: what a value may be, said the way the refusal says it --------------------------------


@dataclass(frozen=True)
class Text:
    takes: str = "text"

    def check(self, value: str) -> None:
        pass


@dataclass(frozen=True)
class Whole:
    """A whole number of at least `least` (seconds, counts, ports)."""
    least: int = 1
    most: int | None = None
    unit: str = ""

    @property
    def takes(self) -> str:
        top = f" to {self.most}" if self.most is not None else ""
        return f"a whole number{f' of {self.unit}' if self.unit else ''}, {self.least}{top if top else ' or more'}"

    def check(self, value: str) -> None:
        if not re.fullmatch(r"\s*\d+\s*", value) or int(value) < self.least or (
                self.most is not None and int(value) > self.most):
            raise ValueError


@dataclass(frozen=True)
class Number:
    least: float = 0
    unit: str = ""

    @property
    def takes(self) -> str:
        return f"a number{f' of {self.unit}' if self.unit else ''}, {self.least:g} or more"

    def check(self, value: str) -> None:
        try:
            number = float(value)
        except ValueError:
            raise ValueError from None
        if not number >= self.least:  # also refuses nan
            raise ValueError


@dataclass(frozen=True)
class Choice:
    values: tuple[str, ...]

    @property
    def takes(self) -> str:
        return "one of " + ", ".join(self.values)

    def check(self, value: str) -> None:
        if value.strip() not in self.values:
            raise ValueError


# One spelling for every switch: `true` or `false`.
FLAG = Choice(("true", "false"))


@dataclass(frozen=True)
class Cron:
    takes: str = "a cron expression of 5 fields, e.g. `*/5 * * * *`"

    _FIELD = re.compile(r"(\*|\d+(-\d+)?|[a-zA-Z]{3}(-[a-zA-Z]{3})?)(/\d+)?(,(\*|\d+(-\d+)?|[a-zA-Z]{3})(/\d+)?)*")

    def check(self, value: str) -> None:
        fields = value.split()
        if len(fields) != 5 or not all(self._FIELD.fullmatch(f) for f in fields):
            raise ValueError


@dataclass(frozen=True)
class Pairs:
    """`key=value` pairs separated by `;` (Spark conf, catalog properties)."""
    takes: str = "`key=value` pairs separated by `;`"

    def check(self, value: str) -> None:
        for pair in filter(None, (p.strip() for p in value.split(";"))):
            key, eq, _ = pair.partition("=")
            if not eq or not key.strip():
                raise ValueError


@dataclass(frozen=True)
class Servers:
    takes: str = "`host:port[,host:port]`"

    def check(self, value: str) -> None:
        for server in value.split(","):
            host, colon, port = server.strip().rpartition(":")
            if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError


@dataclass(frozen=True)
class Url:
    schemes: tuple[str, ...] = ("http", "https")
    empty: bool = False  # empty means "derive it" for some settings
    credentials: str = ""  # where a user and password go instead of `user:password@` (refused in the URL)

    @property
    def takes(self) -> str:
        out = (" or ".join(f"`{s}://...`" for s in self.schemes)) + (" (or empty)" if self.empty else "")
        return out + (f", without `user:password@` (they go in {self.credentials})" if self.credentials else "")

    def check(self, value: str) -> None:
        if self.empty and not value:
            return
        scheme, sep, rest = value.partition("://")
        if not sep or scheme not in self.schemes or not rest:
            raise ValueError
        if self.credentials and has_userinfo(value):
            raise ValueError


def has_userinfo(url: str) -> bool:
    """Whether a URL holds a user (and maybe a password) before its host: `https://user:secret@host`."""
    return "@" in url.partition("://")[2].split("/", 1)[0]


def without_userinfo(url: str) -> str:
    """`url` with its user and password, if any, left out (`https://user:secret@host` -> `https://host`)."""
    if not has_userinfo(url):
        return url
    scheme, _, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme}://{host.rpartition('@')[2]}{slash}{path}"


@dataclass(frozen=True)
class SparkMaster:
    takes: str = "`sc://host:port` (Spark Connect), `local[*]`, `local[N]`, `spark://host:port`, `yarn` or `k8s://...`"

    def check(self, value: str) -> None:
        if not re.fullmatch(r"sc://[^/:]+:\d+(/.*)?|local(\[(\*|\d+)(,\d+)?\])?|spark://.+|yarn|k8s://.+", value.strip()):
            raise ValueError


@dataclass(frozen=True)
class File:
    """A path to a file that must exist; empty allowed (then the setting's empty meaning applies)."""
    takes: str = "the path of a readable file (or empty)"

    def check(self, value: str) -> None:
        if value and not Path(value).expanduser().is_file():
            raise ValueError
