"""The parent process of ``xjobsd``: a pre-fork supervisor hosting child roles over pipes. It
imports ``workers/`` (the roles it hosts) and the public API, never ``cli/`` or ``ui/``; the
command line (``cli/run.py``) composes it.

Modules, one concern each:

* the loop: ``arbiter`` (the selector loop, the signals and the control commands),
  ``signals`` (self-pipes: signals recorded, wake-ups from threads), ``draining`` (the
  two-phase stop), ``reload`` and ``validate`` (a reload: read again, validate in a fresh
  process, replace), ``appcode`` (the app's code as the supervisor holds it), ``reshape``
  (which slots exist: a reload's plan, scale, SIGTTIN/SIGTTOU);
* the children: ``roles`` (configuration to role specs, the roles listed once), ``slots``
  (specs, slots, child processes), ``processes`` (the process table: spawn, replace, retire,
  reap, watch), ``spawn`` (the one ``fork``), ``backoff`` (restart delays, crash loops),
  ``child`` (the host loop inside a forked child), ``framing`` and ``messages`` (the pipe
  protocol and what each message must carry);
* what it says: ``tally`` (counters that survive restarts), ``report`` (status, the metrics
  snapshot, readiness), ``metrics`` and ``httpd`` (``/metrics``, ``/healthz``, ``/readyz``),
  ``exposition`` (the Prometheus text, imported at the first scrape), ``control`` (the control
  socket's server and what its commands carry), ``notify`` (sd_notify);
* its database work: ``probe`` (statistics rounds and hand-backs, in one thread), ``handback``
  (what a dead child's hand-back did, counted and logged).
"""
