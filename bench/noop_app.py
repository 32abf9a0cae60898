"""The jobs the daemon benchmarks run.

``noop`` (queue ``bench``) does nothing: a drain of it measures the queue, not a body.
``ping`` (queue ``idle``) reports when its body started: it sends its input and the system's
monotonic clock (one clock for every process on the machine) as a datagram to the socket
named by ``BENCH_PING_SOCKET``, so the benchmark can time enqueue-to-start without the body
writing to the database it measures. ``stoppable`` (queue ``stop``) reports its start the same
way, then waits on its stop signal and reports when it saw it (``N:stop``): cancel-to-signal.

With ``BENCH_PICKUP_STAGES`` set when the daemon imports this app, its queue workers stamp each
ping on its way (the pass that heard it, its claim sent and answered, its run handed to the
executor) and ``ping`` sends the stamps with its start (``bench/pickup.py --stages``).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
import time
from typing import Any, Iterator

from xjobs import job

_sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)


@job(queue="bench", idempotency_key=lambda i: str(i), tenant="none")
def noop(ctx, input):  # noqa: ARG001
    return None


@job(queue="idle", idempotency_key=lambda i: str(i), tenant="none")
def ping(ctx, input):  # noqa: ARG001
    started = time.monotonic()
    stamps = json.dumps(_STAMPS.pop(ctx.job_id, {}), separators=(",", ":"))
    _sock.sendto(f"{input} {started!r} {stamps}".encode(), os.environ["BENCH_PING_SOCKET"])


@job(queue="stop", idempotency_key=lambda i: str(i), tenant="none")
def stoppable(ctx, input):
    _sock.sendto(f"{input} {time.monotonic()!r}".encode(), os.environ["BENCH_PING_SOCKET"])
    if ctx.signal.wait(300):
        _sock.sendto(f"{input}:stop {time.monotonic()!r}".encode(), os.environ["BENCH_PING_SOCKET"])


@contextlib.contextmanager
def pings() -> Iterator[socket.socket]:
    """The socket ``ping`` bodies report to, named in ``BENCH_PING_SOCKET`` for the daemons
    this process starts from now on."""
    with tempfile.TemporaryDirectory(prefix="xjobs-ping-") as tmp:
        path = os.path.join(tmp, "ping")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.bind(path)
            sock.settimeout(10)
            os.environ["BENCH_PING_SOCKET"] = path
            yield sock
        finally:
            sock.close()


def started(sock: socket.socket, n: int | str) -> float:
    """When the body of ping ``n`` began (the monotonic clock), skipping older pings; or, for
    ``"N:stop"``, when the body of ``stoppable`` N saw its stop signal."""
    return started_with_stamps(sock, n)[0]


def started_with_stamps(sock: socket.socket, n: int | str) -> tuple[float, dict[str, float]]:
    """``started``, and the stamps the daemon's worker put on ping ``n`` (none without
    ``BENCH_PICKUP_STAGES``)."""
    while True:
        got, at, *rest = sock.recv(2000).decode().split(maxsplit=2)
        if got == str(n):
            return float(at), json.loads(rest[0]) if rest else {}


# -- the stamps of bench/pickup.py --stages, put on in the daemon ---------------------------------

_STAMPS: dict[int, dict[str, float]] = {}


def _stamp_the_workers() -> None:
    """Wrap the queue worker's pass, its claim and its hand-off so each stamps the pings."""
    from xjobs.workers.claiming import Claimer
    from xjobs.workers.execute import Executor
    from xjobs.workers.queue_worker import QueueWorker

    pass_at = [0.0]
    run_once, claim, submit_many = QueueWorker.run_once, Claimer.claim, Executor.submit_many

    def stamped_run_once(self: Any, now_ms: float) -> float:
        pass_at[0] = time.monotonic()
        return run_once(self, now_ms)

    def stamped_claim(self: Any, *args: Any, **kwargs: Any) -> Any:
        sent = time.monotonic()
        jobs = claim(self, *args, **kwargs)
        claimed = time.monotonic()
        for job in jobs:
            if job.name == "ping":
                _STAMPS[job.id] = {"pass": pass_at[0], "claim_sent": sent, "claimed": claimed}
        return jobs

    def stamped_submit_many(self: Any, runs: Any) -> None:
        handed = time.monotonic()
        for run in runs:
            if run.job.id in _STAMPS:
                _STAMPS[run.job.id]["handed"] = handed
        submit_many(self, runs)

    QueueWorker.run_once = stamped_run_once       # type: ignore[method-assign]
    Claimer.claim = stamped_claim                 # type: ignore[method-assign]
    Executor.submit_many = stamped_submit_many    # type: ignore[method-assign]


if os.environ.get("BENCH_PICKUP_STAGES"):
    _stamp_the_workers()


@job(queue="nap", idempotency_key=lambda i: str(i), tenant="none")
def nap(ctx, input):
    """Takes ``input["s"]`` seconds, or stops at its signal: crash recovery's workload."""
    if ctx.signal.wait(float(input["s"])):
        ctx.signal.raise_if_set()


@job(queue="answer", idempotency_key=lambda i: str(i["n"]), tenant="none")
def answer(ctx, input):
    """Returns a small result after ``input["ms"]`` ms (so the waiter is listening by then), and
    reports the monotonic clock just before it returns: completion-to-``result()``."""
    time.sleep(input["ms"] / 1000.0)
    _sock.sendto(f"{input['n']} {time.monotonic()!r}".encode(), os.environ["BENCH_PING_SOCKET"])
    return {"n": input["n"], "ok": True}


@job(queue="fan", idempotency_key=lambda i: f"fan:{i['round']}", tenant="none")
def fan_out(ctx, input):
    """A parent of ``input["n"]`` no-op children (``bench/children.py``): one map, one wake."""
    return len(ctx.step.map("children", noop, [input["round"] * 1_000_000 + k for k in range(input["n"])]))


# fair_claims.py: the same 1-ms body in a queue claimed by tenant and in one claimed in arrival order
@job(queue="fair", idempotency_key=lambda i: f"{i['t']}:{i['n']}", tenant=lambda i: i["t"], fairness="tenant")
def ms_fair(ctx, input):  # noqa: ARG001
    time.sleep(0.001)


@job(queue="fifo", idempotency_key=lambda i: f"{i['t']}:{i['n']}", tenant=lambda i: i["t"])
def ms_fifo(ctx, input):  # noqa: ARG001
    time.sleep(0.001)


@job(queue="steps", idempotency_key=lambda i: str(i), tenant="none")
def three_steps(ctx, input):  # noqa: ARG001
    """Three ``ctx.step.run`` of nothing (``bench/steps.py``): what a step costs beside a job."""
    for n in range(3):
        ctx.step.run(f"s{n}", lambda: n)
