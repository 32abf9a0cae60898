"""The jobs the daemon benchmarks run.

``noop`` (queue ``bench``) does nothing: a drain of it measures the queue, not a body.
``ping`` (queue ``idle``) reports when its body started: it sends its input and the system's
monotonic clock (one clock for every process on the machine) as a datagram to the socket
named by ``XJOBS_BENCH_PING``, so the benchmark can time enqueue-to-start without the body
writing to the database it measures.
"""

from __future__ import annotations

import os
import socket
import time

from xjobs import job

_sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)


@job(queue="bench", idempotency_key=lambda i: str(i), tenant="none")
def noop(ctx, input):  # noqa: ARG001
    return None


@job(queue="idle", idempotency_key=lambda i: str(i), tenant="none")
def ping(ctx, input):  # noqa: ARG001
    started = time.monotonic()
    _sock.sendto(f"{input} {started!r}".encode(), os.environ["XJOBS_BENCH_PING"])


@job(queue="nap", idempotency_key=lambda i: str(i), tenant="none")
def nap(ctx, input):
    """Takes ``input["s"]`` seconds, or stops at its signal: crash recovery's workload."""
    if ctx.signal.wait(float(input["s"])):
        ctx.signal.raise_if_set()
