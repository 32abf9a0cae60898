"""The flags that set settings, made from their declarations in ``config.py``.

A command names the settings it takes (``add(parser, "database_url", "schema")``); each
becomes the flag its declaration names, with its help, its value's name (``DURATION``, ``MiB``,
``HOST:PORT``) and its action: a repeatable setting's flag adds up (``--queue``, ``--app``), a
switch's flag sets it (``--ui-actions``) or, named ``--no-...``, clears it (``--no-migrate``).
``given(args)`` answers what was given, by setting key, for ``load_settings``: the values are
read and refused there, as the environment's and the file's are.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Mapping

from ..config import SETTINGS, find_setting

# where a setting's flag lands on the namespace: apart from a command's own flags, which may
# share a name (``xjobsd ui --control`` names a daemon to show, not a socket to serve)
_DEST = "setting_{}"


def add(parser: argparse.ArgumentParser, *keys: str, flags: Mapping[str, str] | None = None,
        help: Mapping[str, str] | None = None, former: Mapping[str, str] | None = None) -> None:
    """Add the flags of the settings ``keys``, in that order. A command whose flags read
    otherwise names them in ``flags`` and rewords their help in ``help``; ``former`` keeps a
    flag's former spelling working, unlisted, with a warning naming the one to say instead."""
    for key in keys:
        declared = find_setting(key)
        flag = (flags or {}).get(key) or declared.flag
        if flag is None:
            raise ValueError(f"the setting {key!r} declares no flag")
        text = (help or {}).get(key) or declared.flag_help or declared.help
        options: dict[str, Any] = {"dest": _DEST.format(declared.key)}
        if declared.kind.switch:
            options.update(default=None, const=not flag.startswith("--no-"))
            action = "store_const"
        else:
            options["metavar"] = (declared.metavar or declared.kind.metavar
                                  or flag.lstrip("-").replace("-", "_").upper())
            action = "append" if declared.kind.repeatable else "store"
        parser.add_argument(flag, action=action, help=text, **options)
        if former and key in former:
            parser.add_argument(former[key], action=_Former, help=argparse.SUPPRESS, **options,
                                instead=f"{flag}, the spelling of the setting ({declared.key}, "
                                        f"{declared.env}) and of `xjobsd run`")


class _Former(argparse.Action):
    """A flag's former spelling: read as the flag it became (a single value, or a switch's
    constant), with a warning saying what to write instead."""

    def __init__(self, option_strings: list[str], dest: str, instead: str, const: Any = None,
                 **kwargs: Any) -> None:
        self.instead = instead
        super().__init__(option_strings, dest, nargs=0 if const is not None else None, const=const,
                         **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"xjobsd: warning: {option_string} is deprecated: say {self.instead}", file=sys.stderr)
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


def given(args: argparse.Namespace) -> dict[str, Any]:
    """The settings this command line sets, by key (flags it did not give are left out)."""
    values = {s.key: getattr(args, _DEST.format(s.key), None) for s in SETTINGS}
    return {key: value for key, value in values.items() if value is not None}
