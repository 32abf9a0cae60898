"""What the ledger says, projected ONCE, and the diff with what the registry declares.

``inspect_backfills(driver)`` maps each ledger row to a plain JSON object (epoch ms to ISO-8601,
absent to None): the one projection ``xjobsd backfill ls``, ``xjobsd jobs ls|show`` and the
dashboard print, so no two surfaces disagree about how many rows a pass swept. It reads no
clock: a running row's elapsed time would be another number in every process that asks, so
``duration_ms`` is a finished run's own span, or None. It answers ``[]`` for a driver with no
ledger (a surface asked about jobs must not fail over a fact nobody asked for).

``report(registry, driver, environment)``: the ledger says what RAN, the registry what EXISTS;
each declared backfill gets one ``status``:

- ``completed``: a run of it completed (only that blocks the name);
- ``excluded``: its ``environments`` leave this environment out (not drift);
- ``running``: a run is in flight (progress, not drift);
- ``pending``: declared, never completed, allowed here, none in flight (a failed run, until its
  retry adopts the row): what ``backfill run --all`` runs (a live pass is not enqueued twice).

``is_pending(status)`` is the one predicate for "pending", read by ``--all`` as by the listing.
A name the ledger holds that nothing declares any more is listed too (``declared: false``).
"""

from __future__ import annotations

from typing import Any

from ..drivers.ledger import BackfillRun, ledger_of
from ..registry import Registry
from ..views import iso as _iso
from .backfill import declared
from .backfill_pass import environment_refusal

STATUSES = ("pending", "running", "completed", "excluded")


def project(run: BackfillRun) -> dict[str, Any]:
    """One ledger row as every surface shows it."""
    return {"job_id": run.job_id, "name": run.name, "state": run.state, "rows": run.rows,
            "started_at": _iso(run.started_at), "completed_at": _iso(run.completed_at),
            "duration_ms": None if run.completed_at is None else max(0.0, run.completed_at - run.started_at),
            "checksum": run.checksum, "environment": run.environment, "error": run.error}


def inspect_backfills(driver: object, name: str | None = None) -> list[dict[str, Any]]:
    ledger = ledger_of(driver)
    return [] if ledger is None else [project(run) for run in ledger.backfill_list(name)]


def by_job(driver: object) -> dict[int, dict[str, Any]]:
    """The projection keyed by run (job id): what ``jobs ls|show`` attach to a backfill's job."""
    return {run["job_id"]: run for run in inspect_backfills(driver)}


def is_pending(status: str) -> bool:
    return status == "pending"


def status_of(runs: list[dict[str, Any]], excluded: bool) -> str:
    if any(run["state"] == "completed" for run in runs):
        return "completed"
    if excluded:
        return "excluded"
    if any(run["state"] == "running" for run in runs):
        return "running"
    return "pending"


def report(registry: Registry | None, driver: object, environment: str | None) -> list[dict[str, Any]]:
    runs: dict[str, list[dict[str, Any]]] = {}
    for run in inspect_backfills(driver):
        runs.setdefault(run["name"], []).append(run)
    rows = []
    for handle, spec in declared(registry):
        mine = runs.pop(spec.name, [])
        excluded = environment_refusal(spec, environment) is not None
        allowed = None if spec.environments is None else list(spec.environments)
        rows.append({"name": spec.name, "declared": True, "status": status_of(mine, excluded),
                     "queue": handle.queue, "environments": allowed, "checksum": spec.checksum,
                     "runs": mine, "last": mine[-1] if mine else None})
    for name, mine in sorted(runs.items()):
        rows.append({"name": name, "declared": False, "status": status_of(mine, False), "queue": None,
                     "environments": None, "checksum": None, "runs": mine, "last": mine[-1]})
    return rows


__all__ = ["STATUSES", "by_job", "inspect_backfills", "is_pending", "project", "report", "status_of"]
