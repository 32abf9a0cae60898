"""Where the queue lives and the settings every process shares, each declared once.

A setting is one field of ``Settings`` declared with ``setting()``: the name users write it
under (the key of ``xjobs.toml``, and the option a refusal names), its kind (what values it
takes, its range and unit: ``setting_kinds.py``), its default, its ``XJOBS_*`` variable, the
flag that sets it (if a command takes one: ``cli/setting_flags.py``) and its help. Reading the
environment and the files, the refusals, the flags and the table of settings of
docs/guides/configuration.md all come from these declarations.

Precedence: explicit arguments (flags) > ``XJOBS_*`` environment > ``xjobs.toml`` or
``[tool.xjobs]`` in ``pyproject.toml`` > defaults. Each value is refused where it is read,
with a coded error naming the setting, so a bad one stops the process at start.
"""

from __future__ import annotations

import copy
import difflib
import logging
import os
import re
import threading
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Mapping, TypeVar

from .drivers.sql import check_schema_name
from .errors import InvalidOption, NotConfigured
from .payload import DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_MAX_RESULT_BYTES
from .setting_kinds import (MAX_PROCESSES, Count, Duration, Kind, Maybe, Names, PerProcessLimits, Queues,
                            QueueSpec, Switch, Text)
from .limits import Limits

if TYPE_CHECKING:
    from .drivers.base import JobDriver

__all__ = ["MAX_PROCESSES", "QueueSpec", "SETTINGS", "Setting", "Settings", "configure", "current_driver",
           "current_settings", "find_setting", "load_settings", "swap_driver"]

T = TypeVar("T")


@dataclass(frozen=True)
class Setting(Generic[T]):
    key: str                    # as users write it: toml key, refusals, the docs
    kind: Kind[T]
    default: T
    env: str
    help: str
    flag: str | None = None     # the command-line flag (cli/setting_flags.py adds it)
    metavar: str | None = None  # what the flag's value is called, when its kind does not say
    flag_help: str | None = None   # when the flag says it otherwise (an inverted switch)
    aliases: tuple[str, ...] = ()  # other keys accepted for it (the field's own name always is)
    start_only: bool = False    # read once at start: a reload says it changed, it changes at the next start
    field: str = ""             # the ``Settings`` attribute holding it

    def check(self, value: object) -> T:
        return self.kind.check(value, self.key)

    def read(self, value: object) -> T:
        return self.kind.read(value, self.key)


def setting(key: str, kind: Kind[T], default: T, *, env: str, help: str, flag: str | None = None,
            metavar: str | None = None, flag_help: str | None = None, aliases: tuple[str, ...] = (),
            start_only: bool = False) -> T:
    """One field of ``Settings``, and everything about it (``Setting``) in its metadata."""
    metadata = {"setting": Setting(key, kind, default, env, help, flag, metavar, flag_help, aliases, start_only)}
    if isinstance(default, (dict, list)):   # a mutable default is made fresh for each Settings
        return field(default_factory=lambda: copy.copy(default), metadata=metadata)
    return field(default=default, metadata=metadata)


_HEADER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,63}")


def _header_name(value: str) -> None:
    if not _HEADER_NAME.fullmatch(value):
        raise InvalidOption("ui_trust_header", f"must be an HTTP header name like X-Forwarded-User, got {value!r}")


def _environment_name(value: str) -> None:
    if not value or value.strip() != value or len(value) > 64 or any(ord(ch) < 33 for ch in value):
        raise InvalidOption("environment", f"must be a short name without spaces, like production, got {value!r}")


log = logging.getLogger("xjobs.config")
_DAY_MS = 86_400_000.0


