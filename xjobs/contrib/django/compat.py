"""Django's Tasks framework under one set of names: ``django.tasks`` on Django 6, the
``django-tasks`` backport on Django 5.2 (the same contract, a few names apart:
``InvalidTaskError`` there is ``InvalidTask`` here). ``django.tasks`` is tried first: where
both are installed, the framework Django itself ships is the one ``TASKS`` configures."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:   # the backport ships its types; Django 6's are the same contract
    from django_tasks import DEFAULT_TASK_QUEUE_NAME, TaskContext, TaskResult, TaskResultStatus, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
else:
    try:
        from django.tasks import (DEFAULT_TASK_QUEUE_NAME, TaskContext, TaskResult, TaskResultStatus,
                                  task_backends)
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import Task, TaskError
        from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued, task_finished, task_started
    except ImportError:
        from django_tasks import (DEFAULT_TASK_QUEUE_NAME, TaskContext, TaskResult, TaskResultStatus,
                                  task_backends)
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskError
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started

__all__ = ["DEFAULT_TASK_QUEUE_NAME", "BaseTaskBackend", "InvalidTask", "Task", "TaskContext", "TaskError",
           "TaskResult", "TaskResultDoesNotExist", "TaskResultStatus", "task_backends", "task_enqueued",
           "task_finished", "task_started"]
