"""A minimal Django project whose tasks run on xjobs.

The database is PostgreSQL at ``DATABASE_URL`` (default: the local server's ``postgres``
database). The queue lives in the same database, in the schema ``xjobs``: a task enqueued
inside ``transaction.atomic()`` commits or rolls back with the view's own writes.
"""

import os

from psycopg.conninfo import conninfo_to_dict

_DB = conninfo_to_dict(os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"))

SECRET_KEY = "example-only-not-secret"
DEBUG = True
USE_TZ = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = ["shop"]
ROOT_URLCONF = "mysite.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {"default": {
    "ENGINE": "django.db.backends.postgresql",
    "NAME": _DB.get("dbname", "postgres"), "USER": _DB.get("user", "postgres"),
    "PASSWORD": _DB.get("password", ""), "HOST": _DB.get("host", "127.0.0.1"), "PORT": _DB.get("port", "5432"),
}}

# every task of the project is an xjobs job, run by `xjobsd run --django mysite.settings`
TASKS = {"default": {
    "BACKEND": "xjobs.contrib.django.XJobsBackend",
    "QUEUES": ["default", "emails"],
    "OPTIONS": {"retry": {"attempts": 3, "delay": "2s"}, "timeout": "1m"},
}}
