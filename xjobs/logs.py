"""Logs an operator can read and a machine can parse.

``xjobsd run|tick --log-format text|json --log-level LEVEL`` (or ``XJOBS_LOG_FORMAT`` and
``XJOBS_LOG_LEVEL``). ``text`` writes ``TS LEVEL LOGGER[PID]: MESSAGE``, TS as ``json``'s
``ts``, and a line from inside a job (``ctx.log``) begins ``job NAME#ID attempt N:`` as the job
events do. ``json`` writes one object per line, journald- and Loki-friendly:
``ts`` (ISO-8601 UTC), ``level``, ``logger``, ``pid``, ``message``, the record's fields (``event``,
``job_id``, ``job``, ``queue``, ``attempt``, ``tenant``, ``seconds``, ``verdict``, ... whatever
a call passed as ``extra``, ``ctx.log``'s included) and ``exc`` for a traceback.

Stable event names, each with its fields (``event(...)`` below), so an alert or a query keys
on a name, never on wording::

    daemon.started              info     pid apps queues roles unserved database control metrics
                                         dashboard    (json only; text mode prints a banner)
    job.attempt.started         debug    job_id job queue attempt tenant
    job.attempt.completed       debug    ... seconds
    job.attempt.failed          info     ... error verdict (retry in N s / dead)
    job.retried                 info     ... delay_s
    job.dead                    warning  ... error
    job.interrupted             info     ... error (a drain, a tick's deadline: attempt not charged)
    job.cancelled               info     ...
    job.shed                    debug    ... why delay_ms
    job.snoozed                 info     ... delay_s snoozes (xjobs.Snooze: attempt not charged)
    job.lease.lost              error    ... why
    job.lease.renew.failed      warning  count error worker   (one failed renewal is not a loss)
    job.settle.failed           error    count tries error job_ids worker (retried until the lease lapsed)
    job.timeout.abandoned       warning  ... timeout_ms   (a def body still running after its
                                         timeout: it does not heed ctx.signal)
    job.cross_tenant            warning  reason           (ctx.cross_tenant, in the run's fields; only a
                                         job declaring cross_tenant=True may open it)
    backfill.skipped            info     backfill run     (a completed run blocks the pass; not forced)
    backfill.checksum.moved     warning  backfill run checksum was (source or handle changed since that run)
    backfill.completed          info     backfill rows batches ran replayed
    worker.claim.failed         warning  queue error
    worker.drain.signalled      info     reason interrupted runs worker
    worker.drain.abandoned      warning  count job_ids worker
    worker.start_hook.failed    error    hook error worker (an on_worker_start hook raised: X_WORKER_START_FAILED)
    worker.stop_hook.failed     warning  hook error worker (an on_worker_stop hook raised or outlasted its time)
    worker.slot.acquire.failed  warning  ... error        (the job is shed, never run unbounded)
    worker.slot.stale           warning  ... slot waited_ms (granted after its window closed: given back, shed)
    worker.slot.renew.failed    warning  job slot error worker
    worker.slot.release.failed  warning  job slot error worker   (retried with the renewals)
    worker.slot.lost            error    ... slot         (the run is stopped: X_JOB_SLOT_LOST)
    worker.rate.take.failed     warning  error worker     (the batch's rated jobs are shed, never run over the rate)
    scheduler.leader.gained     info     scheduler holder
    scheduler.leader.lost       warning  scheduler holder why
    scheduler.election.failed   warning  scheduler error
    scheduler.schedule.failed   warning  scheduler error
    scheduler.dispatch.failed   error    scheduler task error
    scheduler.occurrences.skipped  warning  scheduler task skipped max_catch_up
    scheduler.drain.abandoned   warning  scheduler holder (its lease is left to expire)
    scheduler.resign.failed     warning  scheduler holder error
    scan.failed                 error    scan error
    scan.round.failed           warning  scheduler error
    upkeep.failed               warning  chore error by    (a rescue, wake or prune; retried on its timer)
    relay.claim.failed          warning  relay error
    relay.publish.failed        error    relay count error (the batch is handed back)
    relay.publish.fenced        warning  relay count      (another relay took the claim over)
    relay.release.failed        warning  relay error
    schema.migrated             info     schema version migration seconds
    schema.newer                warning  schema version code_version compatible_from (a rolling deploy)
    child.started               info     role queue pid child
    child.exited                info     role pid how        (a drain or a replacement asked for it)
    child.restarted             warning  role pid how uptime_s restart_in_s
"""

from __future__ import annotations

import logging
import os
import sys
from datetime import datetime, timezone
from typing import Any

import orjson

from .errors import InvalidOption

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s"
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


def _ts(record: logging.LogRecord) -> str:
    """When, as ISO-8601 in UTC with its offset, to the millisecond: the same in both formats."""
    return datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(timespec="milliseconds")


class TextFormatter(logging.Formatter):
    """``TEXT_FORMAT`` with the JSON format's time, and a line logged from inside a job
    (``ctx.log``) named as the job events name it: ``job send#42 attempt 2: ...``, so one
    grep finds a job's whole story in text as ``job_id`` does in JSON."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return _ts(record)

    def formatMessage(self, record: logging.LogRecord) -> str:
        fields = vars(record)
        if fields.get("job_id") is not None and "event" not in fields:   # an event names its job
            record.message = (f"job {fields.get('job')}#{fields['job_id']} attempt "
                              f"{fields.get('attempt')}: {record.message}")
        return super().formatMessage(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per record; the record's extra fields are carried as they are."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": _ts(record),
            "level": record.levelname.lower(), "logger": record.name, "pid": record.process,
            "message": record.getMessage()}
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                doc[key] = value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


def configure_logging(level: str | None = None, fmt: str | None = None) -> str:
    """The process's logging: flags first, then ``XJOBS_LOG_LEVEL``/``XJOBS_LOG_FORMAT``;
    answers the format chosen."""
    level = str(level or os.environ.get("XJOBS_LOG_LEVEL") or "INFO").upper()
    fmt = str(fmt or os.environ.get("XJOBS_LOG_FORMAT") or "text").lower()
    if fmt not in FORMATS:
        raise InvalidOption("log-format", f"must be text or json, got {fmt!r}")
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise InvalidOption("log-level", f"must be DEBUG, INFO, WARNING or ERROR, got {level!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("pgserver").setLevel(logging.WARNING)   # it narrates every initdb line
    return fmt


def event(logger: logging.Logger, level: int, name: str, message: str, *args: Any, **fields: Any) -> None:
    """Log ``message`` as the stable event ``name`` with ``fields`` (see the module doc)."""
    if logger.isEnabledFor(level):
        logger.log(level, message, *args, extra={"event": name, **fields})


def run_fields(job: Any) -> dict[str, Any]:
    """The fields every job event carries, from a claimed job."""
    return {"job_id": job.id, "job": job.name, "queue": job.queue, "attempt": job.attempt,
            "tenant": job.tenant}


__all__ = ["FORMATS", "JsonFormatter", "TextFormatter", "configure_logging", "event", "run_fields"]
