"""The app's code as the supervisor holds it, what a reload compares, and how it imports again.

The supervisor imports the app once at start and forks every child from that import, so a
child runs whatever code the supervisor holds. A reload that brings new code therefore
imports the app again HERE, after a fresh process has shown it imports (``validate.py``) and
before the successors are forked (``reload.py``):

* the app's OWN modules are dropped from ``sys.modules`` and imported again: every module
  under one of the app's roots (where each ``--app`` module's top-level package was found),
  and every module that defines one of its declared jobs or scans, wherever it lives. Never
  ``xjobs``, the standard library, an installed distribution or a compiled extension: those
  did not change with the app, and a second import of an extension is not safe;
* the registry is emptied and filled again by that import, in place (``@job`` writes into
  the one registry every module holds). Should anything fail, the modules and the registry
  are put back as they were: a registry is never half old and half new, and the running
  configuration stands;
* a module whose source changed loses its cached bytecode first. The cache is keyed on the
  source's modification time, in whole seconds, and its size: a file rewritten within the
  same second at the same size would otherwise import as its old code.

An ``AppImage`` is what a reload compares: the digest of each own module's source and of
each declaration. The fresh process answers the image of the app as it is on disk; the
supervisor imports again only when that differs from the image it runs, and keeps its own
import only if it comes to the same image (the files did not change again meanwhile).
Modules are compared, not just the declarations: a body runs whatever it calls, in any
module of the app, so a group that runs app code is replaced when any of it changed.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import logging
import os
import site
import sys
import sysconfig
import traceback
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping

import orjson

from ..errors import AppInvalid
from ..registry import Registry

log = logging.getLogger("xjobs.supervisor")

_SHOWN = 10   # module names a change lists before "and N more"


def import_modules(modules: Iterable[str]) -> None:
    """Import the app's modules, so their declarations register; ``AppInvalid`` names the
    first that fails, in one line (its traceback in ``details`` and at debug level)."""
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:   # SyntaxError, NameError, a failing import-time call...
            trace = "".join(traceback.format_exception(exc))
            log.debug("importing %s failed:\n%s", module, trace)
            raise AppInvalid(f"cannot import {module!r}: {type(exc).__name__}: {exc}", traceback=trace) from None


# -- which modules are the app's own ----------------------------------------------------------------

def _installed_dirs() -> tuple[str, ...]:
    """Where the standard library and installed distributions live (a virtualenv's own
    site-packages included, even one inside the app's directory)."""
    paths = sysconfig.get_paths()
    dirs = {paths.get(key, "") for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    try:
        dirs.update(site.getsitepackages())
    except AttributeError:   # some embedded interpreters have no site.getsitepackages
        pass
    dirs.add(site.getusersitepackages())
    return tuple(sorted(os.path.realpath(d) for d in dirs if d))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _source(module: Any) -> str | None:
    """The real path of a module's Python source, or None (built-in, frozen, compiled, namespace)."""
    file = getattr(module, "__file__", None)
    if not isinstance(file, str) or not file.endswith(".py"):
        return None
    return os.path.realpath(file)


def _source_digest(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()[:16]
    except OSError:
        return "unreadable"


def _inside(path: str, dirs: Iterable[str]) -> bool:
    return any(_under(path, d) for d in dirs)


def _roots(apps: Iterable[str], installed: tuple[str, ...]) -> list[str]:
    """Each app's root: the directory its top-level package was found in, or, for an app
    installed as a distribution, that package alone."""
    roots = []
    for app in apps:
        top = sys.modules.get(app.split(".")[0])
        path = _source(top)
        if path is None:
            continue
        # a package's source is its __init__.py: the package is its directory
        found = os.path.dirname(path) if os.path.basename(path) == "__init__.py" else path
        entry = os.path.dirname(found)
        roots.append(found if _inside(entry, installed) else entry)
    return roots


def _declaring_modules(registry: Registry) -> set[str]:
    fns = [handle.fn for handle in registry.jobs()] + [scan.fn for scan in registry.scans()]
    return {name for fn in fns if isinstance(name := getattr(fn, "__module__", None), str)}


def _xjobs_or_main(name: str) -> bool:
    return name in ("xjobs", "__main__") or name.startswith("xjobs.")


def own_modules(apps: Iterable[str], registry: Registry) -> dict[str, str]:
    """The app's own modules now in ``sys.modules``: name -> source path (see the module doc).
    A module under a root counts unless it is installed (a virtualenv kept in the app's
    directory), except in the root of an app that is itself installed."""
    installed = _installed_dirs()
    roots = [(root, _inside(root, installed)) for root in _roots(apps, installed)]
    declaring = _declaring_modules(registry)
    own = {}
    for name, module in list(sys.modules.items()):
        path = _source(module)
        if path is None or _xjobs_or_main(name):
            continue
        if name in declaring or any(_under(path, root) and (root_installed or not _inside(path, installed))
                                    for root, root_installed in roots):
            own[name] = path
    return own


# -- the image a reload compares ---------------------------------------------------------------------

def _digest(value: Any) -> str:
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=repr)).hexdigest()[:16]


def _where(fn: Any) -> str:
    code = getattr(fn, "__code__", None)
    line = code.co_firstlineno if code is not None else 0
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}:{line}"


