"""Loads ``queries.sql`` and ``schema.sql``: all of the Postgres driver's SQL, in one place.

``queries.sql`` holds named blocks (``-- name: job_claim_one``); ``statements(schema)`` renders
them for one schema. The schema name is checked as a plain lower-case identifier before it
is ever placed in SQL, so it cannot carry quoting or a second statement.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from ..errors import InvalidOption

_HERE = Path(__file__).parent

# What schema.sql installs. Bump it with every change to schema.sql: an installed schema at
# this version (or a newer one) is left alone, so a booting daemon takes no lock at all.
SCHEMA_VERSION = 1
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
    return _parse((_HERE / "queries.sql").read_text())


@lru_cache(maxsize=32)
def statements(schema: str) -> dict[str, str]:
    schema = check_schema_name(schema)
    return {name: sql.replace("{schema}", schema) for name, sql in raw_statements().items()}


def schema_ddl(schema: str) -> str:
    schema = check_schema_name(schema)
    text = (_HERE / "schema.sql").read_text()
    return (text.replace("{schema}", schema).replace("{channel}", notify_channel(schema))
            .replace("{version}", str(SCHEMA_VERSION)))
