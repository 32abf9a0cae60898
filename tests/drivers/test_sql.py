"""The SQL itself: every statement of ``queries.sql`` prepares against a real Postgres in both
renderings of now (the server's clock, an injected one), the
schema installs idempotently (also from two installers at once), and no production file
reads or returns a whole row (``select *`` / ``returning *``). Also what only the Postgres
driver has: its connections, pools and installer.
"""

from __future__ import annotations

import io
import math
import re
import threading
import tokenize
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import dict_row, namedtuple_row
from psycopg_pool import PoolTimeout

import xjobs
from xjobs.drivers.base import Claim, Enqueued, Lease, ListFilter, NewJob
from xjobs.drivers.postgres import PostgresDriver
from xjobs.drivers.sql import SCHEMA_VERSION, migrations, raw_statements, statements
from xjobs.errors import DatabaseUnavailable, InvalidOption, MigrationBlocked, MigrationPrivilegeMissing

from tests.fixtures import drop_schema, new_schema_name

PLACEHOLDER = re.compile(r"%\((\w+)\)[sbt]")

# Each parameter name means one thing in every statement: its type here, and a value of the
# Python type the driver binds. A new parameter name must be added to both.
PARAMS: dict[str, tuple[str, object]] = {
    "now": ("float8", 1.8e12),
    "rows": ("text", '[{"n": "send", "q": "default", "p": {"a": 1}, "k": "k", "t": null, '
                     '"e": "cli", "pr": 0, "m": 3, "r": 1.8e12, "d": 0.0, "w": null, '
                     '"id": 1, "token": 42}, '
                     '{"n": "send", "q": "default", "p": {}, "k": "j", "t": "t", '
                     '"e": null, "pr": 0, "m": 3, "r": null, "d": 1500.0, "w": 60000.0}]'),
    "keys": ("text", '[{"n": "send", "t": "", "k": "k"}]'),
    "count": ("int4", 3),
    "idle": ("text[]", ["acme"]),
    "turns": ("int8", 14),
    "most": ("int8", 10_000),
    "weights": ("text", '[{"k": "acme", "w": 2.0}]'),
    "queues": ("text[]", ["default"]),
    "skip": ("text[]", ["acme"]),
    "held": ("text", '[{"t": "acme", "n": 1}]'),
    "tenant_cap": ("int4", 2),
    "channel": ("text", "xjobs_tests"),
    "queue": ("text", "default"),
    "limit": ("int8", 10),
    "token": ("int8", 42),
    "worker": ("text", "w1"),
    "lease": ("float8", 30_000.0),
    "ids": ("text", "{1,2}"),
    "tokens": ("text", "{42,43}"),
    "results": ("text[]", ['{"total": 3}', None]),
    "settled": ("text", "xjobs_tests_settled"),
    "notes": ("text[]", ["1,2"]),
    "id": ("int8", 1),
    "dead": ("bool", False),
    "park": ("bool", False),
    "counts": ("bool", True),
    "crashed": ("bool", True),
    "charge": ("text", "alone"),
    "how": ("text", "killed by SIGKILL"),
    "wait": ("float8", 0.0),
    "paused": ("bool", True),
    "by": ("text", "operator"),
    "states": ("text[]", ["dead"]),
    "tenant": ("text", None),
    "since": ("float8", None),
    "until": ("float8", None),
    "before": ("int8", None),
    "after": ("int8", 0),
    "started_before": ("float8", None),
    "holder": ("text", "daemon-1"),
    "election": ("text", "scheduler"),
    "task": ("text", "nightly"),
    "watermark": ("int8", 1_800_000_000_000),
    "expected": ("int8", None),
    "dispatched": ("int8", 1),
    "job_ids": ("text", "{7,8}"),
    "retention": ("float8", 86_400_000.0),
    "job": ("text", "capped"),
    "cap": ("int4", 3),
    "slot": ("int4", 0),
    "caps": ("text", '[{"n": "capped", "c": 3}]'),
    "upto": ("int8", 100),
    "since_ago": ("float8", None),
    "until_ago": ("float8", None),
    "delay": ("float8", 0.0),
    "error": ("text", "boom"),
    "job_id": ("int8", 1),
    "swept": ("int8", 10),
    "checksum": ("text", "c0ffee"),
    "environment": ("text", "production"),
    "outcome": ("text", "retried"),
    "traceback": ("text", None),
    "completed_for": ("float8", 86_400_000.0),
    "finished_for": ("float8", 86_400_000.0),
    "state": ("text", None),
    "name": ("text", "order.paid"),
    "reason": ("text", "cancelled"),
    "named": ("int4", 200),
    "holder_bytes": ("int4", 1000),
    "application_name": ("text", "xjobs-tests"),
    "kind": ("text", "sleep"),
    "step_state": ("text", "sleeping"),
    "run_tenant": ("text", "acme"),
    "names": ("text[]", None),
    "cross": ("text", "off"),
    "attempt": ("int4", 1),
    "result": ("text", "{}"),
    "duration": ("float8", 5.0),
    "wake_in": ("float8", 1000.0),
    "wake": ("float8", 1_800_000_000_000.0),
    "poll": ("float8", None),
    "timed_out": ("bool", False),
    "event": ("text", None),
    "key": ("text", "o-1"),
    "payload": ("text", "{}"),
    "width": ("int4", 200),
    "error_group": ("text", None),
    "total": ("int4", 3),
    "waiter": ("int8", 1),
    "prefix": ("text", "child:1:fan:"),
    "parent": ("int8", None),
    "fanin": ("int8", 1),
    "step": ("text", "fan"),
    "rates": ("text", '[{"q": "default", "o": "completed", "c": 3}]'),
    "age": ("float8", 60_000.0),
    "push": ("int4", 10_000),
    "floor": ("int8", 0),
    "step_us": ("int8", 60_000_000),
}


