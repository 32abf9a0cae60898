"""The schema's history and its catalog, for the migration tests.

``HISTORY`` is every schema file xjobs ever shipped before migrations, copied under
``tests/schema_history/`` byte for byte from the commit that shipped it, with how that
release rendered it and what it wrote as its version. ``install_release`` runs one as its code
did. ``catalog`` reads what a schema is, from the system catalog, with the schema's own name
written ``{schema}`` so two schemas compare.

``tests/schema_history/released.sha256`` (``sha256sum`` format) holds the checksum of every
released migration and ``catalog.json`` the catalog a fresh install produces. After adding a
migration, record both (an already recorded checksum is never rewritten)::

    python -m tests.migration_fixtures record
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from xjobs.drivers.sql import migrations

HERE = Path(__file__).resolve().parent
HISTORY_DIR = HERE / "schema_history"
CHECKSUMS = HISTORY_DIR / "released.sha256"
SNAPSHOT = HISTORY_DIR / "catalog.json"
MIGRATE_LOCK = 0x786A6F6273   # the advisory lock every release took around its install


@dataclass(frozen=True)
class Release:
    commit: str
    version: int        # what it wrote to meta.schema_version
    versioned: bool     # its sql.py rendered {version} (152fd8f on); before, the file said '1'
    note: str

    @property
    def path(self) -> Path:
        return HISTORY_DIR / f"{self.commit}.sql"

    def ddl(self, schema: str) -> str:
        """The file rendered as this release's ``sql.schema_ddl`` rendered it."""
        text = self.path.read_text().replace("{schema}", schema).replace("{channel}", f"xjobs_{schema}")
        if self.versioned:
            text = text.replace("{version}", str(self.version))
        assert "{" not in text, f"{self.commit}: a placeholder its release did not render"
        return text


HISTORY = (
    Release("a3592a1", 1, False, "before versions: uuid claim tokens, a running-by-worker index"),
    Release("3f9b059", 1, False, "before versions: no job_history.seq"),
    Release("d461a34", 1, False, "before versions: the running-by-worker index, no jobs_dead_idx"),
    Release("9c90c3b", 1, False, "before versions: no jobs_dead_idx"),
    Release("45a44fd", 1, False, "before versions: version 1's tables"),
    Release("152fd8f", 1, True, "version 1"),
    Release("d2c8da2", 2, True, "the first version 2: no crashed_workers"),
    Release("71af453", 2, True, "version 2"),
    Release("ff05d03", 3, True, "version 3"),
    Release("7693b2d", 4, True, "the first version 4: events_lookup_idx without sent_at"),
    Release("32d904b", 4, True, "version 4"),
    Release("465dfd6", 5, True, "version 5"),
    Release("1ce3a3c", 6, True, "version 6"),
    Release("92af4db", 7, True, "version 7"),
    Release("c9057f4", 8, True, "the first version 8: job_rates keyed by queue first"),
    Release("571889a", 8, True, "version 8, the last schema file before migrations"),
)


def install_release(conn: psycopg.Connection, release: Release, schema: str) -> None:
    """As that release's ``migrate`` did: its whole file in one transaction, under the lock."""
    with conn.transaction():
        conn.execute("select pg_advisory_xact_lock(%s)", (MIGRATE_LOCK,))
        conn.execute(release.ddl(schema))


# -- the catalog -------------------------------------------------------------------------------

_NS = "(select oid from pg_namespace where nspname = %(schema)s)"
_QUERIES = {
    # every relation: tables, indexes, sequences; storage parameters (fillfactor) and grants
    "relations": f"""select c.relname, c.relkind::text, c.relpersistence::text,
                            coalesce(c.reloptions, '{{}}')::text, coalesce(c.relacl::text, '')
                     from pg_class c where c.relnamespace = {_NS} order by 1""",
    # columns in their order, as a table's row has them
    "columns": f"""select c.relname, row_number() over (partition by c.oid order by a.attnum)::int,
                          a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                          coalesce(pg_get_expr(d.adbin, d.adrelid), ''), a.attidentity::text,
                          a.attgenerated::text, coalesce(co.collname, '')
                   from pg_attribute a join pg_class c on c.oid = a.attrelid
                   left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
                   left join pg_collation co on co.oid = a.attcollation
                   where c.relnamespace = {_NS} and c.relkind in ('r', 'p', 'v', 'm', 'f')
                     and a.attnum > 0 and not a.attisdropped
                   order by 1, 2""",
    "sequences": f"""select c.relname, format_type(s.seqtypid, null), s.seqstart, s.seqincrement,
                            s.seqmax, s.seqmin, s.seqcache, s.seqcycle
                     from pg_sequence s join pg_class c on c.oid = s.seqrelid
                     where c.relnamespace = {_NS} order by 1""",
    "indexes": f"""select c.relname, pg_get_indexdef(i.indexrelid), i.indisvalid, i.indisclustered
                   from pg_index i join pg_class c on c.oid = i.indexrelid
                   where c.relnamespace = {_NS} order by 1""",
    # not-null constraints (PostgreSQL 18 lists them here) are the columns' attnotnull above
    "constraints": f"""select t.relname, k.conname, k.contype::text, pg_get_constraintdef(k.oid),
                              k.condeferrable, k.condeferred, k.convalidated
                       from pg_constraint k join pg_class t on t.oid = k.conrelid
                       where k.connamespace = {_NS} and k.contype <> 'n' order by 1, 2""",
    "functions": f"""select p.proname, pg_get_function_identity_arguments(p.oid), pg_get_functiondef(p.oid)
                     from pg_proc p where p.pronamespace = {_NS} order by 1, 2""",
    "triggers": f"""select c.relname, t.tgname, pg_get_triggerdef(t.oid), t.tgenabled::text
                    from pg_trigger t join pg_class c on c.oid = t.tgrelid
                    where c.relnamespace = {_NS} and not t.tgisinternal order by 1, 2""",
    "comments": f"""select c.relname, d.objsubid, d.description
                    from pg_description d join pg_class c on c.oid = d.objoid
                    where d.classoid = 'pg_class'::regclass and c.relnamespace = {_NS} order by 1, 2""",
}


