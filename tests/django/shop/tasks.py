"""The test project's tasks: each a behaviour of the backend the tests run."""

from typing import Any

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task

from .models import Order


class Declined(Exception):
    pass


@task()
def add(a: int, b: int) -> int:
    return a + b


@task()
def decline(reason: str) -> None:
    raise Declined(reason)


@task(takes_context=True)
def attempt_of(context: Any, label: str) -> dict[str, Any]:
    return {"attempt": context.attempt, "id": context.task_result.id, "label": label}


@task(queue_name="emails", priority=10)
def mark_sent(number: int) -> int:
    """Writes through the ORM in the worker: Django is set up there, on its own connection."""
    Order.objects.filter(number=number).update(note="sent")
    return number


@task()
async def double(x: int) -> int:
    return 2 * x


@task(backend="retrying")
def flaky(reason: str) -> None:
    """On a backend whose jobs retry: a failure leaves it READY for its next attempt."""
    raise Declined(reason)
