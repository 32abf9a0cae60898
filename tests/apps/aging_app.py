"""Two queues of short jobs, one that ages its waiting jobs' priorities and one that does not,
for the daemon's priority-aging test."""

import time

from xjobs import job


@job(queue="aging", idempotency_key=lambda i: str(i["n"]), tenant="none", aging="300ms")
def aging_work(ctx, input):
    time.sleep(0.01)


@job(queue="plain", idempotency_key=lambda i: str(i["n"]), tenant="none")
def plain_work(ctx, input):
    time.sleep(0.01)
