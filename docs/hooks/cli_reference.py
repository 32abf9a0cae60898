"""The command-line reference, written at build time from ``xjobs.cli.build_parser()``: the
parser ``xjobsd`` itself runs, so the page cannot say what the command does not take.

``reference/cli.md`` holds the prose and a marker; this hook (``hooks:`` in ``mkdocs.yml``)
replaces the marker with one section per command, each with its usage, its arguments and
options (argparse's own help, ``%(default)s`` expanded) and what ``--help`` prints above them.
A section's anchor is the command's words joined by ``-`` (``#jobs-retry``), so other pages
link to one command.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Any, Iterator

MARKER = "<!-- the commands: written by docs/hooks/cli_reference.py -->"
PAGE = "reference/cli.md"
# usage lines wrap at this width whatever the terminal of the machine building the site
WIDTH = "76"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} lost its marker {MARKER!r}")
    return markdown.replace(MARKER, reference())


def reference() -> str:
    os.environ["COLUMNS"] = WIDTH   # read by argparse's formatter when it is made
    from xjobs.cli import build_parser
    parser = build_parser()
    return "\n".join(_section(parser, [], None, 2))


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser, str | None]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, sub, helps.get(name)


def _section(parser: argparse.ArgumentParser, words: list[str], summary: str | None, level: int) -> Iterator[str]:
    anchor = "-".join(words) or "xjobsd"
    yield f"{'#' * level} {' '.join(['xjobsd', *words])} {{#{anchor}}}"
    yield ""
    if summary:
        yield _escape(summary[0].upper() + summary[1:]) + "."
        yield ""
    yield "```text"
    yield parser.format_usage().strip()
    yield "```"
    yield ""
    rows = list(_rows(parser))
    if rows:
        yield "| argument | what it is |"
        yield "|---|---|"
        yield from rows
        yield ""
    if parser.description and words:
        yield f'??? note "What `xjobsd {" ".join(words)} --help` says"'
        yield ""
        yield "    ```text"
        for line in parser.description.strip("\n").splitlines():
            yield f"    {line}".rstrip()
        yield "    ```"
        yield ""
    for name, sub, help_ in _subcommands(parser):
        yield from _section(sub, [*words, name], help_, min(level + 1, 4) if words else level)


def _rows(parser: argparse.ArgumentParser) -> Iterator[str]:
    formatter = parser._get_formatter()
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or action.help == argparse.SUPPRESS:
            continue
        text = _escape(formatter._expand_help(action)) if action.help else ""
        if action.choices and not isinstance(action.choices, dict):
            text += f" (one of: {', '.join(f'`{c}`' for c in action.choices)})"
        yield f"| {_invocation(action)} | {text} |"


def _invocation(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    metavar = "" if action.nargs == 0 else " " + _metavar(action)
    if action.nargs == "?":
        metavar = f" [{metavar.strip()}]"
    return ", ".join(f"`{option}{metavar}`" for option in action.option_strings)


def _metavar(action: argparse.Action) -> str:
    if isinstance(action.metavar, tuple):
        return " ".join(action.metavar)
    return action.metavar or action.dest.upper()


def _escape(text: str) -> str:
    """argparse's help as one Markdown table cell: a pipe, a bracket, an angle bracket or an
    asterisk in it is text, not table or emphasis syntax."""
    text = " ".join(text.split()).replace("&", "&amp;").replace("<", "&lt;")
    return re.sub(r"([|>*\[\]])", r"\\\1", text)
