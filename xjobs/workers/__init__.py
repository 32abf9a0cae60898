"""The roles a child process runs, and their collaborators: everything that runs inside
``xjobsd``'s children, or in this process under a host (``tick.py``, ``testing.py``,
``host.py``). Nothing here imports ``supervisor/``, ``cli/`` or ``ui/``.

The contract: ``role`` (``Role``, ``RolePolicy``, ``RoleBase``), ``drive`` (the one loop every
host runs a role with), ``host`` (the phases every host drives a role through, and a host for
this process), ``telemetry`` (``RoleStats``: the
record a role reports in every heartbeat).

The roles, one module each: ``queue_worker`` (claims and runs jobs), ``scheduler`` (the
leader-elected cron dispatcher and the fleet's upkeep), ``outbox_relay`` (publishes staged
outbox rows). The dashboard's role lives with the dashboard (``ui/``).

The queue worker's collaborators: ``claiming`` (one queue's claim, in arrival order or shared
out by key), ``execute`` (the one execution path of a claimed job),
``verdict`` (what a finished run comes to), ``runs`` (the runs it holds), ``settle`` and ``settle_retry`` (what finished runs write, and
retrying those writes), ``leases`` (renewal, and deciding a lease is lost), ``admission`` and
``limiter`` (per-process limits and fleet-wide slots), ``rate_gate`` (fleet-wide rate limits
by key), ``quarantine`` (suspects of a crash run
alone), ``failures`` (how a failure is written down), ``rates`` (per-minute outcome counts),
``stats`` (its counters and its ``WorkerStats`` record), ``process_hooks`` (the app's
``on_worker_start``/``on_worker_stop`` hooks, run in the worker). The scheduler's: ``upkeep``
(rescue, wake, prune) and ``scanning`` (due scans).
"""
