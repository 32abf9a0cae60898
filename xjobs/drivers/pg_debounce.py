"""The Postgres driver's debounce: the step of ``enqueue_plan`` that moves a held key's job
(``job_debounce`` in ``queries.sql``; the semantics are in ``xjobs/snooze.py``)."""

from __future__ import annotations

from typing import Sequence

import orjson

from .pg_database import PgDatabase
from .pg_plan import Plan
from .records import NewJob

Namespace = tuple[str, str, str]


def debounce_plan(db: PgDatabase, held: Sequence[NewJob]) -> Plan[dict[Namespace, int]]:
    """Of ``held`` (inputs whose key a job may hold, in call order), the debounced ones move
    their holder, the LAST input of a namespace giving it its input; answers the holders that
    moved, by namespace (none: no holder, it had started, or none of ``held`` is debounced).
    Sent before the insert (most debounced enqueues find their key held) and after it."""
    newest = {job.namespace: job for job in held if job.debounce_ms is not None}
    if not newest:
        return {}
    rows = orjson.dumps([job.document() for job in newest.values()]).decode()
    moved = yield "job_debounce", {**db.now(), "rows": rows}
    return {(r[1], r[2], r[3]): r[0] for r in moved}