@dataclass(frozen=True)
class Settings:
    """Every setting, declared once. A ``Settings`` holds each value checked and normalised
    (``"30s"`` given anywhere is ``30000.0`` here), or is not made."""

    dsn: str | None = setting(
        "database_url", Maybe(Text()), None, aliases=("dsn",), env="XJOBS_DATABASE_URL", flag="--dsn",
        help="PostgreSQL URL (default: XJOBS_DATABASE_URL; none: embedded)")
    schema: str = setting(
        "schema", Text(check_schema_name), "xjobs", env="XJOBS_SCHEMA", flag="--schema",
        help="schema holding the queue tables (default: xjobs)")
    max_payload_bytes: int = setting(
        "max_payload_bytes", Count(minimum=64, maximum=256 * 1024 * 1024, unit="bytes"),
        DEFAULT_MAX_PAYLOAD_BYTES, env="XJOBS_MAX_PAYLOAD_BYTES",
        help="the largest job input enqueue accepts, encoded")
    max_result_bytes: int = setting(
        "max_result_bytes", Count(minimum=64, maximum=64 * 1024 * 1024, unit="bytes"),
        DEFAULT_MAX_RESULT_BYTES, env="XJOBS_MAX_RESULT_BYTES",
        help="the largest return value a job stores, encoded; a larger one fails the run")
    lease_ms: float = setting(
        "lease", Duration(minimum_ms=100), 30_000.0, env="XJOBS_LEASE",
        help="how long a claim holds a job without a heartbeat")
    heartbeat_ms: float = setting(
        "heartbeat", Duration(minimum_ms=10), 10_000.0, env="XJOBS_HEARTBEAT",
        help="how often a worker renews its leases; shorter than the lease")
    poll_ms: float = setting(
        "poll", Duration(minimum_ms=10), 1_000.0, env="XJOBS_POLL",
        help="how often an idle worker looks for jobs when no notification arrives")
    rescue_ms: float = setting(
        "rescue", Duration(minimum_ms=10), 5_000.0, env="XJOBS_RESCUE",
        help="how often lapsed leases and due suspensions are swept")
    retention_completed_ms: float = setting(
        "retention_completed", Duration(minimum_ms=0), _DAY_MS, env="XJOBS_RETENTION_COMPLETED",
        help="completed jobs are kept this long (and while their dedupe window lasts)")
    retention_finished_ms: float = setting(
        "retention_finished", Duration(minimum_ms=0), 14 * _DAY_MS, env="XJOBS_RETENTION_FINISHED",
        help="dead and cancelled jobs are kept this long")
    drain_deadline_ms: float = setting(
        "drain_deadline", Duration(minimum_ms=0), 25_000.0, env="XJOBS_DRAIN_DEADLINE", flag="--drain-deadline",
        help="how long a drain waits for running jobs (25s)")
    worker_stop_timeout_ms: float = setting(
        "worker_stop_timeout", Duration(minimum_ms=0), 5_000.0, env="XJOBS_WORKER_STOP_TIMEOUT",
        help="how long a worker's on_worker_stop hooks may take, all together, at its close (5s)")
    queues: Mapping[str, QueueSpec] = setting(
        "queues", Queues(), {}, env="XJOBS_QUEUES", flag="--queue", metavar="NAME=PROCSxCONC|NAME=N",
        help="a queue to serve: emails=2x16 (2 processes x 16 jobs), emails=64 (64 jobs at once, shape "
             "chosen) (repeatable; default: every queue at 1x16)")
    metrics: str | None = setting(
        "metrics", Maybe(Text()), "127.0.0.1:9464", env="XJOBS_METRICS", flag="--metrics", metavar="HOST:PORT",
        start_only=True, help="serve /metrics, /healthz, /readyz here (default 127.0.0.1:9464; 'off' disables)")
    control: str | None = setting(
        "control", Maybe(Text()), None, env="XJOBS_CONTROL", flag="--control", metavar="PATH", start_only=True,
        help="control socket (default $XDG_RUNTIME_DIR/xjobsd.sock or ./.xjobs/xjobsd.sock)")
    apps: tuple[str, ...] = setting(
        "apps", Names(), (), aliases=("app",), env="XJOBS_APP", flag="--app",
        help="module declaring jobs (repeatable)")
    django: str | None = setting(
        "django", Maybe(Text()), None, env="XJOBS_DJANGO", flag="--django", metavar="SETTINGS", start_only=True,
        help="a Django settings module (mysite.settings): the daemon sets Django up and runs the tasks of "
             "its Tasks framework (xjobs.contrib.django)")
    stats_interval_ms: float = setting(
        "stats_interval", Duration(minimum_ms=100), 5_000.0, env="XJOBS_STATS_INTERVAL", flag="--stats-interval",
        start_only=True, help="how often queue depth and age are read from the database (5s)")
    leader_lease_ms: float = setting(
        "leader_lease", Duration(minimum_ms=100), 15_000.0, env="XJOBS_LEADER_LEASE",
        help="the scheduler leader's lease; renewed every round")
    outbox_lease_ms: float = setting(
        "outbox_lease", Duration(minimum_ms=100), 30_000.0, env="XJOBS_OUTBOX_LEASE",
        help="an outbox claim held this long is free again")
    outbox_retention_ms: float = setting(
        "outbox_retention", Duration(minimum_ms=0), _DAY_MS, env="XJOBS_OUTBOX_RETENTION",
        help="published outbox rows are kept this long")
    wake_ms: float = setting(
        "wake", Duration(minimum_ms=10), 250.0, env="XJOBS_WAKE",
        help="how often due sleepers and timed-out waits are woken")
    event_retention_ms: float = setting(
        "event_retention", Duration(minimum_ms=0), 7 * _DAY_MS, env="XJOBS_EVENT_RETENTION",
        help="sent events are kept (and delivered) this long")
    limits: Limits = setting(
        "limits", PerProcessLimits(), Limits(), env="XJOBS_LIMITS",
        help="per worker process ceilings (global, queue, tenant, tenant_rate, tenant_rate_window, "
             "max_tenants), as NAME=VALUE pairs or an [xjobs.limits] table")
    recycle_after_jobs: int | None = setting(
        "recycle_after_jobs", Maybe(Count(minimum=1)), None, env="XJOBS_RECYCLE_AFTER_JOBS",
        flag="--recycle-after-jobs", start_only=True, help="replace a worker process after it has claimed N jobs")
    recycle_above_rss_mib: int | None = setting(
        "recycle_above_rss", Maybe(Count(minimum=16, unit="MiB")), None, env="XJOBS_RECYCLE_ABOVE_RSS",
        flag="--recycle-above-rss", start_only=True,
        help="replace a worker process whose resident memory exceeds this many MiB")
    ui: str | None = setting(
        "ui", Maybe(Text()), None, env="XJOBS_UI", flag="--ui", metavar="HOST:PORT", start_only=True,
        help="serve the dashboard here, from a child process (needs the ui extra; default off)")
    ui_actions: bool = setting(
        "ui_actions", Switch(), False, env="XJOBS_UI_ACTIONS", flag="--ui-actions",
        help="let the dashboard retry, cancel and pause, for who signs in with XJOBS_UI_TOKEN (or a "
             "trusted proxy's user); without it the dashboard is read-only")
    ui_trust_header: str | None = setting(
        "ui_trust_header", Maybe(Text(_header_name)), None, env="XJOBS_UI_TRUST_HEADER",
        flag="--ui-trust-header", metavar="NAME",
        help="a header set by a trusted reverse proxy naming the signed-in user (e.g. X-Forwarded-User); "
             "only behind a proxy that strips it from clients")
    migrate: bool = setting(
        "migrate", Switch(), True, env="XJOBS_MIGRATE", flag="--no-migrate",
        help="a daemon or tick upgrades an older schema at start; false refuses one (X_SCHEMA_OUTDATED), "
             "for fleets that run `xjobsd migrate` as a deploy step",
        flag_help="refuse an outdated schema instead of upgrading it, for fleets that run `xjobsd migrate` "
                  "as a deploy step (also XJOBS_MIGRATE=false, migrate = false)")
    environment: str | None = setting(
        "environment", Maybe(Text(_environment_name)), None, env="XJOBS_ENVIRONMENT",
        help="the name of this deployment (production, staging, ...), which a backfill's environments= "
             "is checked against; unset, a backfill declaring environments= is refused here")

    def __post_init__(self) -> None:
        for declared in SETTINGS:
            object.__setattr__(self, declared.field, declared.check(getattr(self, declared.field)))
        # a relation between two settings, checked once both are
        if self.heartbeat_ms >= self.lease_ms:
            raise InvalidOption("heartbeat", f"must be shorter than the lease ({self.lease_ms:g}ms), "
                                             f"got {self.heartbeat_ms:g}ms")

    def with_overrides(self, **values: Any) -> "Settings":
        return replace(self, **{k: v for k, v in values.items() if v is not None})