def _positional(sql: str) -> tuple[str, list[str]]:
    """``%(name)s`` placeholders as ``$1..$n`` in order of first use, and those names."""
    order: list[str] = []

    def number(match: re.Match) -> str:
        if match.group(1) not in order:
            order.append(match.group(1))
        return f"${order.index(match.group(1)) + 1}"
    return PLACEHOLDER.sub(number, sql), order


CLOCKS = pytest.mark.parametrize("server_clock", [True, False], ids=["server-clock", "injected-clock"])
COPIES = sorted(n for n, sql in raw_statements().items() if sql.lower().startswith("copy "))  # test_enqueue_chunks
PREPARED = sorted(raw_statements().keys() - set(COPIES))


@CLOCKS
def test_every_parameter_has_a_declared_type(server_clock):
    used = {name for sql in statements("xjobs", server_clock).values() for name in PLACEHOLDER.findall(sql)}
    assert used - PARAMS.keys() == set(), "declare the new parameters in PARAMS"


def test_now_is_always_the_placeholder():
    """A statement spelling its own now would escape the server clock in production."""
    for name, sql in raw_statements().items():
        assert "%(now)s" not in sql and "now()" not in sql.lower() and "current_timestamp" not in sql.lower(), name
    for name, sql in statements("xjobs", True).items():
        assert "%(now)s" not in sql and "{" not in sql, name
    stamped = [n for n, sql in statements("xjobs", False).items() if "%(now)s" in sql]
    assert "job_claim_one" in stamped and "queue_summary" in stamped


@pytest.mark.postgres
@CLOCKS
@pytest.mark.parametrize("name", PREPARED)
def test_statement_prepares(pg_driver, name, server_clock):
    text, order = _positional(statements(pg_driver.schema, server_clock)[name])
    types = ", ".join(PARAMS[p][0] for p in order)
    with pg_driver.connect() as conn:
        conn.execute(f"prepare stmt ({types}) as {text}" if order else f"prepare stmt as {text}")
        declared = conn.execute("select parameter_types::text[] from pg_prepared_statements"
                                " where name = 'stmt'").fetchone()[0]
    assert len(declared) == len(order)


