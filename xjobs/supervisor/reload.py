"""A reload, from the request to the plan: read again, validate fresh, import again, replace.

Owned by the arbiter, which routes SIGHUP and the ``reload`` command here and calls ``poll``
once a loop pass::

    idle ──request──> validating ──the fresh process answers──> importing ──> planned (reshape.py)
                          │                                       │
                          └─ refused: a coded answer, and nothing changes ─┘

1. the configuration is read again as at start (``Configuration.read``); a refused knob is
   answered at once (``X_INVALID_OPTION``);
2. a fresh process imports the app as configured now and checks it with the configuration
   (``validate.py``), under a deadline, while the loop goes on supervising; a refusal
   (``X_APP_INVALID``, ``X_INVALID_OPTION``) leaves every child as it was;
3. when the app's image differs from the one the supervisor runs, the supervisor imports the
   app again (``appcode.AppCode.load``): the successors are forked from it, so new code is
   what they run. A failure there is a refusal too, with the old modules and registry back;
4. the groups the configuration asks for are built from that registry, and the reshaper
   replaces those whose fingerprint changed (``reshape.py``).

Only the answer comes late: the ``reload`` command's client waits for it on its connection
(``control.Deferred``). Requests arriving while a validation runs are answered by the next
one, which starts as soon as it ends, so each request sees the files as they were after it
was made. A drain cancels a validation and tells whoever waits.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import Any, Callable

from ..config import Settings
from ..errors import XJobsError
from .appcode import AppCode, AppImage
from .reshape import Reshaper
from .slots import RoleSpec
from .validate import Validation

log = logging.getLogger("xjobs.supervisor")

Reply = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Configuration:
    """How a reload reads the daemon's configuration again (``xjobsd run`` builds it).

    read    the settings as they read now: flags > environment > file (refusals raise);
    groups  the role groups those settings ask for, from the registry as imported now;
    app     the app's code: validated in a fresh process, imported again when it changed
            (None: a supervisor with no app to import, as in the loop's own tests);
    strict  ``--strict``: a registered job whose queue no process serves is refused."""
    read: Callable[[], Settings]
    groups: Callable[[Settings], list[RoleSpec]]
    app: AppCode | None = None
    strict: bool = False


def refusal(exc: BaseException) -> dict[str, Any]:
    answer: dict[str, Any] = {"ok": False, "error": str(exc)}
    if isinstance(exc, XJobsError):   # a coded refusal exits 2 from xjobsd reload
        answer["code"] = exc.code
    return answer


class Reloader:
    def __init__(self, reshaper: Reshaper, configuration: Configuration | None, *,
                 deadline_s: float, wake: Callable[[], None],
                 on_planned: Callable[[dict[str, Any]], None] = lambda answer: None) -> None:
        self.reshaper = reshaper
        self.configuration = configuration
        self.deadline_s = deadline_s
        self.wake = wake
        self.on_planned = on_planned
        self._validation: Validation | None = None
        self._settings: Settings | None = None   # what the running validation checks
        self._replies: list[Reply] = []          # who waits for the running validation
        self._next: list[Reply] | None = None    # who waits for the one after it
        self.last: dict[str, Any] | None = None            # the last reload's outcome, refusals included

    def state(self) -> dict[str, Any]:
        """``xjobsd status``'s ``reload``: idle, validating or reloading, and the last outcome."""
        state = self.reshaper.state()
        if self._validation is not None:
            state["state"] = "validating"
        state["last"] = self.last
        return state

    def request(self, reply: Reply) -> None:
        """A reload was asked for; ``reply`` gets its answer (SIGHUP's goes to the log only)."""
        if self._validation is not None:
            self._next = (self._next or []) + [reply]
            return
        self._begin([reply])

    def poll(self) -> None:
        """On every loop pass: finish a validation that answered, then start the next."""
        validation = self._validation
        if validation is None or not validation.done:
            return
        self._validation = None
        settings, replies = self._settings, self._replies
        self._settings, self._replies = None, []
        assert settings is not None
        result = validation.result
        if isinstance(result, AppImage):
            self._apply(settings, result, replies)
        else:
            assert result is not None
            if validation.traceback:
                log.debug("the reload's validation failed:\n%s", validation.traceback)
            self._refuse(result, replies)
        if self._next is not None:
            waiting, self._next = self._next, None
            self._begin(waiting)

    def abandon(self, why: str) -> None:
        """A drain began (or the supervisor exits): no validation goes on, nobody waits."""
        if self._validation is not None:
            self._validation.cancel()
            self._validation = None
        waiting = self._replies + (self._next or [])
        self._settings, self._replies, self._next = None, [], None
        for reply in waiting:
            reply({"ok": False, "error": f"the reload was abandoned: {why}"})

    # -- the steps ----------------------------------------------------------------------------------

    def _begin(self, replies: list[Reply]) -> None:
        configuration = self.configuration
        if configuration is None:
            self._answer(replies, {"ok": False, "error": "this supervisor has no configuration to re-read"})
            return
        try:
            settings = configuration.read()
        except Exception as exc:   # a bad file must never take the running daemon down
            self._refuse(exc, replies)
            return
        app = configuration.app
        if app is None:
            self._apply(settings, None, replies)
            return
        app.forget_stale_bytecode()
        request = {"apps": list(settings.apps), "path": list(sys.path),   # the same cwd: '' is the same
                   "queues": {name: [q.processes, q.concurrency] for name, q in settings.queues.items()},
                   "strict": configuration.strict}
        try:
            self._validation = Validation(request, self.deadline_s, self.wake)
        except OSError as exc:   # no process could be started (fds, memory): nothing changes
            self._refuse(exc, replies)
            return
        self._settings, self._replies = settings, replies
        log.info("reload: validating the app (%s) in a fresh process", ", ".join(settings.apps))

    def _apply(self, settings: Settings, image: AppImage | None, replies: list[Reply]) -> None:
        configuration = self.configuration
        assert configuration is not None
        app = configuration.app
        app_changes: list[str] = []
        try:
            if app is not None and image is not None and image != app.image:
                app_changes = app.image.changes(image)
                with app.loading(settings.apps, image):
                    specs = configuration.groups(settings)
            else:
                specs = configuration.groups(settings)
        except Exception as exc:
            self._refuse(exc, replies)
            return
        answer = self.reshaper.reload(settings, specs, image, app_changes,
                                      registered=app.queues() if app is not None else None)
        self.last = {"outcome": "replaced" if answer["groups"] else "unchanged", **(self.reshaper.last or {})}
        self.on_planned(answer)
        self._answer(replies, answer)

    def _refuse(self, exc: BaseException, replies: list[Reply]) -> None:
        log.error("reload refused, keeping the running configuration and children: %s", exc)
        answer = refusal(exc)
        self.last = {"outcome": "refused", "generation": self.reshaper.generation,
                     "error": answer["error"], "code": answer.get("code")}
        self._answer(replies, answer)

    @staticmethod
    def _answer(replies: list[Reply], answer: dict[str, Any]) -> None:
        for reply in replies:
            reply(answer)
