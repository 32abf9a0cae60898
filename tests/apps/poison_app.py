"""Jobs for the crash-quarantine tests: a harmless job and a poison one that kills its process.

``harmless`` records its start (``daemon_app.record``) and takes a few milliseconds, so it is
usually running beside other jobs; ``poison`` records its start and ends its worker process
at once, as a segfault in a C extension or the OOM killer would.
"""

from __future__ import annotations

import os
import time

from xjobs import Retry, job

from .daemon_app import record

_THREE = Retry(attempts=3, delay="10ms", max_delay="50ms", jitter=False)


@job(queue="poison", idempotency_key=lambda i: f"h:{i['n']}", tenant="none", retry=_THREE)
def harmless(ctx, input):
    record(ctx, "harmless")
    time.sleep(input.get("ms", 20) / 1000.0)


@job(queue="poison", idempotency_key=lambda i: f"p:{i['n']}", tenant="none", retry=_THREE)
def poison(ctx, input):
    record(ctx, "poison")
    os._exit(int(input.get("code", 3)))