@pytest.mark.postgres
@CLOCKS
@pytest.mark.parametrize("name", PREPARED)
def test_statement_runs_as_the_driver_binds_it(pg_driver, name, server_clock):
    """The driver's own path: psycopg placeholders, Python values, a server-side prepare."""
    sql = statements(pg_driver.schema, server_clock)[name]
    params = {p: PARAMS[p][1] for p in PLACEHOLDER.findall(sql)}
    with pg_driver.connect() as conn:  # autocommit: transaction() below is a real BEGIN
        with conn.transaction(force_rollback=True):
            conn.execute(sql, params, prepare=True).fetchall()
            prepared = conn.execute("select count(*) from pg_prepared_statements").fetchone()[0]
    assert prepared >= 1


# -- the schema install ------------------------------------------------------------------------


def _catalog(conn: psycopg.Connection, schema: str) -> tuple:
    columns = conn.execute(
        "select table_name, column_name, data_type, is_nullable, column_default, is_identity"
        " from information_schema.columns where table_schema = %s order by 1, 2", (schema,)).fetchall()
    indexes = conn.execute("select indexname, indexdef from pg_indexes where schemaname = %s order by 1",
                           (schema,)).fetchall()
    triggers = conn.execute(
        "select tgname from pg_trigger t join pg_class c on c.oid = t.tgrelid"
        " join pg_namespace n on n.oid = c.relnamespace where n.nspname = %s and not t.tgisinternal"
        " order by 1", (schema,)).fetchall()
    return columns, indexes, triggers


@pytest.mark.postgres
def test_migrate_again_changes_nothing_and_keeps_the_rows(pg_driver):
    pg_driver.job_enqueue([NewJob(name="send", queue="default", payload=b'{"a":1}', idempotency_key="k")])
    with pg_driver.connect() as conn:
        before = _catalog(conn, pg_driver.schema)
        pg_driver.migrate()
        pg_driver.migrate()
        assert _catalog(conn, pg_driver.schema) == before
        version = conn.execute(f"select value from {pg_driver.schema}.meta where key = 'schema_version'").fetchone()
    assert version == (str(SCHEMA_VERSION),)
    assert [v.idempotency_key for v in pg_driver.job_list(ListFilter())] == ["k"]


@pytest.mark.postgres
def test_the_jobs_table_leaves_room_on_each_page_for_a_rows_next_version(pg_driver):
    with pg_driver.connect() as conn:
        options = conn.execute("select reloptions from pg_class where oid = %s::regclass",
                               (f"{pg_driver.schema}.jobs",)).fetchone()
    assert options == (["fillfactor=85"],)


@pytest.mark.postgres
def test_two_installers_at_once_both_succeed(pg_dsn):
    schema = new_schema_name()
    barrier = threading.Barrier(2, timeout=30)
    errors: list[BaseException] = []

    def install() -> None:
        driver = PostgresDriver(pg_dsn, schema=schema)
        try:
            barrier.wait()
            driver.migrate()
        except BaseException as exc:  # reported below, on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=install) for _ in range(2)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert errors == []
        with psycopg.connect(pg_dsn) as conn:
            columns, indexes, triggers = _catalog(conn, schema)
        assert {"jobs", "job_history", "meta"} <= {c[0] for c in columns}
        assert triggers == [("jobs_fair_insert",), ("jobs_fair_ready",), ("jobs_fanin_settle",),
                            ("jobs_key_keep_waiting",), ("jobs_key_settle_delete",),
                            ("jobs_key_settle_insert",), ("jobs_key_settle_update",), ("jobs_key_wait_insert",),
                            ("jobs_key_wait_update",),
                            ("jobs_notify_ready",), ("outbox_notify",)]
    finally:
        drop_schema(pg_dsn, schema)


