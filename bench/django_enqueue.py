"""What the Django Tasks backend costs an enqueue: ``task.enqueue()`` through
``xjobs.contrib.django.XJobsBackend`` against xjobs' own ``enqueue()`` and a raw single-row
``INSERT`` into the same jobs table, each one call per transaction, in the same run.

    python bench/django_enqueue.py [--dsn URL] [--jobs 3000] [--rounds 5]

Rows: the raw insert on an autocommit connection (the baseline); ``enqueue()`` of a plain job
on the driver's pool; ``task.enqueue()`` outside a transaction (the backend's pool); the raw
insert inside ``transaction.atomic()`` on Django's connection, and ``task.enqueue()`` inside
``atomic()`` (the job joins the view's transaction: one ``atomic()`` per call, its commit
included). Each row alternates with the others in ``--rounds`` blocks (median of the blocks),
so a moment of noise on the machine lands on one block, not on one row. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Callable

import orjson

from daemon import drop_schema, fresh_schema


def noop_task(n: int) -> int:
    return n


def set_up_django(dsn: str, schema: str) -> None:
    import django
    from django.conf import settings
    from psycopg.conninfo import conninfo_to_dict
    where = conninfo_to_dict(dsn)
    settings.configure(
        USE_TZ=True, INSTALLED_APPS=[],
        DATABASES={"default": {"ENGINE": "django.db.backends.postgresql",
                               "NAME": where.get("dbname", "postgres"), "USER": where.get("user", "postgres"),
                               "PASSWORD": where.get("password", ""), "HOST": where.get("host", "127.0.0.1"),
                               "PORT": where.get("port", "5432")}},
        TASKS={"default": {"BACKEND": "xjobs.contrib.django.XJobsBackend",
                           "OPTIONS": {"database_url": dsn, "schema": schema}}})
    django.setup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_DATABASE_URL",
                                                        "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--jobs", type=int, default=3000, help="calls per row, over all rounds")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    schema = fresh_schema(args.dsn)
    try:
        set_up_django(args.dsn, schema)
        rows = measure(schema, args.jobs, args.rounds)
    finally:
        from django.db import connections
        connections.close_all()
        drop_schema(args.dsn, schema)
    base = rows[0][1]
    print(f"one call per transaction, {args.jobs} calls per row, median of {args.rounds} blocks")
    print(f"{'row':<46} {'calls/s':>9} {'vs raw':>7}")
    for name, rate in rows:
        print(f"{name:<46} {rate:>9.0f} {rate / base:>7.2f}")


def measure(schema: str, jobs: int, rounds: int) -> list[tuple[str, float]]:
    from django.db import connection, transaction

    from xjobs import job
    from xjobs.contrib.django.compat import Task
    from xjobs.enqueue import enqueue_many
    from xjobs.registry import Registry
    task = Task(func=noop_task)      # the decorator's work, without a module of its own
    backend = task.get_backend()
    plain = job(name="bench_plain", queue="default", idempotency_key=lambda i: f"p-{i}", tenant="none",
                registry=Registry())(lambda ctx, i: None)
    raw = (f"insert into {schema}.jobs (name, queue, state, payload, idempotency_key, tenant, priority, "
           f"max_attempts, run_at, created_at) values ('noop', 'default', 'ready', %s, %s, null, 0, 1, "
           f"now(), now()) returning id")
    counter = iter(range(10**9))

    def raw_insert() -> None:
        n = next(counter)
        with connection.cursor() as cur:
            cur.execute(raw, (orjson.dumps({"n": n}).decode(), f"raw-{n}"))
            cur.fetchone()

    def in_atomic(call: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            with transaction.atomic():
                call()
        return run
    scenarios: list[tuple[str, Callable[[], None]]] = [
        ("raw INSERT, autocommit (baseline)", raw_insert),
        ("xjobs enqueue(), its pool", lambda: enqueue_many(plain, [next(counter)], driver=backend.driver())
         and None),
        ("task.enqueue(), outside atomic()", lambda: task.enqueue(next(counter)) and None),
        ("raw INSERT inside atomic()", in_atomic(raw_insert)),
        ("task.enqueue() inside atomic() (joins it)", in_atomic(lambda: task.enqueue(next(counter)) and None)),
    ]
    for _, call in scenarios:      # every connection and pool is open before the clock starts
        call()
    block = max(1, jobs // rounds)
    rates: dict[str, list[float]] = {name: [] for name, _ in scenarios}
    for _ in range(rounds):
        for name, call in scenarios:
            started = time.perf_counter()
            for _ in range(block):
                call()
            rates[name].append(block / (time.perf_counter() - started))
    return [(name, statistics.median(rates[name])) for name, _ in scenarios]


if __name__ == "__main__":
    main()
