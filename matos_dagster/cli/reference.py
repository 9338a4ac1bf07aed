"""The CLI reference of the documentation, generated from the parsers themselves.

`python -m matos_dagster.cli.reference` prints docs/reference/cli.md's generated part: every
command with its description, usage, each argument and option (its default and help as `--help`
gives them) and its example. A test fails when the page and this output differ, so an option
added to a command (or a job's Config field, which becomes one: cli/jobs.py) is documented the
day it exists.
"""

from __future__ import annotations

import argparse

from matos_dagster.cli import EPILOG, parser

PROG = "matos"


def _cell(text: str) -> str:
    """One line of Markdown: `|` escaped for tables, `<...>` outside code spans shown, not taken for HTML."""
    parts = " ".join(text.split()).replace("|", "\\|").split("`")
    return "`".join(part if i % 2 else part.replace("<", "&lt;").replace(">", "&gt;") for i, part in enumerate(parts))


def _names(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    if isinstance(action, argparse.BooleanOptionalAction) or action.nargs == 0:
        return " / ".join(f"`{o}`" for o in action.option_strings)
    value = " " + (action.metavar if isinstance(action.metavar, str) else action.dest.upper())
    if action.nargs in ("*", "+"):
        value += " ..."
    return ", ".join(f"`{o}{value}`" for o in action.option_strings)


def _default(action: argparse.Action) -> str:
    if not action.option_strings:
        return "(required)" if action.nargs not in ("?", "*") else f"`{action.default}`"
    if action.required:
        return "(required)"
    if action.nargs == 0 and not isinstance(action, argparse.BooleanOptionalAction):
        return "off"
    if action.default in (None, "", [], argparse.SUPPRESS):
        return "(none)"
    if isinstance(action.default, bool):
        return "on" if action.default else "off"
    return f"`{action.default}`"


def _arguments(p: argparse.ArgumentParser) -> list[str]:
    formatter = p._get_formatter()
    rows = ["| argument | default | what |", "| --- | --- | --- |"]
    for action in p._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        helped = formatter._expand_help(action) if action.help else ""
        rows.append(f"| {_names(action)} | {_default(action)} | {_cell(helped)} |")
    return rows if len(rows) > 2 else []


def _usage(p: argparse.ArgumentParser, name: str) -> str:
    usage = " ".join(p.format_usage().split()).removeprefix("usage: ")
    return PROG + usage[usage.index(" "):] if name else usage


def subcommands(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def reference() -> str:
    """The generated part of docs/reference/cli.md, exactly (a test compares them)."""
    top = parser()
    top.prog = PROG
    out = [f"```\n{_usage(top, '')}\n```", "", *_arguments(top), "", "```", EPILOG, "```", ""]
    for name, p in sorted(subcommands(top).items()):
        p.prog = f"{PROG} {name}"
        out += [f"## `{PROG} {name}`", "", _cell(p.description or ""), "", f"```\n{_usage(p, name)}\n```", ""]
        arguments = _arguments(p)
        if arguments:
            out += [*arguments, ""]
        if p.epilog:
            out += ["Example:", "", "```", p.epilog.split("\n", 1)[1].strip(), "```", ""]
    return "\n".join(out)


if __name__ == "__main__":
    print(reference(), end="")
