"""A reload's first step: the app as it is on disk now, imported and checked in a fresh process.

The supervisor's own import of the app is the one every child is forked from, so a reload
never tries new code there first. A fresh interpreter (``python -m xjobs.supervisor.validate
REQUEST``) imports the app's modules as configured now, checks the registry and the
configuration against each other as ``xjobsd run`` does at start, and answers on its stdout,
as one JSON object, either the app's image (``appcode.AppImage``) or a coded refusal:
``X_APP_INVALID`` when a module fails to import or the declarations are refused,
``X_INVALID_OPTION`` when the configuration asks for what the app cannot serve. Whatever the
app prints while it imports goes to stderr, the daemon's log, as it does at start.

The request is one JSON argument, nothing secret in it (the app's modules, ``sys.path``, the
configured queues, ``--strict``): the process needs no database. ``Validation`` runs it for
the supervisor: started on the loop thread, waited for on a thread of its own under a
deadline (past it the process is killed and the reload refused), and the loop woken when
the answer is in. The process dies with the supervisor (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import traceback
from typing import Any, Callable

import orjson

from ..errors import AppInvalid, XJobsError
from .appcode import AppImage

DEADLINE_S = 30.0   # importing an app takes seconds; a minute-long import is a fault to report


class Validation:
    """One fresh process validating the app; ``result`` is an ``AppImage`` or the refusal,
    None until it is in."""

    def __init__(self, request: dict[str, Any], deadline_s: float, wake: Callable[[], None]) -> None:
        self.deadline_s = deadline_s
        self.result: AppImage | XJobsError | None = None
        self.traceback: str | None = None      # the refusal's, for the log at debug level
        self._wake = wake
        # no fork_lock here: the new process runs no Python before exec, so it cannot finalise
        # a database connection it inherited from the probe. A child forked while it runs
        # inherits the read end of its stdout and never reads it: the answer's end of the
        # pipe, and so its EOF, belong to this process alone
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "xjobs.supervisor.validate",
             orjson.dumps({**request, "parent": os.getpid()}).decode()],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, close_fds=True)
        self._thread = threading.Thread(target=self._wait, name="xjobsd-validate", daemon=True)
        self._thread.start()

    @property
    def done(self) -> bool:
        return self.result is not None

    def cancel(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()

    def _wait(self) -> None:
        try:
            try:
                out, _ = self.proc.communicate(timeout=self.deadline_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate()
                self.result = AppInvalid(f"importing the app took longer than {self.deadline_s:g}s; "
                                         "nothing was replaced")
                return
            self.result = self._read(out, self.proc.returncode)
        except Exception as exc:   # never leave the reload waiting on a thread that died
            self.result = AppInvalid(f"the validation failed: {type(exc).__name__}: {exc}")
        finally:
            self._wake()

    def _read(self, out: bytes, code: int) -> AppImage | XJobsError:
        try:
            answer = orjson.loads(out)
            if answer.get("ok"):
                return AppImage.from_json(answer["image"])
            self.traceback = answer.get("traceback")
            return XJobsError(str(answer["error"]), code=str(answer["code"]))
        except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError):
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            return AppInvalid(f"the process importing the app {how} without an answer (see the "
                              "log for what it printed); nothing was replaced")


# -- the fresh process ------------------------------------------------------------------------------

def _check(request: dict[str, Any]) -> AppImage:
    from ..config import QueueSpec, Settings
    from ..registry import REGISTRY
    from .appcode import import_modules, own_modules
    from .roles import refuse_unserved, role_specs
    sys.path[:] = request["path"]
    import_modules(request["apps"])
    settings = Settings(queues={name: QueueSpec(*shape) for name, shape in request["queues"].items()})
    role_specs(settings, REGISTRY)           # what start checks: jobs registered, queues served
    if request["strict"]:
        refuse_unserved(settings, REGISTRY)
    return AppImage.of(REGISTRY, own_modules(request["apps"], REGISTRY))


def main(argv: list[str]) -> int:
    from .child import set_parent_death_signal
    request = orjson.loads(argv[1])
    set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != request["parent"]:   # the supervisor died before that was armed
        return 1
    answer_to = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)   # the app's own output, Python's or a C library's, goes to the log
    try:
        answer: dict[str, Any] = {"ok": True, "image": _check(request).as_json()}
    except XJobsError as exc:
        answer = {"ok": False, "code": exc.code, "error": exc.args[0],
                  "traceback": exc.details.get("traceback")}
    except Exception as exc:   # declared wrong in a way no check names: still the app's fault
        answer = {"ok": False, "code": AppInvalid.code, "error": f"{type(exc).__name__}: {exc}",
                  "traceback": "".join(traceback.format_exception(exc))}
    answer_to.write(orjson.dumps(answer, default=str))
    answer_to.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