def _set_version(conn: psycopg.Connection, schema: str, version: int, compatible_from: int | None = None) -> None:
    conn.execute(f"update {schema}.meta set value = %s where key = 'schema_version'", (str(version),))
    if compatible_from is not None:
        conn.execute(f"update {schema}.meta set value = %s where key = 'compatible_from'", (str(compatible_from),))


def _meta(conn: psycopg.Connection, schema: str) -> dict[str, str]:
    return dict(conn.execute(f"select key, value from {schema}.meta").fetchall())


@pytest.mark.postgres
def test_migrate_at_the_current_version_takes_no_table_lock(pg_driver, pg_dsn, monkeypatch):
    """Every daemon migrates at boot; against a current schema that must not queue behind (and
    then in front of) an application transaction that has written to the jobs table."""
    monkeypatch.setenv("PGOPTIONS", "-c lock_timeout=2s")  # a lock wait fails instead of hanging
    with psycopg.connect(pg_dsn) as app:
        pg_driver.job_enqueue([NewJob(name="n", queue="q", payload=b"{}", idempotency_key="k")], conn=app)
        assert pg_driver.migrate() == []
        # a newer xjobs upgraded it and says it still serves this version: left alone too
        _set_version(app, pg_driver.schema, SCHEMA_VERSION + 1, compatible_from=SCHEMA_VERSION)
        app.commit()
        pg_driver.job_enqueue([NewJob(name="n", queue="q", payload=b"{}", idempotency_key="j")], conn=app)
        assert pg_driver.migrate() == []
        app.rollback()
    with pg_driver.connect() as conn:
        assert _meta(conn, pg_driver.schema)["schema_version"] == str(SCHEMA_VERSION + 1)


@pytest.mark.postgres
def test_an_older_schema_is_upgraded_and_gives_up_on_a_held_table(pg_driver, pg_dsn):
    """Migration 6 alters jobs (add column if not exists locks the table even where the column
    is there): it waits for an application transaction that wrote to the table only as long as
    lock_timeout, then gives up, leaving the schema where it was."""
    with pg_driver.connect() as conn:
        _set_version(conn, pg_driver.schema, 5)
    with psycopg.connect(pg_dsn) as app:
        pg_driver.job_enqueue([NewJob(name="n", queue="q", payload=b"{}", idempotency_key="k")], conn=app)
        with pytest.raises(MigrationBlocked, match="migration 0006_traceparent .* stays at version 5") as err:
            pg_driver.migrate(lock_timeout_ms=50)
        assert isinstance(err.value.__cause__, psycopg.errors.LockNotAvailable)
        with pg_driver.connect() as conn:
            assert _meta(conn, pg_driver.schema)["schema_version"] == "5"
        app.rollback()
    assert pg_driver.migrate() == [m.label for m in migrations()[5:]]
    with pg_driver.connect() as conn:
        assert _meta(conn, pg_driver.schema)["schema_version"] == str(SCHEMA_VERSION)


@pytest.mark.postgres
def test_a_role_without_ddl_rights_is_told_which_migration_it_may_not_run(pg_driver, pg_dsn):
    """A runtime role (rows only) booting or migrating an older schema gets the privilege named,
    not a bare database error, and the schema stays where it was."""
    role = f"{pg_driver.schema}_rows"
    with pg_driver.connect() as conn:
        _set_version(conn, pg_driver.schema, 8)
        conn.execute(f"drop role if exists {role}")
        conn.execute(f"create role {role} login")
        conn.execute(f"grant usage on schema {pg_driver.schema} to {role}")
        conn.execute(f"grant select, insert, update, delete on all tables in schema {pg_driver.schema} to {role}")
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, user=role)
    runtime = PostgresDriver(dsn, schema=pg_driver.schema)
    try:
        with pytest.raises(MigrationPrivilegeMissing, match=f"migration 0009_.* role '{role}' lacks "
                                                            r"\(must be owner of table jobs\).* stays at version 8") as err:
            runtime.migrate()
        assert err.value.code == "X_MIGRATION_PRIVILEGE"
    finally:
        runtime.close()
        with pg_driver.connect() as conn:
            assert _meta(conn, pg_driver.schema)["schema_version"] == "8"
            conn.execute(f"drop owned by {role}")
            conn.execute(f"drop role {role}")
    assert pg_driver.migrate() == [m.label for m in migrations()[8:]]


