"""Test configuration: fixtures live in plugins so each suite can see what it depends on.

The tests are in tiers, each a folder: ``unit`` (declarations, refusals, pure functions),
``drivers`` (the seam, its SQL and migrations, on both drivers), ``worker`` (the child roles in
this process), ``factories`` (the ready-made jobs: backfill and its paging), ``supervisor`` (the arbiter forking fake roles), ``daemon`` (``xjobsd`` as a
subprocess), ``cli`` and ``ui`` (the operator surfaces), ``integrations`` (the examples
under their frameworks, their jobs under ``xjobsd``). Shared fixtures are plugins loaded
here: ``tests/fixtures.py`` (drivers and schemas) and ``tests/daemon_fixtures.py``
(``daemon_env``); a tier's own are in its ``conftest.py``.

The suite runs on several processes (pytest-xdist, ``-n auto`` in pyproject.toml): most of its
time is daemons waiting on real timers, not CPU. How many is bounded by the PostgreSQL the tests
use: a daemon test holds 15 to 40 sessions (every child has its pools), so a server at the
default ``max_connections = 100`` gets two workers and a larger one up to four. Without a server
at hand (the embedded fallback starts one per worker) the suite runs on one.
"""

from __future__ import annotations

import os

import psycopg

pytest_plugins = ["tests.fixtures", "tests.daemon_fixtures"]

_SESSIONS_PER_WORKER = 40
_MOST_WORKERS = 4


def pytest_xdist_auto_num_workers(config) -> int:
    from tests.fixtures import LOCAL_DSN
    dsn = os.environ.get("XJOBS_TEST_DSN") or LOCAL_DSN
    try:
        with psycopg.connect(dsn, connect_timeout=2) as conn:
            row = conn.execute("select current_setting('max_connections')::int "
                               "- current_setting('superuser_reserved_connections')::int").fetchone()
    except psycopg.Error:
        return 1
    room = int(row[0]) if row else 0
    # twice the cores: the workers mostly wait
    return max(1, min(_MOST_WORKERS, (os.cpu_count() or 1) * 2, room // _SESSIONS_PER_WORKER))


def pytest_collection_modifyitems(config, items) -> None:
    """The long tests dealt out over the processes, each process's share longest first.

    ``--dist worksteal`` hands each process one contiguous stretch of this order, and a process
    that runs dry takes the tail of another's. Sorted long-first, every ``slow`` test would fall
    in the first process's stretch and run one after another there while the others ran out
    of short tests to take. Dealt round-robin, each stretch begins with its own share of the
    long tests and ends with the short ones that are stolen."""
    ranked = sorted(items, key=lambda item: (item.get_closest_marker("slow") is None,
                                             item.get_closest_marker("daemon") is None))
    processes = int(getattr(config, "workerinput", {}).get("workercount", 1))
    items[:] = [item for share in range(processes) for item in ranked[share::processes]]
