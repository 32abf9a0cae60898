"""The parent process of ``xjobsd``: a pre-fork supervisor hosting child roles over pipes.

Modules, one concern each: ``arbiter`` (the selector loop, signals, drain, reload, scale),
``slots`` (what is supervised), ``child`` (the host loop inside a child), ``framing`` (the
pipe protocol), ``backoff`` (restart delays), ``probe`` (the supervisor's only database
work), ``tally`` (counters that survive restarts), ``report`` (status and snapshots),
``metrics`` (HTTP /metrics, /healthz, /readyz), ``control`` (the Unix control socket),
``notify`` (sd_notify), ``roles`` (configuration to role specs), ``embedded`` (pgserver).
"""