@pytest.mark.parametrize("timeout", [0, -1, math.nan, math.inf])
def test_migrate_refuses_a_bad_lock_timeout(timeout):
    with pytest.raises(InvalidOption):
        PostgresDriver("postgresql://nowhere.invalid/x").migrate(lock_timeout_ms=timeout)


# -- no whole rows -----------------------------------------------------------------------------


WHOLE_ROW = re.compile(r"\b(select|returning)\s+(distinct\s+)?(\w+\.)?\*", re.IGNORECASE)
PACKAGE = Path(xjobs.__file__).parent


def _without_comments(path: Path) -> str:
    text = path.read_text()
    if path.suffix == ".sql":
        return re.sub(r"--[^\n]*", "", text)
    try:
        tokens = tokenize.generate_tokens(io.StringIO(text).readline)
        return " ".join(tok.string for tok in tokens if tok.type != tokenize.COMMENT)
    except (tokenize.TokenError, SyntaxError):
        return text  # unparseable: scan it whole rather than not at all


def test_the_whole_row_pattern():
    for bad in ["select * from t", "SELECT  j.* from t j", "update t set a = 1 returning *",
                "select distinct * from t", "returning\n    x.*"]:
        assert WHOLE_ROW.search(bad), bad
    for good in ["select count(*) from t", "select id, name from t", "returning id", "a * b"]:
        assert not WHOLE_ROW.search(good), good


def test_no_production_file_reads_or_returns_a_whole_row():
    files = sorted(p for p in PACKAGE.rglob("*") if p.suffix in (".py", ".sql"))
    assert any(p.name == "queries.sql" for p in files)
    offenders = [f"{p.relative_to(PACKAGE.parent)}: {m.group(0)!r}"
                 for p in files for m in WHOLE_ROW.finditer(_without_comments(p))]
    assert offenders == []


# -- the Postgres driver's connections ---------------------------------------------------------


@pytest.mark.postgres
def test_every_connection_gives_up_on_a_dead_server(pg_driver):
    """connect_timeout and TCP keepalives on the dedicated, the pooled and the body's connections."""
    wanted = {"connect_timeout": "10", "keepalives": "1", "keepalives_idle": "10",
              "keepalives_interval": "5", "keepalives_count": "3"}
    with pg_driver.connect() as dedicated:
        seen = [dedicated.info.get_parameters()]
    with pg_driver.database.connection() as pooled:
        seen.append(pooled.info.get_parameters())
    pg_driver.job_enqueue([NewJob(name="n", queue="q", payload=b"{}", idempotency_key="k")])
    [job] = pg_driver.job_claim(Claim(["q"], 1, 30_000, "w"))
    with pg_driver.job_transaction(Lease(job.id, job.token)) as body:
        seen.append(body.info.get_parameters())
    for params in seen:
        assert {k: params.get(k) for k in wanted} == wanted
        assert params["application_name"] == "xjobs-tests"


@pytest.mark.postgres
def test_a_verb_waits_for_a_pooled_connection_at_most_pool_timeout(pg_dsn, pg_schema):
    driver = PostgresDriver(pg_dsn, schema=pg_schema, pool_size=1, pool_timeout=0.2)
    try:
        driver.migrate()
        with driver.database.connection():       # the only connection is busy
            with pytest.raises(DatabaseUnavailable) as err:
                driver.job_stats()
            assert isinstance(err.value.__cause__, PoolTimeout)
        assert driver.job_stats() == {}
    finally:
        driver.close()


