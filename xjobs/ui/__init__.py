"""The dashboard: server-rendered pages over the database, with operator actions.

    xjobsd run --app myapp.jobs --ui 127.0.0.1:8080 [--ui-actions]   served by the daemon (a ``ui`` child)
    xjobsd ui --dsn ... --listen 127.0.0.1:8080 [--actions]          alone, for a machine with no workers

Rooms: ``listen.py`` (what ``xjobsd run`` needs before it forks: the socket, the ``ui`` role's
policy, stats record and build; no web imports), ``serve.py`` (the child and the foreground
server), ``app.py`` (routes and actions), ``params.py`` (a request's filters, ids and cursors),
``api.py`` (each page's data as JSON under ``/api/``), ``pages.py`` (what each page reads), ``auth.py``
(token, sessions, CSRF), ``charts.py`` (the SVG chart), ``templates/`` and ``static/`` (shipped
in the wheel: no CDN, no build step). Needs the ``ui`` extra: ``pip install 'xjobsd[ui]'``.
The dashboard imports neither ``supervisor/`` nor ``cli/``: it asks a running daemon through
``xjobs/control_client.py``, and shares the operator's verbs (``admin.py``) and formatting
(``formatting.py``) with the command line.
"""
