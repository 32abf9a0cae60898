"""The settings as declared in ``xjobs/config.py`` are the ones read, refused, offered as flags
and documented: the table of docs/guides/configuration.md is made from the declarations, every
``XJOBS_*`` variable and flag that the README, the pages of docs/ and the systemd files name
exists, and every setting is read from its variable and its flag and refused there by name."""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

import pytest

from xjobs.cli import build_parser
from xjobs.cli import setting_flags
from xjobs.config import SETTINGS, Setting, Settings, load_settings
from xjobs.errors import InvalidOption
from xjobs.setting_kinds import Count, Duration, Maybe

ROOT = Path(__file__).resolve().parents[2]
SETTINGS_PAGE = ROOT / "docs" / "guides" / "configuration.md"
_BEGIN = "<!-- settings table: made from the declarations in xjobs/config.py (tests/unit/test_settings_table.py) -->"
_END = "<!-- end of the settings table -->"
# read outside ``Settings``: a secret kept out of files and flags, logging (set before any
# setting is read), and the test suite's own database
_OTHER_VARIABLES = {"XJOBS_UI_TOKEN", "XJOBS_LOG_LEVEL", "XJOBS_LOG_FORMAT", "XJOBS_TEST_DSN"}
# lines whose flags are another program's
_OTHER_PROGRAMS = ("systemctl ", "bench/", "pip ", "pytest ", "useradd ")
_DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "systemd").iterdir())]


def reference() -> str:
    """The table of settings the configuration page shows, one row per declaration (the key
    unquoted: a quoted first cell is how the logs page's table names an event)."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|")
    rows = ["| setting | environment | flag (`xjobsd run`) | default | |", "|---|---|---|---|---|"]
    for s in SETTINGS:
        default = s.kind.show(s.default)
        rows.append(f"| {s.key} | `{s.env}` | {f'`{s.flag}`' if s.flag else ''} | "
                    f"{cell(default) if default else '-'} | {cell(s.help)} |")
    return "\n".join(rows)


def test_the_settings_table_is_the_declarations():
    text = SETTINGS_PAGE.read_text()
    assert _BEGIN in text and _END in text, f"{SETTINGS_PAGE.relative_to(ROOT)} lost its settings table markers"
    table = text.split(_BEGIN, 1)[1].split(_END, 1)[0].strip()
    assert table == reference(), "paste tests/unit/test_settings_table.py's reference() between the markers"


def _every_flag(parser: argparse.ArgumentParser) -> set[str]:
    flags = {option for action in parser._actions for option in action.option_strings}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                flags |= _every_flag(sub)
    return flags


@pytest.mark.parametrize("document", _DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_variable_and_flag_the_docs_name_exists(document):
    text = document.read_text()
    declared = {s.env for s in SETTINGS}
    named = set(re.findall(r"\bXJOBS_[A-Z][A-Z_]*[A-Z]\b", text))
    assert named - declared - _OTHER_VARIABLES == set()
    ours = [line for line in text.splitlines() if not any(other in line for other in _OTHER_PROGRAMS)]
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*[a-z]\b", "\n".join(ours)))
    assert flags - _every_flag(build_parser()) == set()


def test_every_setting_is_declared_whole_and_defaults_to_what_settings_holds(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # no xjobs.toml or pyproject.toml to read
    assert load_settings(env={}) == Settings()
    for s in SETTINGS:
        assert s.env == f"XJOBS_{s.key.upper()}" or s.key == "apps", s
        assert s.help and not s.help.endswith("."), s
        assert getattr(Settings(), s.field) == s.check(s.default), s
    assert len({s.env for s in SETTINGS}) == len({s.key for s in SETTINGS}) == len(SETTINGS)


def _numeric(s: Setting) -> bool:
    kind = s.kind.kind if isinstance(s.kind, Maybe) else s.kind
    return isinstance(kind, (Duration, Count))


_NUMERIC = [s for s in SETTINGS if _numeric(s)]


@pytest.mark.parametrize("declared", _NUMERIC, ids=lambda s: s.key)
@pytest.mark.parametrize("bad", ["nan", "inf", "-1", "junk"])
def test_a_bad_number_is_refused_by_name_from_the_environment_a_file_and_a_flag(tmp_path, declared, bad):
    with pytest.raises(InvalidOption) as err:
        load_settings(env={declared.env: bad})
    assert err.value.option == declared.key and err.value.code == "X_INVALID_OPTION"
    config = tmp_path / "xjobs.toml"
    config.write_text(f'[xjobs]\n{declared.key} = "{bad}"\n')
    with pytest.raises(InvalidOption) as err:
        load_settings(str(config), env={})
    assert err.value.option == declared.key
    with pytest.raises(InvalidOption) as err:
        Settings(**{declared.field: float(bad) if bad != "junk" else bad})  # type: ignore[arg-type]
    assert err.value.option == declared.key
    if declared.flag is not None:
        args = build_parser().parse_args(["run", f"{declared.flag}={bad}"])
        with pytest.raises(InvalidOption) as err:
            load_settings(env={}, **setting_flags.given(args))
        assert err.value.option == declared.key


@pytest.mark.parametrize("declared", [s for s in SETTINGS if s.flag is not None], ids=lambda s: s.key)
def test_every_flag_sets_its_setting(tmp_path, monkeypatch, declared):
    monkeypatch.chdir(tmp_path)
    value = {"apps": "myapp.jobs", "queues": "emails=2x16", "database_url": "postgresql://h/db",
             "schema": "other", "metrics": "off", "control": "c.sock", "ui": "127.0.0.1:8080",
             "ui_trust_header": "X-Forwarded-User", "recycle_after_jobs": "20",
             "recycle_above_rss": "512"}.get(declared.key, "7s")
    argv = ["run", declared.flag] if declared.kind.switch else ["run", declared.flag, value]
    settings = load_settings(env={}, **setting_flags.given(build_parser().parse_args(argv)))
    got = getattr(settings, declared.field)
    assert got != declared.check(declared.default)
    if declared.kind.switch:
        assert got is (not declared.flag.startswith("--no-"))
    elif isinstance(declared.kind, Duration):
        assert math.isclose(got, 7000.0)


def test_a_flag_given_by_another_command_is_not_a_setting():
    """``xjobsd ui --control`` names the daemon whose children it shows; it is not the
    ``control`` setting (the socket a daemon serves)."""
    args = build_parser().parse_args(["ui", "--control", "elsewhere.sock"])
    assert setting_flags.given(args) == {}
    args = build_parser().parse_args(["ui", "--actions", "--trust-header", "X-Forwarded-User"])
    assert setting_flags.given(args) == {"ui_actions": True, "ui_trust_header": "X-Forwarded-User"}
    args = build_parser().parse_args(["tick", "--queue", "emails", "--dsn", "postgresql://h/db", "--no-migrate"])
    assert setting_flags.given(args) == {"database_url": "postgresql://h/db", "migrate": False}
