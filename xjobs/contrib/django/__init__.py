"""xjobs as a backend of Django's Tasks framework (``django.tasks`` on Django 6, the
``django-tasks`` backport on Django 5.2)::

    TASKS = {"default": {"BACKEND": "xjobs.contrib.django.XJobsBackend"}}

and ``xjobsd run --django mysite.settings`` runs the tasks. The modules: ``compat.py`` (the
framework's names, wherever it is installed), ``backend.py`` (the backend contract),
``jobs.py`` (a task as a job, its body, its result read back), ``worker.py`` (what the daemon
imports: Django set up, every installed app's ``tasks`` module imported).
"""

from __future__ import annotations

from .backend import XJobsBackend

__all__ = ["XJobsBackend"]
