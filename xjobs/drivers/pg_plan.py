"""A verb's statements as a plan, run on a synchronous cursor or awaited on an async one.

A plan is a generator: it yields ``(statement name, parameters)``, is sent each statement's
rows, and returns what they make. What a verb decides (which statement next, what its rows
mean, when to ask again) is written once, in its plan; ``run_on`` and ``run_async`` only carry
the plan's statements to the server, so the pool's cursor, the application's connection and
its ``AsyncConnection`` cannot answer differently.
"""

from __future__ import annotations

from typing import Any, Generator, Mapping, TypeAlias, TypeVar

import psycopg

T = TypeVar("T")
Rows = list[tuple[Any, ...]]
Statement = tuple[str, dict[str, Any]]
Plan: TypeAlias = Generator[Statement, Rows, T]


def run_on(cur: psycopg.Cursor[Any], sql: Mapping[str, str], plan: Plan[T], *, first: Rows | None = None) -> T:
    """Every statement of ``plan`` on ``cur`` (whose rows must be tuples), in order. ``first``:
    the rows of the statement the plan last yielded, when the caller sent it itself (a plan
    started with ``next``)."""
    rows = first     # a plan is started with None, as a generator must be
    while True:
        try:
            name, params = plan.send(rows)   # type: ignore[arg-type]
        except StopIteration as done:        # a plan may need no statement at all
            answer: T = done.value
            return answer
        cur.execute(sql[name], params)
        rows = cur.fetchall()


async def run_async(cur: psycopg.AsyncCursor[Any], sql: Mapping[str, str], plan: Plan[T]) -> T:
    """``run_on``, awaited: the loop runs other tasks while each statement is at the server."""
    rows: Rows | None = None
    while True:
        try:
            name, params = plan.send(rows)   # type: ignore[arg-type]
        except StopIteration as done:
            answer: T = done.value
            return answer
        await cur.execute(sql[name], params)
        rows = await cur.fetchall()
