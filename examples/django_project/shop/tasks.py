"""The app's tasks: ``xjobsd run --django mysite.settings`` imports this module in the daemon."""

try:                                   # Django 6
    from django.tasks import task
except ImportError:                    # Django 5.2 with the django-tasks backport
    from django_tasks import task

from .models import Order


@task(queue_name="emails")
def send_receipt(number: int) -> str:
    """Runs in an xjobsd worker, with the ORM on the worker's own connection."""
    Order.objects.filter(number=number).update(receipt_sent=True)
    return f"receipt for order {number} sent"
