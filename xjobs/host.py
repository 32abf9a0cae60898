"""Run a queue worker inside your own process, without ``xjobsd``: the public names of the
in-process host and of the role it hosts.

``InProcessHost`` loops one role on a thread of this process and stops it through the same
phases a daemon's child goes through (stop taking work, let what runs finish or tell it to
stop, hand back, close). ``QueueWorker`` is the role a daemon's worker children run: it claims
jobs of its queues, runs them, renews their leases and settles them::

    from xjobs import REGISTRY, current_driver
    from xjobs.host import InProcessHost, QueueWorker

    host = InProcessHost(QueueWorker(driver=current_driver(), registry=REGISTRY,
                                     queue="emails", concurrency=16)).start()
    ...
    host.stop()                                # waits for running jobs; aborts nothing
    host.stop(deadline_s=25, interrupt=True)   # a drain: tell them to stop, hand back the rest

A worker hosted here also does the upkeep a daemon leaves to its scheduler's leader (rescuing
lapsed leases, waking due sleepers, pruning old rows); cron tasks and scans need a scheduler,
so ``xjobsd run`` or ``xjobsd tick`` runs those.

These names live here rather than in ``xjobs`` itself because ``xjobs`` is the API every
process imports (the one that only enqueues too), and the worker and its collaborators are
imported only by a process that runs jobs.
"""

from __future__ import annotations

from .workers.host import InProcessHost
from .workers.queue_worker import QueueWorker

__all__ = ["InProcessHost", "QueueWorker"]