@pytest.mark.parametrize("option, value", [
    ("pool_size", 0), ("pool_size", 2.5), ("pool_size", math.nan), ("pool_size", True),
    ("pool_size", "4"), ("step_pool_size", 0), ("step_pool_size", 1.5), ("step_pool_size", math.nan),
    ("transaction_pool_size", 0), ("transaction_pool_size", 1.5),
    ("transaction_pool_size", math.inf), ("pool_timeout", 0), ("pool_timeout", -1.0), ("pool_timeout", math.nan),
    ("pool_timeout", math.inf), ("pool_timeout", "30")])
def test_the_postgres_driver_refuses_bad_pool_options(option, value):
    with pytest.raises(InvalidOption) as err:
        PostgresDriver("postgresql://nowhere.invalid/x", **{option: value})
    assert err.value.option == option


@pytest.mark.postgres
def test_body_transactions_never_take_the_verbs_connections(pg_dsn, pg_schema, clock):
    """A body holds its transaction as long as it runs; the claim, heartbeat and ack that keep
    its lease alive must still get a connection."""
    driver = PostgresDriver(pg_dsn, schema=pg_schema, clock=clock, pool_size=1,
                            transaction_pool_size=2, pool_timeout=2.0)
    try:
        driver.migrate()
        driver.job_enqueue([NewJob(name="n", queue="q", payload=b"{}", idempotency_key=k)
                            for k in "abc"])
        a, b = driver.job_claim(Claim(["q"], 2, 30_000, "w"))
        with driver.job_transaction(Lease(a.id, a.token)), driver.job_transaction(Lease(b.id, b.token)):
            assert driver.job_renew_many([Lease(a.id, a.token), Lease(b.id, b.token)],
                                             30_000) == {a.id, b.id}
            [c] = driver.job_claim(Claim(["q"], 1, 30_000, "w"))
            assert driver.job_ack(c.id, c.token)
        assert driver.job_stats() == {"q": {"completed": 3}}
    finally:
        driver.close()


@pytest.mark.postgres
@pytest.mark.parametrize("factory", [dict_row, namedtuple_row])
def test_enqueue_joins_an_application_connection_whatever_its_row_factory(pg_driver, pg_dsn, factory):
    jobs = [NewJob(name="n", queue="q", payload=b"{}", idempotency_key=k) for k in "aab"]
    with psycopg.connect(pg_dsn, row_factory=factory) as app:
        assert pg_driver.job_enqueue(jobs, conn=app) == [Enqueued(1, False), Enqueued(1, True),
                                                         Enqueued(3, False)]
        # a live duplicate found by the second statement of the enqueue
        assert pg_driver.job_enqueue(jobs[:1], conn=app) == [Enqueued(1, True)]
        assert app.execute("select 1 as one").fetchone() in ({"one": 1}, (1,))
    assert pg_driver.job_stats() == {"q": {"ready": 2}}


def test_every_statement_names_its_verb_for_pg_stat_activity():
    for name, sql in statements("xjobs", True).items():
        assert sql.startswith(f"/* xjobs:{name} */ "), name


@pytest.mark.postgres
def test_a_running_statement_is_attributed_in_pg_stat_activity(pg_driver):
    import threading
    seen: list = []
    with pg_driver.connect() as observer, pg_driver.connect() as blocker:
        blocker.execute("begin")
        blocker.execute(f"lock table {pg_driver.schema}.jobs in access exclusive mode")
        claim = threading.Thread(target=lambda: pg_driver.job_claim(Claim(["q"], 1, 1000, "w")), daemon=True)
        claim.start()
        for _ in range(200):
            # this test's schema only: the server runs other tests' (and other suites') claims too
            rows = observer.execute("select query from pg_stat_activity where query like '/* xjobs:job_claim%%' "
                                    "and pid <> pg_backend_pid() and strpos(query, %s) > 0",
                                    (f" {pg_driver.schema}.jobs",)).fetchall()
            if rows:
                seen = rows
                break
            threading.Event().wait(0.02)
        blocker.execute("rollback")
        claim.join(10)
    assert seen and seen[0][0].startswith("/* xjobs:job_claim_one */")
