"""Jobs whose declarations ``jobs show`` reads to say why they wait: a debounced one (a long
debounce, so it is still waiting when the command runs) and one allowed three snoozes."""

from xjobs import job


@job(queue="waits", idempotency_key=lambda i: f"doc:{i['doc']}", tenant="none", debounce="1h",
     debounce_max="1d")
def settle_doc(ctx, input):
    return None


@job(queue="waits", idempotency_key=lambda i: f"nap:{i['n']}", tenant="none", max_snoozes=3)
def light_sleeper(ctx, input):
    return ctx.snooze("1h")
