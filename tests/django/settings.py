"""The Django project of the tests: one app (``shop``), the queue and the Django tables in one
schema of the test database, both named by the environment (``conftest.py`` sets it for the
tests in this process, the daemon test for ``xjobsd run --django tests.django.settings``)."""

import os

from psycopg.conninfo import conninfo_to_dict

_DSN = os.environ["XJOBS_TEST_DJANGO_DSN"]
_SCHEMA = os.environ["XJOBS_TEST_DJANGO_SCHEMA"]
_WHERE = conninfo_to_dict(_DSN)

SECRET_KEY = "tests-only"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]
INSTALLED_APPS = ["django.contrib.contenttypes", "tests.django.shop"]
ROOT_URLCONF = "tests.django.shop.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {"default": {
    "ENGINE": "django.db.backends.postgresql",
    "NAME": _WHERE.get("dbname", "postgres"), "USER": _WHERE.get("user", "postgres"),
    "PASSWORD": _WHERE.get("password", ""), "HOST": _WHERE.get("host", "127.0.0.1"),
    "PORT": _WHERE.get("port", "5432"),
    # the app's tables beside the queue's, in the test's own schema
    "OPTIONS": {"options": f"-c search_path={_SCHEMA}"},
}}
TASKS = {"default": {
    "BACKEND": "xjobs.contrib.django.XJobsBackend",
    "QUEUES": ["default", "emails"],
    "OPTIONS": {"schema": _SCHEMA, "retry": {"attempts": 1}},
}, "retrying": {
    "BACKEND": "xjobs.contrib.django.XJobsBackend",
    "OPTIONS": {"schema": _SCHEMA, "retry": {"attempts": 2, "delay": "1h", "max_delay": "1h", "jitter": False}, "timeout": "30s"},
}}
