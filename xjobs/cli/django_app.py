"""``xjobsd run --django mysite.settings``: the daemon's app is a Django project.

``DJANGO_SETTINGS_MODULE`` is set from the flag (so every child, and a reload's validating
process, sees it), ``xjobs.contrib.django.worker`` is imported as the first app module (Django
set up, every installed app's ``tasks`` module imported), and those tasks modules join the
app's modules. The daemon's queue is the one the project's ``XJobsBackend`` uses: its
database when the daemon's own settings name none, its schema unless ``--schema`` says.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..config import Settings
from ..errors import InvalidOption
from . import setting_flags
from .common import import_apps

WORKER = "xjobs.contrib.django.worker"


def with_django(args: argparse.Namespace, settings: Settings) -> Settings:
    """``settings`` with the Django project's app modules and its queue (see the module doc)."""
    if not settings.django:
        return settings
    os.environ["DJANGO_SETTINGS_MODULE"] = settings.django
    import_apps([WORKER])   # a project that fails to set up is refused in one line, exit 2
    from ..contrib.django import worker
    overrides: dict[str, object] = {"apps": apps_of(settings)}
    try:
        where = worker.queue_location()
    except InvalidOption:   # no XJobsBackend database to fall back on: the daemon's own rules
        where = None
    if where is not None:
        dsn, schema = where
        if not settings.dsn:
            overrides["dsn"] = dsn
        if "schema" not in setting_flags.given(args):
            overrides["schema"] = schema
    return settings.with_overrides(**overrides)


def apps_of(settings: Settings) -> tuple[str, ...]:
    """The app's modules, the Django project's first once it is set up (a reload reads the
    settings again: the project stays the daemon's app)."""
    worker = sys.modules.get(WORKER)
    if not settings.django or worker is None:
        return settings.apps
    modules: tuple[str, ...] = worker.app_modules()
    return tuple(dict.fromkeys((*modules, *settings.apps)))
