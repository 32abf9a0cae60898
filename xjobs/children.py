"""Child jobs on the step engine: ``ctx.step.invoke``, ``ctx.step.map`` and ``xjobs.batch``.

The rules, and why each holds:

- **One child per (parent, step, index).** The children of a step are inserted in the same
  transaction that records the step and suspends the parent, the first time the step is reached;
  a replay finds the step's fan-in and inserts nothing. A parent killed before that
  transaction commits wrote nothing, children included, so its next attempt starts clean.
- **Suspended, not polling.** The parent is suspended with no wake-up time (no slot, no attempt
  spent), and the settlement of its last child wakes it, in that settlement's transaction
  (the fan-in counter, ``drivers/fanins.py``): one wake per fan-in however many children.
- **A completed step never re-runs.** Once every child completed, their results are recorded
  as the step's result; later attempts replay it without reading a child again. A child that
  died or was cancelled fails the step with ``X_CHILD_FAILED`` (the step records nothing, and
  the parent's retry policy decides), unless ``return_exceptions=True`` asks for the failures
  in place.
- **A child is its own job.** Its tenant is its own ``tenant(input)``, its retry policy and
  queue its own; it inherits no cross-tenant grant, because nothing of the parent's run is
  passed to it but its input.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Generator, Sequence

import orjson

from .config import current_driver, current_settings
from .drivers.base import JobDriver
from .drivers.fanins import BatchOpened, FanInOutcome, FanInStore, FanOut, Member, NewBatch, fanins_of
from .enqueue import build_callback, build_chunks
from .errors import ChildFailed, FanInUnavailable, InvalidOption, PayloadTooLarge, StepResultInvalid, StepSuspension
from .payload import encode_payload
from .steps import MAX_RESULT_BYTES

if TYPE_CHECKING:
    from .registry import JobHandle
    from .steps import StepRunner

_Plan = Generator[Any, Any, Any]
ENQUEUE_OPTIONS = ("delay", "run_at", "priority")


def store_of(driver: object) -> FanInStore:
    found = fanins_of(driver)
    if found is None:
        raise FanInUnavailable("this driver keeps no fan-ins: child jobs and batches need the "
                               "PostgreSQL or the memory driver")
    return found


def check_handle(handle: object, what: str) -> "JobHandle":
    from .registry import JobHandle
    if not isinstance(handle, JobHandle):
        raise InvalidOption(what, f"must be a job declared with @job, got {type(handle).__name__}")
    return handle


def check_options(options: dict[str, object]) -> None:
    unknown = sorted(set(options) - set(ENQUEUE_OPTIONS))
    if unknown:
        raise InvalidOption("step.invoke", f"unknown enqueue option(s) {', '.join(unknown)}; "
                                           f"a child takes {', '.join(ENQUEUE_OPTIONS)}")


def fan_plan(runner: "StepRunner", name: str, handle: "JobHandle", inputs: Sequence[Any], *,
             return_exceptions: bool, options: dict[str, Any]) -> _Plan:
    """The plan of a map (an invoke is a map of one): replayed, or the fan-in opened or read."""
    recorded = yield from runner.lookup(name, "map")
    if recorded is not None:
        return _unpack(name, recorded.result, return_exceptions)
    store = store_of(runner.store)
    lease = runner.lease
    chunks = build_chunks(handle, inputs, enqueued_by=f"job:{lease.job_id}",
                          max_payload_bytes=current_settings().max_payload_bytes, **options)
    fan = FanOut(name=name, attempt=runner.attempt, total=len(inputs), chunks=chunks)
    outcome: FanInOutcome = yield runner.io(lambda: runner.fenced_suspend(name, lambda: store.fanin_open(lease, fan)))
    if outcome.completed:
        return _unpack(name, outcome.value, return_exceptions)
    if outcome.suspended:
        runner.suspended()
        raise StepSuspension(name, None)
    members = outcome.members or ()
    failed = [m for m in members if m.state != "completed"]
    if failed and not return_exceptions:
        raise _failure(name, failed)
    recorded_value = {"results": [m.result for m in members],
                      "failed": [[m.index, m.id, m.state, m.error] for m in failed]}
    try:
        encoded = encode_payload(recorded_value, MAX_RESULT_BYTES)
    except PayloadTooLarge as exc:   # the children's results together, over a step's bound
        raise StepResultInvalid(f"step {name!r}: the results of its {len(members)} children cannot be "
                                f"recorded as one step result: {exc.args[0]}; nothing was recorded") from None
    yield runner.io(lambda: runner.fence.write(
        f"step {name!r}", lambda: store.fanin_complete(lease, name, runner.attempt, encoded)))
    stored = orjson.loads(encoded)
    runner.remember_map(name, stored)
    return _unpack(name, stored, return_exceptions)


def _failure(name: str, failed: Sequence[Member]) -> ChildFailed:
    shown = "; ".join(f"#{m.index} (job {m.id}) {m.state}: {m.error or 'no error recorded'}" for m in failed[:5])
    more = f" and {len(failed) - 5} more" if len(failed) > 5 else ""
    return ChildFailed(f"step {name!r}: {len(failed)} child job(s) did not complete: {shown}{more}",
                       tuple((m.index, m.id, m.state, m.error) for m in failed))


def _unpack(name: str, stored: Any, return_exceptions: bool) -> list[Any]:
    results = list(stored["results"])
    failed = [Member(int(i), int(j), s, e, None) for i, j, s, e in stored["failed"]]
    if failed and not return_exceptions:
        raise _failure(name, failed)
    for member in failed:
        results[member.index] = _failure(name, [member])
    return results


# -- batches: callers outside a job ---------------------------------------------------------------

def batch(job: object, inputs: Sequence[Any], *, on_complete: object,
          on_complete_input: Any = None, driver: JobDriver | None = None) -> BatchOpened:
    """Enqueue ``inputs`` as members of ``job`` and, once every member has settled (completed,
    dead or cancelled), run ``on_complete`` ONCE. Its input is ``{"input": on_complete_input,
    "batch_id", "completed", "dead", "cancelled", "completed_ids", "dead_ids", "cancelled_ids"}``.
    Members, callback and fan-in are written in one transaction."""
    handle = check_handle(job, "job")
    callback = check_handle(on_complete, "on_complete")
    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Sequence):
        raise InvalidOption("inputs", "must be a sequence of inputs")
    driver = driver if driver is not None else current_driver()
    store = store_of(driver)
    limit = current_settings().max_payload_bytes
    made = build_callback(callback, on_complete_input, key=f"batch-callback:{uuid.uuid4().hex}",
                          max_payload_bytes=limit)
    chunks = build_chunks(handle, inputs, max_payload_bytes=limit)
    return store.batch_open(NewBatch(total=len(inputs), chunks=chunks, callback=made))


__all__ = ["batch", "fan_plan", "check_handle", "check_options", "store_of", "ENQUEUE_OPTIONS"]
