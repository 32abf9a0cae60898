"""A reload's parts in this process: the app imported again, the fresh validation, fingerprints.

The app is a real package the test writes under ``tmp_path`` and rewrites, imported into the
global registry, which each test empties first and gives back after; the fresh validation is
the real subprocess. ``test_daemon_reload`` runs the same through a daemon.
"""

from __future__ import annotations

import importlib.util
import os
import py_compile
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.supervisor.harness import SETTINGS, all_ready, rows
from tests.supervisor.harness import spec as fake_spec
from xjobs.config import Settings
from xjobs.errors import AppInvalid, InvalidOption, XJobsError
from xjobs.registry import REGISTRY, Registry
from xjobs.supervisor.appcode import AppCode, AppImage, import_modules, own_modules
from xjobs.supervisor.reshape import fingerprint
from xjobs.supervisor.roles import RoleKind
from xjobs.workers.queue_worker import QueueWorker
from xjobs.supervisor.slots import RoleSpec
from xjobs.supervisor.validate import Validation
from xjobs.workers.role import RolePolicy

JOBS = '''\
import json

import psycopg

from xjobs import job

from {package}.helpers import word

VERSION = {version!r}
{extra}

@job(queue="q", idempotency_key=lambda i: "k", tenant="none")
def versioned(ctx, input):
    return VERSION + "-" + word()
'''


class App:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.package = f"rlunit_{uuid.uuid4().hex[:8]}"
        self.jobs = f"{self.package}.jobs"
        (root / self.package).mkdir()
        (root / self.package / "__init__.py").write_text("")

    def write(self, version: str, word: str = "a", extra: str = "", keep_mtime: bool = True) -> None:
        """Rewrite the app; with ``keep_mtime`` its files keep their size-and-time key (a
        version and a word of the same length) as a bytecode cache sees it."""
        for name, text in (("jobs.py", JOBS.format(package=self.package, version=version, extra=extra)),
                           ("helpers.py", f"def word():\n    return {word!r}\n")):
            path = self.root / self.package / name
            before = path.stat() if path.exists() else None
            path.write_text(text)
            if before is not None and keep_mtime:
                os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))

    def imported(self) -> AppCode:
        import_modules([self.jobs])
        for name in ("jobs", "helpers"):   # a cache exists, as after any first import
            path = str(self.root / self.package / f"{name}.py")
            py_compile.compile(path, cfile=importlib.util.cache_from_source(path))
        return AppCode([self.jobs], REGISTRY)

    def says(self) -> str:
        return REGISTRY.get("versioned").fn(None, None)  # type: ignore[arg-type]


@pytest.fixture
def app(tmp_path: Path):
    saved = REGISTRY.snapshot()
    REGISTRY.restore(Registry())   # only this app's declarations: nothing else is imported again
    made = App(tmp_path)
    sys.path.insert(0, str(tmp_path))
    try:
        yield made
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == made.package or n.startswith(made.package + ".")]:
            del sys.modules[name]
        REGISTRY.restore(saved)


def validate(apps: list[str], queues: dict | None = None, deadline_s: float = 30.0):
    woke = threading.Event()
    validation = Validation({"apps": apps, "path": list(sys.path), "queues": queues or {}, "strict": False},
                            deadline_s, woke.set)
    assert woke.wait(deadline_s + 30), "the validation never answered"
    return validation


def test_a_module_rewritten_at_the_same_size_and_time_is_imported_as_its_new_code(app):
    app.write("one")
    code = app.imported()
    assert app.says() == "one-a"
    app.write("two")
    code.forget_stale_bytecode()
    image = validate([app.jobs]).result
    assert isinstance(image, AppImage) and image != code.image
    assert code.image.changes(image) == [f"app code changed: {app.jobs}"]
    with code.loading([app.jobs], image):
        pass
    assert app.says() == "two-a" and code.image == image


def test_a_change_in_a_module_no_job_is_declared_in_is_new_code_too(app):
    app.write("one", word="a")
    code = app.imported()
    app.write("one", word="b")
    code.forget_stale_bytecode()
    image = validate([app.jobs]).result
    assert code.image.changes(image) == [f"app code changed: {app.package}.helpers"]
    with code.loading([app.jobs], image):
        pass
    assert app.says() == "one-b"


def test_an_import_that_fails_half_way_leaves_the_modules_and_the_registry_as_they_were(app):
    app.write("one")
    code = app.imported()
    handle, module, image = REGISTRY.get("versioned"), sys.modules[app.jobs], code.image
    # declares one more job, then fails: a registry kept like that would be half old, half new
    app.write("two", keep_mtime=False, extra=(
        '@job(queue="q", idempotency_key=lambda i: "k", tenant="none")\n'
        'def extra(ctx, input):\n    pass\n\nraise RuntimeError("boom at import")\n'))
    with pytest.raises(AppInvalid, match="boom at import"):
        with code.loading([app.jobs], code.image):
            pass
    assert [h.name for h in REGISTRY.jobs()] == ["versioned"] and REGISTRY.get("versioned") is handle
    assert sys.modules[app.jobs] is module and code.image == image and app.says() == "one-a"


