"""The rooms of the package and which may import which (docs/ARCHITECTURE.md), read from
every ``import`` in ``xjobs/`` (those inside functions and under ``TYPE_CHECKING`` too)."""

from __future__ import annotations

import ast
import re
from fnmatch import fnmatch
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "xjobs"

# room -> the rooms its modules may import (besides their own)
MAY_IMPORT = {
    "foundation": set(),                       # errors, options, clock, payload, logs
    "drivers": {"foundation"},                 # the JobDriver seam and its two drivers
    "api": {"foundation", "drivers"},          # the public API: declarations, enqueue, ctx, settings
    "workers": {"foundation", "drivers", "api"},                  # the roles a child runs
    # backfill, purge, export_rows, webhook: jobs declared over the api, nothing a worker knows
    "factories": {"foundation", "drivers", "api"},
    # framework integrations (Django's Tasks backend): adapters over the api, nothing a worker knows
    "contrib": {"foundation", "drivers", "api"},
    "hosts": {"foundation", "drivers", "api", "workers"},         # tick.py, testing.py, host.py
    "supervisor": {"foundation", "drivers", "api", "workers"},    # the parent of xjobsd
    "operator": {"foundation", "drivers", "api", "workers", "factories"},   # both surfaces share
    "ui": {"foundation", "drivers", "api", "workers", "factories", "operator"},   # the dashboard
    "mcp": {"foundation", "drivers", "api", "workers", "factories", "operator"},  # tools for assistants
    # the composition root: `xjobsd run` builds the supervisor, `xjobsd tick` a host
    "cli": {"foundation", "drivers", "api", "workers", "factories", "contrib", "hosts", "supervisor",
            "operator", "ui", "mcp"},
}
FOUNDATION = {"errors", "webhook_errors", "options", "clock", "payload", "logs"}
HOSTS = {"tick", "testing", "host"}
OPERATOR = {"admin", "control_client", "formatting", "throughput"}
PACKAGES = {"drivers", "workers", "factories", "contrib", "supervisor", "cli", "ui", "mcp"}


def room(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "api"
    name = parts[1]
    if name in PACKAGES:
        return name
    if name in FOUNDATION:
        return "foundation"
    if name in HOSTS:
        return "hosts"
    if name in OPERATOR:
        return "operator"
    return "api"


def module_of(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every ``xjobs`` module ``path`` imports, as absolute names."""
    module = module_of(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "xjobs"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "xjobs":
                continue
            for alias in node.names:   # ``from . import admin`` imports the module admin
                candidate = f"{target}.{alias.name}"
                sub = PACKAGE.parent / Path(*candidate.split("."))
                found.add(candidate if sub.with_suffix(".py").exists() or sub.is_dir() else target)
    return found


def edges() -> list[tuple[str, str]]:
    return [(module_of(path), target) for path in sorted(PACKAGE.rglob("*.py"))
            for target in sorted(imports(path))]


# the package's front door (``xjobs/__init__.py``) re-exports the factories: ``xjobs.webhook``
FRONT_DOOR_MAY_IMPORT = {"factories"}


def test_every_room_imports_only_the_rooms_beneath_it():
    broken = [f"{source} ({room(source)}) imports {target} ({room(target)})"
              for source, target in edges()
              if room(target) != room(source) and room(target) not in MAY_IMPORT[room(source)]
              and not (source == "xjobs" and room(target) in FRONT_DOOR_MAY_IMPORT)]
    assert broken == []


def test_the_dashboard_reaches_the_daemon_only_through_the_control_client():
    for surface in ("ui", "mcp"):     # and so do the tools for assistants
        reached = {target for source, target in edges() if room(source) == surface}
        assert not {t for t in reached if room(t) in {"supervisor", "cli", "ui", "mcp"} - {surface}}, surface
        assert "xjobs.control_client" in reached, surface


def test_outside_the_supervisor_only_the_command_line_imports_it():
    assert {room(source) for source, target in edges()
            if room(target) == "supervisor" and room(source) != "supervisor"} == {"cli"}


def test_every_package_says_what_its_room_is():
    for package in PACKAGES:
        init = PACKAGE / package / "__init__.py"
        assert init.exists() and ast.get_docstring(ast.parse(init.read_text())), package
    for package in ("supervisor", "workers"):   # and these two name each of their modules
        doc = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text())) or ""
        named = set(re.findall(r"``(\w+)``", doc))
        assert {p.stem for p in (PACKAGE / package).glob("*.py")} - named == {"__init__"}, package


def test_no_module_compares_a_role_name_outside_the_role_itself():
    """The supervisor hosts any role through its policy and the surfaces show its record: a
    role's name is compared only by the module declaring it (and the list of roles)."""
    names = {"worker": "workers/queue_worker.py", "scheduler": "workers/scheduler.py",
             "outbox-relay": "workers/outbox_relay.py", "ui": "ui/listen.py"}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                for operand in (node.left, *node.comparators):
                    if (isinstance(operand, ast.Constant) and operand.value in names
                            and where not in (names[operand.value], "supervisor/roles.py")):
                        found.append(f"{where}:{node.lineno} compares {operand.value!r}")
    assert found == []


def test_the_map_places_every_module_in_its_room():
    """``docs/ARCHITECTURE.md`` has a section per room naming each of its modules (a driver's
    ``pg_*.py`` by the pattern)."""
    text = (PACKAGE.parent / "docs" / "ARCHITECTURE.md").read_text()
    sections = {chunk.split("\n", 1)[0].split()[0].rstrip("/:"): chunk
                for chunk in text.split("\n## ")[1:]}
    assert set(sections) == set(MAY_IMPORT)
    unplaced = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "__init__.py" and path.parent != PACKAGE:
            continue
        section = sections[room(module_of(path))]
        names = {name for name in re.findall(r"`([^`]+)`", section)}
        if not any(fnmatch(path.name, name) for name in names):
            unplaced.append(str(path.relative_to(PACKAGE)))
    assert unplaced == []
