"""The Django Tasks backend in this process, on the real PostgreSQL: what a view's transaction
does to its job, what ``get_result`` answers for each state, and the backend contract's
refusals. The jobs run here through ``xjobs.testing.run_until_idle`` (a real queue worker);
``test_daemon.py`` runs them under ``xjobsd run --django``."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest

from tests.django.conftest import Project
from xjobs import testing
from xjobs.errors import InvalidOption

pytestmark = pytest.mark.postgres


def run_queue(project: Project, queue: str = "default") -> dict:
    return testing.run_until_idle(queue, driver=project.backend().driver()).jobs


def test_a_view_that_raises_inside_atomic_leaves_neither_its_order_nor_its_job(project):
    from django.test import Client
    response = Client(raise_request_exception=False).get("/orders/7?fail=1")
    assert response.status_code == 500
    assert project.sql("select count(*) from {schema}.jobs") == [(0,)]
    assert project.sql("select count(*) from {schema}.shop_order") == [(0,)]


def test_a_view_that_commits_leaves_its_job_on_the_tasks_queue_at_its_priority(project):
    from django.test import Client
    client = Client()
    result_id = client.get("/orders/8").json()["id"]
    assert project.sql("select name, queue, priority, state, tenant from {schema}.jobs where id = %s",
                       int(result_id)) == [("tests.django.shop.tasks.mark_sent", "emails", -10, "ready", None)]
    assert client.get(f"/results/{result_id}").json() == {"status": "READY", "value": None}
    assert run_queue(project, "emails") == {"tests.django.shop.tasks.mark_sent": {"completed": 1}}
    assert client.get(f"/results/{result_id}").json() == {"status": "SUCCESSFUL", "value": 8}
    assert project.sql("select note from {schema}.shop_order where number = 8") == [("sent",)]


def test_get_result_reports_success_with_the_return_value(project):
    from tests.django.shop.tasks import add, attempt_of, double
    from xjobs.contrib.django.compat import TaskResultStatus
    summed, context, doubled = add.enqueue(2, b=3), attempt_of.enqueue("first"), double.enqueue(21)
    assert summed.status == TaskResultStatus.READY and summed.args == [2] and summed.kwargs == {"b": 3}
    with pytest.raises(ValueError, match="not finished"):
        summed.return_value
    run_queue(project)
    for result in (summed, context, doubled):
        result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL and result.is_finished
        assert result.errors == [] and result.attempts == 1 and len(result.worker_ids) == 1
        assert result.enqueued_at <= result.started_at <= result.finished_at
    assert summed.return_value == 5 and doubled.return_value == 42
    # takes_context: the context's result is this job's, its attempt the job's
    assert context.return_value == {"attempt": 1, "id": context.id, "label": "first"}
    fetched = add.get_result(summed.id)
    assert (fetched.id, fetched.return_value, fetched.task.func) == (summed.id, 5, add.func)


def test_get_result_reports_failure_with_the_exception_and_its_traceback(project):
    from tests.django.shop.tasks import Declined, decline
    from xjobs.contrib.django.compat import TaskResultStatus
    result = decline.enqueue("no funds")
    assert run_queue(project) == {"tests.django.shop.tasks.decline": {"dead": 1}}
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.is_finished and result.finished_at is not None
    [error] = result.errors
    assert error.exception_class_path == "tests.django.shop.tasks.Declined"
    assert error.exception_class is Declined
    assert error.traceback.rstrip().endswith("tests.django.shop.tasks.Declined: no funds")
    with pytest.raises(ValueError, match="failed"):
        result.return_value


def test_a_failed_attempt_that_will_be_retried_is_ready_with_its_error(project):
    from tests.django.shop.tasks import flaky
    result = flaky.enqueue("try again")
    [(max_attempts,)] = project.sql("select max_attempts from {schema}.jobs where id = %s", int(result.id))
    assert max_attempts == 2                      # the "retrying" backend's policy
    assert run_queue(project) == {"tests.django.shop.tasks.flaky": {"retried": 1}}
    result.refresh()
    assert result.status == "READY" and not result.is_finished and result.attempts == 1
    assert [e.exception_class_path for e in result.errors] == ["tests.django.shop.tasks.Declined"]


def test_a_cancelled_task_failed_and_says_why(project):
    from tests.django.shop.tasks import add
    from xjobs.admin import cancel_job
    result = add.enqueue(1, 2)
    cancel_job(project.backend().driver(), int(result.id), by="test", reason="not needed")
    result.refresh()
    assert result.status == "FAILED" and result.attempts == 0
    assert len(result.errors) == 1 and "not needed" in result.errors[0].traceback


def test_run_after_defers_the_job_to_that_time(project):
    from tests.django.shop.tasks import add
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    result = add.using(run_after=later, priority=-5).enqueue(1, 1)
    [(run_at, priority)] = project.sql("select run_at, priority from {schema}.jobs where id = %s", int(result.id))
    assert abs((run_at - later).total_seconds()) < 1 and priority == 5
    assert run_queue(project) == {}       # not due
    again = add.get_result(result.id)
    assert again.task.run_after == later and again.task.priority == -5


def test_a_job_enqueued_in_an_open_transaction_is_read_in_it_and_rolls_back_with_it(project):
    from django.db import transaction

    from tests.django.shop.tasks import add
    from xjobs.contrib.django.compat import TaskResultDoesNotExist

    class Undo(Exception):
        pass
    with pytest.raises(Undo), transaction.atomic():
        result = add.enqueue(4, 4)
        assert add.get_result(result.id).status == "READY"     # on the view's own connection
        assert project.sql("select count(*) from {schema}.jobs") == [(0,)]   # nobody else sees it yet
        raise Undo
    with pytest.raises(TaskResultDoesNotExist):
        add.get_result(result.id)


def test_enqueue_in_a_transaction_it_cannot_join_is_refused(project, monkeypatch):
    from django.db import connections, transaction

    from tests.django.shop.tasks import add
    from xjobs.contrib.django.backend import TransactionUnjoinable
    monkeypatch.setattr(connections["default"], "vendor", "sqlite")
    with pytest.raises(TransactionUnjoinable) as refused, transaction.atomic():
        add.enqueue(1, 2)
    assert refused.value.code == "X_DJANGO_TRANSACTION_UNJOINABLE" and "sqlite" in str(refused.value)
    assert project.sql("select count(*) from {schema}.jobs") == [(0,)]


def test_aenqueue_and_aget_result(project):
    from tests.django.shop.tasks import add

    async def scenario() -> tuple[str, str]:
        result = await add.aenqueue(5, 6)
        fetched = await add.aget_result(result.id)
        return result.id, fetched.status
    result_id, status = asyncio.run(scenario())
    assert status == "READY"
    run_queue(project)
    assert add.get_result(result_id).return_value == 11


def test_an_unknown_result_id_does_not_exist(project):
    from tests.django.shop.tasks import add
    from xjobs.contrib.django.compat import TaskResultDoesNotExist
    for result_id in ("999999", "not-a-number"):
        with pytest.raises(TaskResultDoesNotExist):
            add.get_backend().get_result(result_id)


def test_arguments_json_cannot_carry_are_refused_before_anything_is_written(project):
    from tests.django.shop.tasks import add
    with pytest.raises(TypeError):
        add.enqueue(object(), 1)
    assert project.sql("select count(*) from {schema}.jobs") == [(0,)]


def test_the_backend_says_what_it_supports(project):
    backend = project.backend()
    assert (backend.supports_defer, backend.supports_async_task, backend.supports_get_result,
            backend.supports_priority) == (True, True, True, True)


def _bare():
    return None


def _nested():
    def inner() -> None:
        return None
    return inner


@pytest.mark.parametrize("options, fn, message", [
    ({}, _nested(), "module level"),
    ({"takes_context": True}, _bare, "context"),
    ({"priority": 101}, _bare, "priority"),
    ({"queue_name": "nowhere"}, _bare, "nowhere"),
])
def test_validate_task_refuses_what_django_says_a_backend_must(project, options, fn, message):
    from xjobs.contrib.django.compat import InvalidTask
    with pytest.raises(InvalidTask, match=message):
        django_task(**options)(fn)


def django_task(**options):
    """The ``@task`` decorator of the installed framework."""
    try:
        from django.tasks import task
    except ImportError:
        from django_tasks import task
    return task(**options)


def test_a_naive_run_after_is_refused_with_use_tz(project):
    from tests.django.shop.tasks import add
    from xjobs.contrib.django.compat import InvalidTask
    with pytest.raises(InvalidTask, match="aware"):
        add.using(run_after=datetime(2030, 1, 1))


def test_using_cannot_move_a_task_to_another_queue_or_backend(project):
    from tests.django.shop.tasks import add
    from xjobs.contrib.django.compat import InvalidTask
    with pytest.raises(InvalidTask, match="runs on queue 'default'"):
        add.using(queue_name="emails")
    with pytest.raises(InvalidTask, match="backend 'default'"):
        add.using(backend="retrying")


def test_unknown_options_and_bad_retries_are_refused_when_the_backend_is_built(project):
    from xjobs.contrib.django import XJobsBackend
    with pytest.raises(InvalidOption, match="bogus"):
        XJobsBackend("x", {"OPTIONS": {"bogus": 1}})
    with pytest.raises(InvalidOption, match="retry"):
        XJobsBackend("x", {"OPTIONS": {"retry": "often"}})
    with pytest.raises(InvalidOption, match="timeout"):
        XJobsBackend("x", {"OPTIONS": {"timeout": "-1s"}})
    with pytest.raises(InvalidOption, match="schema"):
        XJobsBackend("x", {"OPTIONS": {"schema": "Robert'); drop table jobs"}})
    with pytest.raises(InvalidOption, match="database_url"):
        XJobsBackend("x", {"OPTIONS": {"database_url": 5432}})
    with pytest.raises(InvalidOption, match="queues"):
        XJobsBackend("x", {"QUEUES": [" padded "]})


def test_the_exception_path_of_a_traceback():
    from xjobs.contrib.django.jobs import exception_path
    builtin = "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n    g()\nValueError: bad\nvalue\n"
    assert exception_path(builtin, "ValueError: bad") == "builtins.ValueError"
    assert exception_path(None, "lease lost") == "xjobs.errors.XJobsError"


def test_a_forked_worker_lets_go_of_an_inherited_connection_without_closing_it(project, monkeypatch):
    from django.db import connection

    from tests.django.shop import tasks  # noqa: F401  (declaring the first task declares the hooks)
    from tests.django.shop.models import Order
    from xjobs.contrib.django import jobs
    from xjobs.registry import REGISTRY
    assert jobs._worker_started in REGISTRY.worker_start and jobs._worker_stopped in REGISTRY.worker_stop
    connection.ensure_connection()
    inherited = connection.connection
    jobs._worker_started()           # in the process that declared the tasks: its own connection stays
    assert connection.connection is inherited
    monkeypatch.setattr(jobs, "_IMPORTED_IN", -1)   # as in a child forked from it
    jobs._worker_started()
    assert connection.connection is None and inherited in jobs._inherited
    assert not inherited.closed                     # the parent's session is untouched
    assert Order.objects.count() == 0               # the child opens its own
    assert connection.connection is not inherited
    jobs._inherited.remove(inherited)
    inherited.close()


def test_the_framework_signals_are_sent_for_an_enqueue_a_start_and_a_finish(project):
    from tests.django.shop.tasks import add
    from xjobs.contrib.django.compat import task_enqueued, task_finished, task_started
    seen: list[tuple[str, str, str]] = []

    def record(name):
        def receiver(sender, task_result, **kwargs):
            seen.append((name, task_result.id, str(task_result.status)))
        return receiver
    receivers = {signal: record(name) for signal, name in
                 ((task_enqueued, "enqueued"), (task_started, "started"), (task_finished, "finished"))}
    for signal, receiver in receivers.items():
        signal.connect(receiver)
    try:
        result = add.enqueue(3, 4)
        run_queue(project)
    finally:
        for signal, receiver in receivers.items():
            signal.disconnect(receiver)
    assert seen == [("enqueued", result.id, "READY"), ("started", result.id, "RUNNING"),
                    ("finished", result.id, "SUCCESSFUL")]


def test_a_job_that_is_no_task_has_no_result_and_its_name_is_never_imported(project):
    import sys

    from xjobs import job
    from xjobs.contrib.django.compat import TaskResultDoesNotExist
    from xjobs.enqueue import enqueue_many
    from xjobs.registry import Registry
    assert "this" not in sys.modules      # importing it prints; a job's name is a row anybody may write
    plain = job(name="this.s", idempotency_key=lambda i: "k", tenant="none", registry=Registry())(
        lambda ctx, i: None)
    [enqueued] = enqueue_many(plain, [{}], driver=project.backend().driver())
    with pytest.raises(TaskResultDoesNotExist):
        project.backend().get_result(str(enqueued.id))
    assert "this" not in sys.modules
