"""The command line's own refusals, in the voice of every other one: argparse's errors (an
unknown flag or command, a missing argument, a value of the wrong type or not among the
choices) become one line, ``xjobsd: X_CODE: message (hint: ...)``, exit 2, instead of a usage
block. Values that are wrong are ``X_INVALID_OPTION`` naming the option, as the settings'
are; a command line that does not parse is ``X_USAGE``. ``--help`` is untouched.

A negative value written after its flag with a space (``--delay -5s``, ``--wait -5s``) looks
like a flag to argparse; it is read as ``--delay=-5s`` instead, so the value itself is judged
(and a negative duration refused as such).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from typing import NoReturn, Sequence

from ..errors import InvalidOption, UsageInvalid, XJobsError

# what a negative number or duration looks like: -5, -0.5, -5s, -250ms
_NEGATIVE = re.compile(r"^-\.?\d")
_CHOICE = re.compile(r"invalid choice: (?P<value>.+?) \(choose from")
_TYPED = re.compile(r"invalid (?P<type>\w+) value: (?P<value>.+)$")
_REQUIRED = "the following arguments are required: "
_TYPE_WORDS = {"int": "a whole number", "float": "a number"}


class Parser(argparse.ArgumentParser):
    """``xjobsd``'s parser and every subcommand's: refusals raise instead of exiting."""

    def error(self, message: str) -> NoReturn:
        # argparse calls this inside its ``except ArgumentError``: the error names the argument
        failed = sys.exc_info()[1]
        name, text = ((failed.argument_name, failed.message) if isinstance(failed, argparse.ArgumentError)
                      else (None, message))
        if text.startswith(_REQUIRED):
            raise self._missing(text[len(_REQUIRED):].split(", ")) from None
        if name is not None:
            raise self._refusal(name, text) from None
        raise self._usage(text) from None

    # -- what each refusal says ----------------------------------------------------------------

    def command_words(self) -> str:
        """``jobs ls`` for ``xjobsd jobs ls``: what a message names (the prefix says xjobsd)."""
        return self.prog.removeprefix("xjobsd").strip()

    def _hint(self) -> str:
        return f"`{self.prog} --help` says what it takes"

    def _usage(self, message: str, hint: str | None = None) -> UsageInvalid:
        words = self.command_words()
        return UsageInvalid(f"{words}: {message}" if words else message, hint=hint or self._hint())

    def _action(self, name: str | None) -> argparse.Action | None:
        for action in self._actions:
            if name in ("/".join(action.option_strings), action.metavar, action.dest):
                return action
        return None

    def _refusal(self, name: str | None, message: str) -> XJobsError:
        action = self._action(name)
        if isinstance(action, argparse._SubParsersAction):
            given = _CHOICE.match(message)
            return self._usage(f"no command {given.group('value') if given else ''}".rstrip()
                               + _close_to(_unquoted(given.group("value")) if given else "", action.choices)
                               + f"; the commands are {', '.join(action.choices)}")
        option = _option_name(action, name)
        chosen = _CHOICE.match(message)
        if chosen and action is not None and action.choices is not None:
            choices = [str(c) for c in action.choices]
            return InvalidOption(option, f"must be one of {', '.join(choices)}, got {chosen.group('value')}"
                                 + _close_to(_unquoted(chosen.group("value")), choices), hint=self._hint())
        typed = _TYPED.match(message)
        if typed:
            what = _TYPE_WORDS.get(typed.group("type"), f"a {typed.group('type')}")
            return InvalidOption(option, f"must be {what}, got {typed.group('value')}", hint=self._hint())
        refusal = self._usage(f"{name}: {message}" if name else message)
        if action is not None:
            refusal.details["option_strings"] = tuple(action.option_strings)
        return refusal

    def _missing(self, names: list[str]) -> UsageInvalid:
        for name in names:
            action = self._action(name)
            if isinstance(action, argparse._SubParsersAction):
                kind = "a verb" if action.dest == "verb" else "a command"
                return self._usage(f"give {kind}: {', '.join(action.choices)}")
        return self._usage(f"missing {', '.join(names)}")

    def unknown_flags(self, extra: list[str]) -> UsageInvalid:
        flags = sorted({flag for action in self._actions for flag in action.option_strings})
        first = extra[0]
        what = "unknown flag" if first.startswith("-") and not _NEGATIVE.match(first) else "unexpected argument"
        return self._usage(f"{what} {first}" + _close_to(first.split("=", 1)[0], flags),
                           hint=f"`{self.prog} --help` lists its flags")


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` parsed, or the refusal raised (``UsageInvalid``, ``InvalidOption``)."""
    words = list(argv)
    for _ in range(len(words)):   # each pass joins one flag to its negative value
        try:
            args, extra = parser.parse_known_args(words)
        except UsageInvalid as refused:
            joined = _joined(words, refused)
            if joined is None:
                raise
            words = joined
            continue
        if extra:
            deepest = _deepest(parser, args)
            joined = _joined_optional(words, extra[0], deepest)
            if joined is None:
                raise deepest.unknown_flags(extra)
            words = joined
            continue
        return args
    return parser.parse_args(words)   # not reached: every pass joins one more word


def _joined(words: list[str], refused: UsageInvalid) -> list[str] | None:
    """``--delay -5s`` as ``--delay=-5s``, for the flag that found no value."""
    flags = refused.details.get("option_strings")
    if not isinstance(flags, tuple) or not str(refused).endswith("expected one argument"):
        return None
    for at, word in enumerate(words[:-1]):
        if word in flags and _NEGATIVE.match(words[at + 1]):
            return words[:at] + [f"{word}={words[at + 1]}"] + words[at + 2:]
    return None


def _joined_optional(words: list[str], first: str, parser: argparse.ArgumentParser) -> list[str] | None:
    """``--wait -5s`` as ``--wait=-5s``, for a flag whose value is optional (argparse leaves
    the negative value over, as an unknown flag)."""
    flags = {flag for action in parser._actions if action.nargs != 0 for flag in action.option_strings}
    for at, word in enumerate(words[:-1]):
        if word in flags and words[at + 1] == first and _NEGATIVE.match(first):
            return words[:at] + [f"{word}={first}"] + words[at + 2:]
    return None


def _deepest(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Parser:
    """The parser of the (sub)command the words chose: whose flags an unknown one is among."""
    current = parser
    while True:
        chosen = None
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(args, action.dest, None) or "")
        if chosen is None:
            return current if isinstance(current, Parser) else Parser(prog=current.prog)
        current = chosen


def _option_name(action: argparse.Action | None, name: str | None) -> str:
    if action is not None and action.option_strings:
        longest = max(action.option_strings, key=len)
        return longest.lstrip("-")
    return (action.dest if action is not None else name) or "argument"


def _unquoted(text: str) -> str:
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == "'" else text


def _close_to(given: str, known: object) -> str:
    names = [str(k) for k in known] if isinstance(known, (list, tuple, dict, set, frozenset)) else []
    close = difflib.get_close_matches(given, names, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""