def catalog(conn: psycopg.Connection, schema: str) -> dict[str, list[list[Any]]]:
    """What ``schema`` is, section by section, plus the contents of ``meta`` and the ledger's
    versions and names (their checksums and times differ by when and how they were applied)."""
    out: dict[str, list[list[Any]]] = {}
    for section, query in _QUERIES.items():
        rows = conn.execute(query, {"schema": schema}).fetchall()
        out[section] = [[_normal(v, schema) for v in row] for row in rows]
    out["meta"] = [list(r) for r in conn.execute(f"select key, value from {schema}.meta order by 1")]
    ledger = conn.execute("select to_regclass(%s) is not null", (f"{schema}.migrations",)).fetchone()
    out["ledger"] = ([list(r) for r in conn.execute(f"select version, name from {schema}.migrations order by 1")]
                     if ledger and ledger[0] else [])
    return out


def _normal(value: Any, schema: str) -> Any:
    return value.replace(schema, "{schema}") if isinstance(value, str) else value


def catalog_diff(expected: dict[str, list], actual: dict[str, list]) -> list[str]:
    """One line per row found in only one of the two, named by section: empty when equal."""
    lines = []
    for section in sorted(set(expected) | set(actual)):
        want = [json.dumps(r) for r in expected.get(section, [])]
        got = [json.dumps(r) for r in actual.get(section, [])]
        differ = ([f"{section}: missing {r}" for r in want if r not in got]
                  + [f"{section}: unexpected {r}" for r in got if r not in want])
        if not differ and want != got:
            differ = [f"{section}: the same rows in another order: {got}"]
        lines += differ
    return lines


# -- the recorded checksums and snapshot -------------------------------------------------------


def recorded_checksums() -> dict[str, str]:
    """file name -> sha256, as ``sha256sum`` writes them."""
    found = {}
    for line in CHECKSUMS.read_text().splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            found[name.lstrip("*")] = digest
    return found


def record(dsn: str) -> None:
    """Add the checksum of every migration not yet recorded, and write the catalog of a fresh
    install; refuse to rewrite a recorded checksum (a released migration never changes)."""
    recorded = recorded_checksums() if CHECKSUMS.exists() else {}
    lines = []
    for migration in migrations():
        name = f"{migration.label}.sql"
        if name in recorded and recorded[name] != migration.checksum:
            raise SystemExit(f"{name} was changed after it was released: put it back and add a new "
                             f"migration instead")
        lines.append(f"{migration.checksum}  {name}")
    CHECKSUMS.write_text("\n".join(lines) + "\n")
    from xjobs.drivers.postgres import PostgresDriver
    schema = "t_snapshot_" + os.urandom(4).hex()
    driver = PostgresDriver(dsn, schema=schema)
    try:
        driver.migrate()
        with psycopg.connect(dsn, autocommit=True) as conn:
            found = catalog(conn, schema)
            server = conn.info.server_version // 10000
            conn.execute(f"drop schema {schema} cascade")
    finally:
        driver.close()
    # a row a line: a change to the schema reads as a change of a few lines
    sections = ",\n".join(f" {json.dumps(name)}: [\n" + ",\n".join(f"  {json.dumps(row)}" for row in rows) + "\n ]"
                          for name, rows in found.items())
    SNAPSHOT.write_text(f'{{"version": {len(migrations())}, "postgres": {server}, "catalog": {{\n'
                        f'{sections}\n}}}}\n')


if __name__ == "__main__":
    if sys.argv[1:] != ["record"]:
        raise SystemExit("usage: python -m tests.migration_fixtures record")
    record(os.environ.get("XJOBS_TEST_DSN") or "postgresql://postgres@127.0.0.1:5432/postgres")