SETTINGS: tuple[Setting[Any], ...] = tuple(replace(f.metadata["setting"], field=f.name) for f in fields(Settings))
_BY_NAME: dict[str, Setting[Any]] = {name: s for s in SETTINGS for name in (s.key, s.field, *s.aliases)}


def find_setting(name: str) -> Setting[Any]:
    """The setting a key, alias or ``Settings`` field names (``lease``, ``lease_ms``)."""
    return _BY_NAME[name]


def _read(values: Mapping[str, Any], source: str) -> dict[str, Any]:
    """What one source says (``lease = "30s"``, ``database_url``), read and checked, by
    ``Settings`` field."""
    out: dict[str, Any] = {}
    for given, value in values.items():
        name = given.replace("-", "_").lower()
        if name not in _BY_NAME:
            raise InvalidOption(name, f"unknown setting in {source}")
        declared = _BY_NAME[name]
        out[declared.field] = declared.read(value)
    return out


def _file_values(config_path: str | None) -> tuple[dict[str, Any], str]:
    if config_path is not None:
        path = Path(config_path)
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise InvalidOption("config", f"no such file: {config_path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise InvalidOption("config", f"{config_path}: {exc}") from None
        return dict(data.get("xjobs", data)), str(path)
    if Path("xjobs.toml").exists():
        return _file_values("xjobs.toml")
    if Path("pyproject.toml").exists():
        try:
            data = tomllib.loads(Path("pyproject.toml").read_text())
        except tomllib.TOMLDecodeError:
            return {}, "pyproject.toml"
        return dict(data.get("tool", {}).get("xjobs", {})), "pyproject.toml [tool.xjobs]"
    return {}, "defaults"


# what else xjobs reads from the environment, beside the settings: the log, the dashboard's
# sign-in token, the control socket a command asks; XJOBS_TEST_* belong to the test suite
OTHER_VARIABLES = frozenset({"XJOBS_CONTROL", "XJOBS_LOG_FORMAT", "XJOBS_LOG_LEVEL", "XJOBS_UI_TOKEN"})
_warned: set[str] = set()


def unknown_variables(env: Mapping[str, str]) -> dict[str, str | None]:
    """``XJOBS_*`` variables xjobs does not read, each with the known one it is closest to."""
    known = {s.env for s in SETTINGS if s.env} | OTHER_VARIABLES
    tails = {name.removeprefix("XJOBS_"): name for name in known}   # the shared prefix says nothing

    def nearest(name: str) -> str | None:
        found = difflib.get_close_matches(name.removeprefix("XJOBS_"), list(tails), n=1, cutoff=0.75)
        return tails[found[0]] if found else None
    return {name: nearest(name) for name in sorted(env)
            if name.startswith("XJOBS_") and name not in known and not name.startswith("XJOBS_TEST_")}


def _warn_unknown(env: Mapping[str, str]) -> None:
    """A typo in a variable is said once per process (the same typo in a file is refused)."""
    for name, near in unknown_variables(env).items():
        if name not in _warned:
            _warned.add(name)
            log.warning("%s is not a variable xjobs reads; it is ignored%s", name,
                        f" (did you mean {near}?)" if near else "")


def load_settings(config_path: str | None = None, env: Mapping[str, str] | None = None,
                  **flags: Any) -> Settings:
    """Flags > ``XJOBS_*`` environment > config file > defaults; an ``XJOBS_*`` variable that
    names no setting is warned about."""
    env = os.environ if env is None else env
    _warn_unknown(env)
    file_values, source = _file_values(config_path)
    merged = _read(file_values, source)
    merged.update(_read({s.key: env[s.env] for s in SETTINGS if env.get(s.env)}, "environment"))
    merged.update(_read({k: v for k, v in flags.items() if v is not None}, "flags"))
    return Settings(**merged)


# -- the process-wide driver the enqueue facade and CLI use ------------------------------------

_state_lock = threading.Lock()
_settings: Settings | None = None
_driver: JobDriver | None = None
_schema_given = False    # configure(schema=...) named one: a daemon's record does not override it


def configure(*, dsn: str | None = None, schema: str | None = None, driver: JobDriver | None = None,
              settings: Settings | None = None, **knobs: Any) -> Settings:
    """Say where the queue lives: ``xjobs.configure(dsn=...)`` or ``configure(driver=...)``."""
    global _settings, _driver, _schema_given
    base = settings or load_settings()
    base = base.with_overrides(dsn=dsn, schema=schema, **knobs)
    with _state_lock:
        old, _driver = _driver, driver
        _settings = base
        _schema_given = schema is not None
    if old is not None and old is not driver:
        old.close()
    return base


def swap_driver(driver: JobDriver | None) -> JobDriver | None:
    """Make ``driver`` the process-wide driver and answer the previous one, left open (unlike
    ``configure``, which closes it): for test helpers that put the application's back."""
    global _driver
    with _state_lock:
        previous, _driver = _driver, driver
    return previous


def current_settings() -> Settings:
    global _settings
    with _state_lock:
        if _settings is None:
            _settings = load_settings()
        return _settings


def current_driver() -> JobDriver:
    """The process-wide driver: ``configure(driver=...)``'s, else one on the database the
    settings name (``configure(dsn=...)``, ``XJOBS_DATABASE_URL``, the config file), else on
    the one ``xjobsd run`` keeps for this directory (``./.xjobs/daemon.json``, as the commands
    run here find it); ``NotConfigured``, naming each place looked at, when none says."""
    global _driver, _settings
    settings = current_settings()
    with _state_lock:
        if _driver is None:
            dsn = settings.dsn
            if not dsn:
                dsn, settings = _daemons_database(settings)
                _settings = settings    # current_settings() says where the driver points
            from .drivers.postgres import PostgresDriver
            _driver = PostgresDriver(dsn, schema=settings.schema, application_name="xjobs-app")
        return _driver


def _daemons_database(settings: Settings) -> tuple[str, Settings]:
    from .daemon_record import recorded_database, why_no_database
    found = recorded_database()
    if found is None:
        raise NotConfigured(
            f"no database configured. Looked at: xjobs.configure() (no dsn= or driver= given), "
            f"{find_setting('dsn').env} (unset), database_url in ./xjobs.toml or [tool.xjobs] of "
            f"./pyproject.toml (none), and the daemon of this directory: {why_no_database()}. "
            f"Start `xjobsd run` here, set {find_setting('dsn').env}, or call xjobs.configure(dsn=...)")
    dsn, schema = found
    explicit = _schema_given or bool(os.environ.get(find_setting("schema").env))
    return dsn, settings.with_overrides(dsn=dsn, schema=None if explicit else schema)
