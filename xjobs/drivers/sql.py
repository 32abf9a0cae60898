"""Loads ``queries.sql`` and ``migrations/``: all of the Postgres driver's SQL, in one place.

``queries.sql`` holds named blocks (``-- name: job_claim_one``); ``statements(schema,
server_clock)`` renders them for one schema and one notion of now. The schema name is checked
as a plain lower-case identifier before it is ever placed in SQL, so it cannot carry quoting
or a second statement.

``migrations/`` holds the schema as numbered files, ``0001_initial.sql`` onwards: a fresh
install runs them all, an upgrade the ones after the installed version (``pg_install`` runs
them). Each file opens with a header line saying whether the code of the version before it
still runs on the schema it leaves (``-- compatible-with-previous: yes``), which is what
makes a rolling deploy safe; ``serves_from`` turns those into the oldest code version a
schema still serves.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from ..errors import InvalidOption

_HERE = Path(__file__).parent

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,39}$")
_BLOCK = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def check_schema_name(schema: object) -> str:
    if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema):
        raise InvalidOption("schema", f"must match [a-z_][a-z0-9_]* (at most 40 characters), got {schema!r}")
    return schema


def notify_channel(schema: str) -> str:
    return f"xjobs_{schema}"


def cancel_channel(schema: str) -> str:
    """Where cancels of running jobs are told to the workers holding them (``pg_listen.py``)."""
    return f"{notify_channel(schema)}_cancel"


def settled_channel(schema: str) -> str:
    """Where waiters on results hear of jobs that completed, died or were cancelled."""
    return f"{notify_channel(schema)}_settled"


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


# -- the schema's migrations ----------------------------------------------------------------------

_MIGRATIONS = _HERE / "migrations"
_MIGRATION_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_COMPATIBLE = re.compile(r"^-- compatible-with-previous: (yes|no)\b", re.MULTILINE)
_PLACEHOLDER = re.compile(r"\{[a-z_]+\}")


@dataclass(frozen=True)
class Migration:
    """One file of ``migrations/``: its number, its name and its text as shipped."""

    version: int
    name: str
    text: str
    compatible_with_previous: bool   # the code of version - 1 runs on the schema this leaves

    @classmethod
    def parse(cls, filename: str, text: str) -> "Migration":
        match = _MIGRATION_FILE.match(filename)
        if match is None:
            raise ValueError(f"migration {filename!r}: not named NNNN_name.sql")
        header = "\n".join(_leading_comments(text))
        declared = _COMPATIBLE.findall(header)
        if len(declared) != 1:
            raise ValueError(f"migration {filename}: its opening comments must say once "
                             f"'-- compatible-with-previous: yes' (or no)")
        leftover = set(_PLACEHOLDER.findall(text)) - {"{schema}", "{channel}"}
        if leftover:
            raise ValueError(f"migration {filename}: unknown placeholder(s) {sorted(leftover)}")
        return cls(int(match.group(1)), match.group(2), text, declared[0] == "yes")

    @property
    def label(self) -> str:
        """``0008_job_rates``: how logs, ``xjobsd migrate`` and the file name call it."""
        return f"{self.version:04d}_{self.name}"

    @property
    def checksum(self) -> str:
        """sha256 of the file as shipped: what the ledger records, so an edit shows."""
        return hashlib.sha256(self.text.encode()).hexdigest()

    def sql(self, schema: str) -> str:
        schema = check_schema_name(schema)
        return self.text.replace("{schema}", schema).replace("{channel}", notify_channel(schema))


def _leading_comments(text: str) -> list[str]:
    lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line)
    return lines


@lru_cache(maxsize=1)
def migrations() -> tuple[Migration, ...]:
    """Every shipped migration, in order; refused unless numbered 1, 2, 3 ... without a gap
    (a file that does not fit the pattern is refused too, rather than silently skipped)."""
    found = []
    for path in sorted(_MIGRATIONS.iterdir()):
        if path.suffix == ".sql":
            # bytes, decoded: no newline translation, so the checksum is sha256sum's
            found.append(Migration.parse(path.name, path.read_bytes().decode("utf-8")))
    check_sequence(found)
    return tuple(found)


def check_sequence(found: Sequence[Migration]) -> None:
    numbers = [m.version for m in found]
    if numbers != list(range(1, len(found) + 1)):
        raise ValueError(f"migrations must be numbered 1..N without gaps, found {numbers}")


def serves_from(plan: Sequence[Migration], version: int) -> int:
    """The oldest code version the schema at ``version`` serves: every migration after it
    declares that the code of the version before it keeps working."""
    oldest = version
    while oldest > 1 and plan[oldest - 1].compatible_with_previous:
        oldest -= 1
    return oldest


# The newest migration: an installed schema at this version (or a newer one that still serves
# it) is left alone, so a booting daemon takes no lock at all. Counted from the file names,
# so a new migration file is all it takes.
SCHEMA_VERSION = sum(1 for p in _MIGRATIONS.iterdir() if _MIGRATION_FILE.match(p.name))
