"""Workflows for the daemon tests: a parent that maps over many children, a three-level tree
that suspends at its leaves, and a batch with failing members. Each child body records every
EXECUTION in ``<schema>.effects`` (``record``), so "every child body ran at least once" and
"one child row per input" are questions for SQL."""

from __future__ import annotations

import random
import time

from xjobs import Retry, Terminal, job

from .daemon_app import record

# many attempts: a SIGKILL of a process running a job alone charges it an attempt
MANY = Retry(attempts=50, delay=0, jitter=False)


@job(queue="kids", idempotency_key=lambda i: f"kid:{i['x']}", tenant="none", retry=MANY)
def triple(ctx, input):
    record(ctx, "kid")
    time.sleep(random.uniform(0.001, 0.01))   # a kill lands inside a body now and then
    return input["x"] * 3


@job(queue="parents", idempotency_key=lambda i: f"fan:{i['n']}", tenant="none", retry=MANY)
def fan_parent(ctx, input):
    results = ctx.step.map("triples", triple, [{"x": x} for x in range(input["n"])])
    in_order = results == [x * 3 for x in range(input["n"])]
    ctx.step.run("resumed", lambda: record(ctx, "parent:in-order" if in_order else "parent:out-of-order"))
    return len(results)


@job(queue="kids", idempotency_key=lambda i: f"leaf:{i['x']}", tenant="none")
def tree_leaf(ctx, input):
    record(ctx, "leaf")
    ctx.step.sleep("a long time", "1h")


@job(queue="kids", idempotency_key=lambda i: f"mid:{i['x']}", tenant="none")
def tree_mid(ctx, input):
    ctx.step.map("leaves", tree_leaf, [{"x": input["x"] * 10 + k} for k in range(3)])


@job(queue="parents", idempotency_key=lambda i: "root", tenant="none")
def tree_root(ctx, input):
    ctx.step.map("mids", tree_mid, [{"x": x} for x in range(3)])


@job(queue="kids", idempotency_key=lambda i: f"member:{i['x']}", tenant="none", retry=Retry(attempts=1))
def batch_member(ctx, input):
    if input["x"] % 50 == 0:
        raise Terminal(f"member {input['x']} fails")


@job(queue="parents", idempotency_key=lambda i: "batch-done", tenant="none")
def batch_done(ctx, input):
    record(ctx, f"batch:{input['completed']}/{input['dead']}/{input['cancelled']}")