def _declaration(handle: Any) -> str:
    """What a job's declaration says, beyond its code (which the modules' digests cover)."""
    retry = handle.retry
    return _digest({
        "queue": handle.queue, "fn": _where(handle.fn), "async": handle.is_async,
        "retry": {slot: getattr(retry, slot, None) for slot in type(retry).__slots__},
        "timeout_ms": handle.timeout_ms, "concurrency": handle.concurrency, "priority": handle.priority,
        "dedupe_window_ms": handle.dedupe_window_ms, "step_timeout_ms": handle.step_timeout_ms,
        "event_poll_ms": handle.event_poll_ms,
        "keyed": None if handle.keyed is None else handle.keyed.describe(),
        "retry_on": [_where(t) for t in handle.retry_on], "terminal_on": [_where(t) for t in handle.terminal_on]})


@dataclass(frozen=True)
class AppImage:
    """The app as a reload compares it: JSON both ways (the fresh process answers one)."""
    modules: Mapping[str, str]        # own module -> digest of its source
    jobs: Mapping[str, tuple[str, str]]   # job name -> (queue, digest of its declaration)
    others: Mapping[str, str]         # "task NAME" / "scan NAME" -> digest of its declaration

    @classmethod
    def of(cls, registry: Registry, modules: Mapping[str, str]) -> "AppImage":
        """The image of ``registry`` as imported now, over ``modules`` (name -> source path)."""
        sources = {name: _source_digest(path) for name, path in modules.items()}
        others = {f"task {t.name}": _digest(repr(t.spec)) for t in registry.tasks()}
        others.update({f"scan {s.name}": _digest(repr(s.spec)) for s in registry.scans()})
        return cls(sources, {h.name: (h.queue, _declaration(h)) for h in registry.jobs()}, others)

    def as_json(self) -> dict[str, Any]:
        return {"modules": dict(self.modules), "jobs": {k: list(v) for k, v in self.jobs.items()},
                "others": dict(self.others)}

    @classmethod
    def from_json(cls, data: Any) -> "AppImage":
        if not (isinstance(data, dict) and all(isinstance(data.get(k), dict) for k in ("modules", "jobs", "others"))):
            raise ValueError(f"not an app image: {data!r:.200}")
        return cls({str(k): str(v) for k, v in data["modules"].items()},
                   {str(k): (str(v[0]), str(v[1])) for k, v in data["jobs"].items()},
                   {str(k): str(v) for k, v in data["others"].items()})

    def digest(self, queue: str | None) -> str:
        """What a group that runs app code depends on: every own module and, for a group of
        one queue, the declarations of that queue's jobs; for a singleton, every declaration."""
        jobs = {name: job for name, job in self.jobs.items() if queue is None or job[0] == queue}
        return _digest({"modules": self.modules, "jobs": jobs,
                        "others": self.others if queue is None else {}})

    def changes(self, new: "AppImage") -> list[str]:
        """What changed from this image to ``new``, in words."""
        said = []
        modules = sorted(name for name in set(self.modules) | set(new.modules)
                         if self.modules.get(name) != new.modules.get(name))
        if modules:
            more = f" and {len(modules) - _SHOWN} more" if len(modules) > _SHOWN else ""
            said.append(f"app code changed: {', '.join(modules[:_SHOWN])}{more}")
        for kind, old_table, new_table in (("job", self.jobs, new.jobs), ("", self.others, new.others)):
            for name in sorted(set(old_table) | set(new_table)):
                label = f"{kind} {name}".strip()
                if name not in old_table:
                    said.append(f"{label} declared")
                elif name not in new_table:
                    said.append(f"{label} no longer declared")
                elif old_table[name] != new_table[name]:
                    said.append(f"{label}: declaration changed")
        return said


