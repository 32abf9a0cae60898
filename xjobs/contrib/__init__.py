"""Framework integrations: each sub-package adapts xjobs to one framework's own contract and
imports that framework only when it is itself imported.

``django``: a backend for Django's Tasks framework (``xjobs.contrib.django.XJobsBackend``),
and the app module ``xjobsd run --django SETTINGS`` imports in the daemon.
"""
