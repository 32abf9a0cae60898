"""An app for the command-line tests."""

from xjobs import Retry, job


@job(queue="mail", idempotency_key=lambda i: f"greet:{i['user']}", tenant=lambda i: i["org"],
     retry=Retry(attempts=3))
def greet(ctx, input):
    return None
