"""Every refusal of the command line in one voice: ``xjobsd: X_CODE: message (hint: ...)`` on
one line, exit 2, whether the schema is missing or argparse could not read the words; and a
verb on one job says what it did in one line."""

from __future__ import annotations

import getpass
import re

import psycopg
import pytest

from tests.cli.commands import as_json

pytestmark = pytest.mark.postgres
APP = "tests.apps.cli_app"
ONE_REFUSAL = re.compile(r"xjobsd: (X_[A-Z_]+): (.+?)(?: \(hint: (.+)\))?")


def refused(proc) -> tuple[str, str, str | None]:
    """The code, message and hint (if any) of a refusal printed as one line, and nothing else."""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    said = ONE_REFUSAL.fullmatch(lines[0])
    assert said, lines[0]
    return said.group(1), said.group(2), said.group(3)


def schema_exists(dsn: str, schema: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("select count(*) from pg_namespace where nspname = %s", (schema,)).fetchone()
        return bool(row and row[0])


def test_an_enqueue_on_a_missing_schema_is_refused_and_installs_nothing(xjobsd, pg_dsn, pg_schema):
    proc = xjobsd("enqueue", "greet", "--app", APP, "--input", '{"user": 1, "org": "acme"}', expect=2)
    code, message, hint = refused(proc)
    assert (code, message) == ("X_SCHEMA_MISSING", f"schema {pg_schema!r} is not installed on this database")
    assert hint is not None and hint.startswith("`xjobsd migrate` installs it")
    assert not schema_exists(pg_dsn, pg_schema)   # nothing was created behind the user's back


@pytest.mark.parametrize("args", [
    ["jobs", "ls"], ["jobs", "show", "1"], ["jobs", "stats"], ["jobs", "dead"], ["jobs", "cancel", "1"],
    ["jobs", "retry", "1"], ["queues", "ls"], ["queues", "pause", "mail", "--force"],
    ["tasks", "ls", "--app", "tests.apps.coord_app"],
])
def test_every_read_on_a_missing_schema_prints_the_one_coded_line(xjobsd, pg_schema, args):
    proc = xjobsd(*args, expect=2)
    code, message, _ = refused(proc)
    assert code == "X_SCHEMA_MISSING" and pg_schema in message
    assert "relation" not in proc.stderr and "does not exist" not in proc.stderr


@pytest.mark.parametrize("args,code,message", [
    # written with a space, a negative value is read as the flag's value and judged as one
    (["enqueue", "greet", "--app", APP, "--input", "{}", "--delay", "-5s"], "X_INVALID_OPTION",
     "delay: negative durations are refused, got '-5s'"),
    (["enqueue", "greet", "--app", APP, "--input", "{}", "--delay=-5s"], "X_INVALID_OPTION",
     "delay: negative durations are refused, got '-5s'"),
    (["status", "--wait", "-5s"], "X_INVALID_OPTION", "wait: negative durations are refused, got '-5s'"),
    (["jobs", "show", "abc"], "X_INVALID_OPTION", "id: must be a whole number, got 'abc'"),
    (["jobs", "ls", "--state", "bogus"], "X_INVALID_OPTION",
     "state: must be one of ready, running, suspended, completed, dead, cancelled, got 'bogus'"),
    (["jobs", "ls", "--state", "ded"], "X_INVALID_OPTION",
     "state: must be one of ready, running, suspended, completed, dead, cancelled, got 'ded' (did you mean dead?)"),
    (["jobs", "ls", "--limt", "3"], "X_USAGE", "jobs ls: unknown flag --limt (did you mean --limit?)"),
    (["jobs", "ls", "--frob"], "X_USAGE", "jobs ls: unknown flag --frob"),
    (["jobs", "ls", "--limit", "-1"], "X_INVALID_OPTION", "limit: must be at least 0"),
    (["jobs"], "X_USAGE", "jobs: give a verb: ls, show, cancel, retry, dead, stats"),
    (["jbos"], "X_USAGE", "no command 'jbos' (did you mean jobs?); the commands are run, status, drain, "
                          "reload, scale, migrate, enqueue, jobs, queues, tasks, manifest, tick, ui, backfill, mcp"),
    (["enqueue", "greet", "--app", APP], "X_USAGE", "enqueue: missing --input"),
    (["migrate", "--status", "--dry-run"], "X_USAGE", "migrate: --dry-run: not allowed with argument --status"),
])
def test_what_argparse_refuses_is_one_coded_line_with_a_hint(xjobsd, args, code, message):
    xjobsd("migrate")
    said = refused(xjobsd(*args, expect=2))
    assert said[:2] == (code, message)
    if not {"-1", "-5s", "--delay=-5s"} & set(args):   # the handler's own refusals need no hint
        assert re.fullmatch(r"`xjobsd[a-z ]* --help` (says what it takes|lists its flags)", said[2] or ""), said


def test_help_still_prints_the_usage(xjobsd):
    proc = xjobsd("jobs", "show", "--help")
    assert proc.stdout.startswith("usage: xjobsd jobs show") and proc.stderr == ""


def test_an_unknown_job_says_where_it_was_looked_for(xjobsd):
    xjobsd("migrate")
    _, message, hint = refused(xjobsd("enqueue", "gret", "--app", APP, "--input", "{}", expect=2))
    assert message == "no job named 'gret' is registered (did you mean greet?)"
    assert hint is not None and hint.startswith(f"{APP} declares greet; pass --app MODULE")
    _, _, hint = refused(xjobsd("enqueue", "greet", "--input", "{}", expect=2))
    assert hint is not None and hint.startswith("no app was given, configured or found: pass --app MODULE")


def test_retry_and_cancel_of_one_job_say_what_changed_in_one_line(xjobsd):
    xjobsd("migrate")
    job = as_json(xjobsd("enqueue", "greet", "--app", APP, "--json", "--input", '{"user": 1, "org": "acme"}'))["id"]
    by = f"cli:{getpass.getuser()}"
    assert xjobsd("jobs", "cancel", str(job), "--reason", "not today").stdout == \
        f"job {job}: ready -> cancelled (cancelled by {by}: not today)\n"
    assert xjobsd("jobs", "retry", str(job)).stdout == f"job {job}: cancelled -> ready (retried by {by})\n"
    record = as_json(xjobsd("jobs", "cancel", str(job), "--json"))    # --json: the record, whole
    assert (record["id"], record["state"]) == (job, "cancelled") and len(record["history"]) == 4   # enqueued, cancelled, requeued, cancelled