def test_a_failure_after_the_import_undoes_it(app):
    app.write("one")
    code = app.imported()
    app.write("two", keep_mtime=False)
    image = validate([app.jobs]).result
    with pytest.raises(InvalidOption):
        with code.loading([app.jobs], image):
            raise InvalidOption("queue", "what building the groups might refuse")
    assert app.says() == "one-a" and code.image != image


def test_an_app_that_changed_again_since_its_validation_is_not_kept(app):
    app.write("one")
    code = app.imported()
    app.write("two", keep_mtime=False)
    image = validate([app.jobs]).result
    app.write("three", keep_mtime=False)
    with pytest.raises(AppInvalid, match="changed on disk again"):
        with code.loading([app.jobs], image):
            pass
    assert app.says() == "one-a"


def test_the_own_modules_are_the_app_s_never_xjobs_installed_or_standard_ones(app):
    app.write("one")
    app.imported()
    own = own_modules([app.jobs], REGISTRY)
    assert set(own) == {app.package, app.jobs, f"{app.package}.helpers"}
    assert "psycopg" in sys.modules and "json" in sys.modules and "xjobs.registry" in sys.modules


def test_a_fresh_validation_answers_the_image_or_a_coded_refusal(app):
    app.write("one", extra='print("the app talks at import")')
    assert isinstance(validate([app.jobs]).result, AppImage)   # its output is not the answer
    refused = validate([app.jobs], queues={"nope": [1, 1]}).result
    assert isinstance(refused, XJobsError) and refused.code == "X_INVALID_OPTION" and "nope" in str(refused)
    app.write("one", extra="def broken(:\n", keep_mtime=False)
    broken = validate([app.jobs])
    assert isinstance(broken.result, XJobsError) and broken.result.code == "X_APP_INVALID"
    assert "SyntaxError" in str(broken.result) and app.jobs in str(broken.result)
    assert "Traceback" in (broken.traceback or "")


def test_a_fresh_validation_past_its_deadline_is_refused_and_its_process_killed(app):
    app.write("one", extra="import time\ntime.sleep(60)")
    slow = validate([app.jobs], deadline_s=1.0)
    assert isinstance(slow.result, AppInvalid) and "longer than 1s" in str(slow.result)
    assert slow.proc.poll() is not None


def _spec(role: str, queue: str | None, processes: int = 1, concurrency: int = 4, *,
          runs_app: bool = True) -> RoleSpec:
    policy = QueueWorker.policy if queue is not None else RolePolicy()
    return RoleSpec(role, queue, processes, concurrency, lambda identity: None, policy,  # type: ignore[arg-type, return-value]
                    runs_app=runs_app)


def test_a_group_s_fingerprint_is_what_its_children_are_made_of():
    image = AppImage({"app.jobs": "a1", "app.util": "u1"}, {"send": ("q", "d1"), "other": ("r", "o1")}, {})
    code = AppImage({**image.modules, "app.util": "u2"}, image.jobs, image.others)
    declared = AppImage(image.modules, {**image.jobs, "other": ("r", "o2")}, image.others)
    settings = Settings()
    worker, scheduler = _spec("worker", "q"), _spec("scheduler", None)
    relay = _spec("outbox-relay", None, runs_app=False)

    def fp(spec, s=settings, i=image):
        return fingerprint(spec, s, i)
    # any module of the app: every group running app code; never one that runs none
    assert fp(worker, i=code) != fp(worker) and fp(scheduler, i=code) != fp(scheduler)
    assert fp(relay, i=code) == fp(relay)
    # another queue's declaration: not this queue's workers, but a singleton running app code
    assert fp(worker, i=declared) == fp(worker) and fp(scheduler, i=declared) != fp(scheduler)
    # a knob every child reads changes every group; one read by the supervisor alone none
    polled, metrics = settings.with_overrides(poll_ms=500), settings.with_overrides(metrics="127.0.0.1:1")
    assert all(fp(s, polled) != fp(s) and fp(s, metrics) == fp(s) for s in (worker, scheduler, relay))
    # more processes are more slots beside the same children; more slots per process are not
    assert fp(_spec("worker", "q", processes=3)) == fp(worker)
    assert fp(_spec("worker", "q", concurrency=8)) != fp(worker)


def test_every_slot_keeps_a_claiming_child_through_a_reload_that_replaces_it(make_arbiter):
    arbiter = make_arbiter([fake_spec("a", 2, "work")],
                           configure=lambda: (SETTINGS, [fake_spec("a", 2, "work", concurrency=8)]))
    end = time.monotonic() + 10
    while not all_ready(arbiter):
        arbiter.step(timeout=0.02)
        assert time.monotonic() < end, "the children never got ready"
    old = {c["pid"] for c in rows(arbiter)}
    assert arbiter.reload().answer["groups"] == ["worker a"]
    passes = 0
    while not (arbiter.reshaper.state()["state"] == "idle" and not arbiter.processes.retired):
        arbiter.step(timeout=0.01)
        passes += 1
        for slot in arbiter.processes.slots:   # checked after every pass of the loop
            assert any(c.state == "ready" and c.retiring is None for c in slot.children()), (
                f"{slot.label} has no claiming child: {[(c.pid, c.state, c.retiring) for c in slot.children()]}")
        assert time.monotonic() < end + 10, "the reload never completed"
    assert passes > 1 and not old & {c["pid"] for c in rows(arbiter)}
