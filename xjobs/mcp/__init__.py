"""``xjobsd mcp``: the fleet's read verbs (and, when allowed, four writes) as Model Context
Protocol tools, for an assistant or an agent to call over stdio.

Rooms: ``tools.py`` (the tools, one method each over the operator's functions in ``admin.py``
and the control socket's client, answering what ``--json`` prints; no SDK import) and
``server.py`` (those methods as tools of the official SDK's server, refusals as coded tool
errors). Needs the ``mcp`` extra: ``pip install 'xjobsd[mcp]'``. Like the dashboard, this
room imports neither ``supervisor/`` nor ``cli/``; ``cli/mcp.py`` builds it.
"""