# -- the app this supervisor runs ----------------------------------------------------------------------

class AppCode:
    """The app this supervisor imported (``apps``, into ``registry``) and its image; owned by
    the reload (``reload.py``), on the loop thread. ``job_names`` is read by the probe's
    thread: it is replaced whole, never changed in place."""

    def __init__(self, apps: Iterable[str], registry: Registry) -> None:
        self.apps = tuple(apps)
        self.registry = registry
        self._files = own_modules(self.apps, registry)
        self.image = AppImage.of(registry, self._files)
        self.job_names: tuple[str, ...] = tuple(h.name for h in registry.jobs())

    def forget_stale_bytecode(self) -> None:
        """Before a validation: drop the cached bytecode of each own module whose source no
        longer matches the image (see the module doc); a cache that cannot be removed is
        left (the directory is read-only: nothing wrote a stale one there either)."""
        for name, path in self._files.items():
            if _source_digest(path) != self.image.modules.get(name):
                try:
                    os.unlink(importlib.util.cache_from_source(path))
                except (OSError, NotImplementedError, ValueError):
                    pass

    def queues(self) -> dict[str, list[str]]:
        """Every queue a declared job uses, with the names of its jobs."""
        out: dict[str, list[str]] = {}
        for handle in self.registry.jobs():
            out.setdefault(handle.queue, []).append(handle.name)
        return out

    @contextlib.contextmanager
    def loading(self, apps: Iterable[str], expected: AppImage) -> Iterator[None]:
        """Import the app again, in place, and keep it only if it comes to ``expected`` and
        the body of the ``with`` (building what runs it) succeeds; otherwise the modules and
        the registry are as they were, and the error (``AppInvalid`` for the import) raised."""
        apps = tuple(apps)
        self.forget_stale_bytecode()
        dropped = {name: sys.modules[name] for name in own_modules(self.apps, self.registry)
                   if name in sys.modules}
        saved = self.registry.snapshot()
        for name in dropped:
            del sys.modules[name]
        self.registry.restore(Registry())
        importlib.invalidate_caches()   # a module file new since the last import is found
        present = set(sys.modules)
        try:
            import_modules(apps)
            files = own_modules(apps, self.registry)
            image = AppImage.of(self.registry, files)
            if image != expected:
                raise AppInvalid("the app changed on disk again while the reload validated it: "
                                 + "; ".join(expected.changes(image)) + "; nothing was replaced, reload again")
            yield
        except BaseException:
            installed = _installed_dirs()
            for name in set(sys.modules) - present:   # what the failed import left behind
                path = _source(sys.modules.get(name))
                if name in dropped or (path is not None and not _xjobs_or_main(name)
                                       and not _inside(path, installed)):
                    sys.modules.pop(name, None)
            sys.modules.update(dropped)
            self.registry.restore(saved)
            raise
        self.apps, self._files, self.image = apps, files, image
        self.job_names = tuple(h.name for h in self.registry.jobs())
