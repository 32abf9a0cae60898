"""What ``xjobsd run --django mysite.settings`` imports as the app: Django set up from
``DJANGO_SETTINGS_MODULE`` (the command line sets it from ``--django``), then the ``tasks``
module of every installed app that has one, which declares each task's job.

The daemon imports this module and those tasks modules before it forks (``app_modules``
names them, for the daemon's app list: a reload imports them again), and closes the
connections Django opened meanwhile, so no child inherits a session. Each worker then runs
the hooks ``jobs.py`` declares with the first task: ``django.setup()`` in the child, and any
connection still inherited let go of without touching its socket.
"""

from __future__ import annotations

import importlib
import importlib.util
import os

from ...config import current_settings
from ...daemon_record import recorded_daemon
from ...errors import InvalidOption

MODULE = __name__
SETTINGS_VARIABLE = "DJANGO_SETTINGS_MODULE"


def settings_module() -> str | None:
    """The Django settings module: ``DJANGO_SETTINGS_MODULE``, else xjobs' ``django`` setting
    (``XJOBS_DJANGO``, ``xjobs.toml``), else the one the daemon running from this directory was
    started with (a command run beside it, like ``xjobsd enqueue``, imports the same app)."""
    found = os.environ.get(SETTINGS_VARIABLE) or current_settings().django
    if not found:
        recorded = recorded_daemon()
        value = recorded.get("django") if recorded is not None else None
        found = value if isinstance(value, str) and value else None
    return found


def set_up() -> tuple[str, ...]:
    """Django set up, the installed apps' tasks modules imported; answers their names."""
    project = settings_module()
    if project is None:
        raise InvalidOption("django", f"{SETTINGS_VARIABLE} is not set: pass --django mysite.settings")
    os.environ[SETTINGS_VARIABLE] = project
    import django
    from django.apps import apps
    from django.db import connections
    django.setup()
    found = []
    for config in apps.get_app_configs():
        name = f"{config.name}.tasks"
        try:
            exists = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            exists = False
        if exists:
            importlib.import_module(name)
            found.append(name)
    connections.close_all()   # what setup or an import opened: nothing crosses the fork
    return tuple(found)


def queue_location() -> tuple[str, str] | None:
    """(database URL, schema) of the first ``XJobsBackend`` in ``TASKS``: where the daemon's
    queue is when its own settings do not say."""
    from .backend import XJobsBackend
    from .compat import task_backends
    for backend in task_backends.all():
        if isinstance(backend, XJobsBackend):
            return backend.location()
    return None


TASK_MODULES = set_up()


def app_modules() -> tuple[str, ...]:
    """The daemon's app: this module first (it sets Django up), then the tasks modules."""
    return (MODULE, *TASK_MODULES)


__all__ = ["MODULE", "TASK_MODULES", "app_modules", "queue_location", "set_up", "settings_module"]
