"""A small example application: two queues, a retrying job, a long one, an async one and a
durable workflow with steps.

    xjobsd run --app examples.app
    xjobsd enqueue welcome --app examples.app --input '{"user_id": 1, "org_id": "acme"}'
    xjobsd enqueue onboard --app examples.app --input '{"user_id": 1, "org_id": "acme"}'
"""

from __future__ import annotations

import random
import time

from xjobs import Retry, RetryAfter, job


@job(queue="emails", idempotency_key=lambda i: f"welcome:{i['user_id']}",
     tenant=lambda i: i["org_id"], retry=Retry(attempts=5, delay="2s", max_delay="1m"),
     timeout="30s")
def welcome(ctx, input):
    """Pretend to send an email; a flaky provider fails now and then and asks us to wait."""
    if random.random() < 0.1:
        raise RetryAfter(5, "provider rate-limited us")
    ctx.log.info("sent welcome email to user %s", input["user_id"])


@job(queue="default", idempotency_key=lambda i: f"report:{i['report_id']}", tenant="none",
     timeout="5m")
def build_report(ctx, input):
    """A long job that stops early when the worker drains (SIGTERM) and resumes elsewhere."""
    for _ in range(input.get("seconds", 3) * 10):
        if ctx.signal.wait(0.1):
            ctx.signal.raise_if_set()
    ctx.log.info("report %s built", input["report_id"])


@job(queue="default", idempotency_key=lambda i: f"tick:{i['n']}", tenant="none")
async def tick(ctx, input):
    """An async body: runs on the worker's event loop instead of a thread."""
    ctx.log.info("tick %s at %.3f", input["n"], time.time())


@job(queue="default", idempotency_key=lambda i: f"onboard:{i['user_id']}", tenant=lambda i: i["org_id"],
     step_timeout="10s")
def onboard(ctx, input):
    """A durable workflow: each step runs once per job, the sleep holds no worker, and the
    wait ends when ``xjobs.send_event("trial.converted", key=str(user_id), ...)`` is sent."""
    account = ctx.step.run("create account", lambda: {"user": input["user_id"], "plan": "trial"})
    ctx.step.sleep("let them look around", "5s")
    converted = ctx.step.wait_for_event("converted", "trial.converted", key=str(input["user_id"]),
                                        timeout="30s")
    ctx.log.info("user %s %s", account["user"], "converted" if converted else "did not convert yet")
