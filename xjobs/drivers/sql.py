"""Loads ``queries.sql`` and ``schema.sql``: all of the Postgres driver's SQL, in one place.

``queries.sql`` holds named blocks (``-- name: job_claim_one``); ``statements(schema,
server_clock)`` renders them for one schema and one notion of now. The schema name is checked
as a plain lower-case identifier before it is ever placed in SQL, so it cannot carry quoting
or a second statement.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from ..errors import InvalidOption

_HERE = Path(__file__).parent

# What schema.sql installs. Bump it with every change to schema.sql: an installed schema at
# this version (or a newer one) is left alone, so a booting daemon takes no lock at all.
SCHEMA_VERSION = 8
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,39}$")
_BLOCK = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def check_schema_name(schema: object) -> str:
    if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema):
        raise InvalidOption("schema", f"must match [a-z_][a-z0-9_]* (at most 40 characters), got {schema!r}")
    return schema


def notify_channel(schema: str) -> str:
    return f"xjobs_{schema}"


def _parse(text: str) -> dict[str, str]:
    parts = _BLOCK.split(text)
    blocks: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        lines = [ln for ln in body.strip().splitlines() if not ln.lstrip().startswith("--")]
        blocks[name] = "\n".join(lines).strip()
    return blocks


@lru_cache(maxsize=1)
def raw_statements() -> dict[str, str]:
    """Every statement of queries.sql, with the fragments it names (blocks whose name starts
    with ``_``, written ``{_name}`` where they go) put in place."""
    blocks = _parse((_HERE / "queries.sql").read_text())
    fragments = {name: sql for name, sql in blocks.items() if name.startswith("_")}
    statements = {}
    for name, sql in blocks.items():
        if name.startswith("_"):
            continue
        for fragment, text in fragments.items():
            sql = sql.replace("{" + fragment + "}", text)
        statements[name] = sql
    return statements


# The two renderings of {now}. The server's: every worker, whatever its own clock says, takes
# leases and due times from the one clock they are compared on. statement_timestamp() rather
# than now(): a statement inside a long application transaction is stamped when it runs.
SERVER_NOW = "statement_timestamp()"
# An injected clock's (tests step time by hand): epoch milliseconds bound as %(now)s.
CLIENT_NOW = "to_timestamp(%(now)s / 1000.0)"


@lru_cache(maxsize=64)
def statements(schema: str, server_clock: bool) -> dict[str, str]:
    """Each statement rendered, and named in a leading comment (``/* xjobs:job_claim_one */``)
    so ``pg_stat_activity`` and ``pg_stat_statements`` say which verb a query is."""
    schema = check_schema_name(schema)
    now = SERVER_NOW if server_clock else CLIENT_NOW
    return {name: f"/* xjobs:{name} */ " + sql.replace("{schema}", schema).replace("{now}", now)
            for name, sql in raw_statements().items()}


def schema_ddl(schema: str) -> str:
    schema = check_schema_name(schema)
    text = (_HERE / "schema.sql").read_text()
    return (text.replace("{schema}", schema).replace("{channel}", notify_channel(schema))
            .replace("{version}", str(SCHEMA_VERSION)))
