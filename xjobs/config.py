"""Where the queue lives and the knobs every process shares.

Precedence: explicit arguments (flags) > ``XJOBS_*`` environment > ``xjobs.toml`` or
``[tool.xjobs]`` in ``pyproject.toml`` > defaults. Every number is checked when the
``Settings`` is built, so a bad value stops the process at start with a coded error.
"""

from __future__ import annotations

import os
import re
import threading
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from .errors import InvalidOption, NotConfigured
from .options import duration_ms, finite_count, plain_name
from .payload import DEFAULT_MAX_PAYLOAD_BYTES
from .limits import Limits

if TYPE_CHECKING:
    from .drivers.base import JobDriver

MAX_PROCESSES = 256   # per queue, from the configuration or from ``xjobsd scale``


@dataclass(frozen=True)
class QueueSpec:
    processes: int = 1
    concurrency: int = 16

    @classmethod
    def parse(cls, text: str, option: str = "queue") -> tuple[str, "QueueSpec"]:
        """``emails=2x16`` (2 processes, 16 jobs each), ``emails=N`` (N jobs at once, spread
        over processes by ``spread``) or ``emails`` (1x16)."""
        name, _, spec = text.partition("=")
        name = plain_name(name.strip(), option)
        if not spec:
            return name, cls()
        procs, sep, conc = spec.partition("x")
        try:
            if sep:
                return name, cls.checked(_number(procs, option), _number(conc, option), option)
            total = finite_count(_number(procs, option), f"{option}.concurrency", minimum=1,
                                 maximum=10_000 * MAX_PROCESSES)
            spread = cls.spread(total)
            return name, cls.checked(spread.processes, spread.concurrency, option)
        except InvalidOption as exc:  # name the part that was refused, and the spec it came from
            raise InvalidOption(exc.option, f"{exc.reason} (in {text!r})") from None
        except ValueError:
            raise InvalidOption(option, f"expected NAME=PROCSxCONC like emails=2x16, got {text!r}") from None

    @classmethod
    def spread(cls, total: int, cores: int | None = None) -> "QueueSpec":
        """``total`` jobs at once on this machine, as processes x slots. Up to 128 slots share
        one process; past that the jobs are spread over more, up to two per core: a worker
        spends much of a busy pass waiting on the database, and a second process per core
        computes meanwhile (measured in ``bench/README.md``: on 2 cores 4x256 drains about a
        third faster than 2x256, and 1x512 waits on one GIL)."""
        cores = cores or _cores()
        processes = max(1, min(-(-total // 128), 2 * cores))
        return cls(processes, -(-total // processes))

    @classmethod
    def checked(cls, processes: object, concurrency: object, option: str = "queue") -> "QueueSpec":
        return cls(finite_count(processes, f"{option}.processes", minimum=1, maximum=MAX_PROCESSES),
                   finite_count(concurrency, f"{option}.concurrency", minimum=1, maximum=10_000))


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))   # what this process may run on (a container's share)
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _number(text: str, option: str) -> float:
    text = text.strip()
    value = float(text)  # ValueError for junk; nan/inf pass here and are refused by finite_count
    return int(value) if value.is_integer() else value


# (field, the name users write it under, its least value in ms)
_DURATIONS = (("lease_ms", "lease", 100), ("heartbeat_ms", "heartbeat", 10),
              ("poll_ms", "poll", 10), ("rescue_ms", "rescue", 10),
              ("retention_completed_ms", "retention_completed", 0),
              ("retention_finished_ms", "retention_finished", 0),
              ("drain_deadline_ms", "drain_deadline", 0), ("stats_interval_ms", "stats_interval", 100),
              ("leader_lease_ms", "leader_lease", 100), ("outbox_lease_ms", "outbox_lease", 100),
              ("outbox_retention_ms", "outbox_retention", 0), ("wake_ms", "wake", 10),
              ("event_retention_ms", "event_retention", 0))


_HEADER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,63}")   # what --ui-trust-header may name


@dataclass(frozen=True)
class Settings:
    dsn: str | None = None
    schema: str = "xjobs"
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    lease_ms: float = 30_000.0          # how long a claim holds a job without a heartbeat
    heartbeat_ms: float = 10_000.0      # how often a worker renews its leases
    poll_ms: float = 1_000.0            # claim poll when no notification arrives
    rescue_ms: float = 5_000.0          # how often lapsed leases and due suspensions are swept
    retention_completed_ms: float = 86_400_000.0
    retention_finished_ms: float = 14 * 86_400_000.0
    drain_deadline_ms: float = 25_000.0
    queues: Mapping[str, QueueSpec] = field(default_factory=dict)
    metrics: str | None = "127.0.0.1:9464"
    control: str | None = None
    apps: tuple[str, ...] = ()
    stats_interval_ms: float = 5_000.0   # how often the supervisor reads depth and age
    leader_lease_ms: float = 15_000.0    # the scheduler leader's lease; renewed every round
    outbox_lease_ms: float = 30_000.0    # an outbox claim held this long is free again
    outbox_retention_ms: float = 86_400_000.0   # published outbox rows are kept this long
    wake_ms: float = 250.0               # how often due sleepers and timed-out waits are woken
    event_retention_ms: float = 7 * 86_400_000.0   # sent events are kept (and delivered) this long
    limits: Limits = field(default_factory=Limits)   # per worker PROCESS ceilings (limits.py)
    recycle_after_jobs: int | None = None  # replace a worker process after this many claims
    recycle_above_rss_mib: int | None = None  # ... or once its resident memory passes this
    ui: str | None = None                # HOST:PORT of the dashboard (xjobsd run --ui); None: no dashboard
    ui_actions: bool = False             # the dashboard may act (retry, cancel, pause), signed in
    ui_trust_header: str | None = None   # a reverse proxy's header naming an authenticated user
    migrate: bool = True                 # a daemon or tick upgrades an older schema at start;
                                         # False (--no-migrate): it refuses one, X_SCHEMA_OUTDATED

    def __post_init__(self) -> None:
        from .drivers.sql import check_schema_name
        check_schema_name(self.schema)
        # every knob is stored normalised: "30s" given anywhere is 30000.0 here
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)
        put("max_payload_bytes", finite_count(self.max_payload_bytes, "max_payload_bytes",
                                              minimum=64, maximum=256 * 1024 * 1024))
        for name, option, minimum in _DURATIONS:
            put(name, duration_ms(getattr(self, name), option, minimum_ms=minimum))
        if self.heartbeat_ms >= self.lease_ms:
            raise InvalidOption("heartbeat", f"must be shorter than the lease ({self.lease_ms:g}ms), "
                                             f"got {self.heartbeat_ms:g}ms")
        if self.recycle_after_jobs is not None:
            put("recycle_after_jobs", finite_count(self.recycle_after_jobs, "recycle_after_jobs", minimum=1))
        if self.recycle_above_rss_mib is not None:
            put("recycle_above_rss_mib", finite_count(self.recycle_above_rss_mib, "recycle_above_rss", minimum=16))
        if not isinstance(self.ui_actions, bool):
            raise InvalidOption("ui_actions", f"must be true or false, got {self.ui_actions!r}")
        if not isinstance(self.migrate, bool):
            raise InvalidOption("migrate", f"must be true or false, got {self.migrate!r}")
        if self.ui_trust_header is not None and not _HEADER_NAME.fullmatch(str(self.ui_trust_header)):
            raise InvalidOption("ui_trust_header", f"must be an HTTP header name like X-Forwarded-User, "
                                                   f"got {self.ui_trust_header!r}")
        if not isinstance(self.limits, Limits):
            raise InvalidOption("limits", "must be Limits(...)")
        if not isinstance(self.queues, Mapping):
            raise InvalidOption("queues", "must map queue names to QueueSpec")
        for name, spec in self.queues.items():
            plain_name(name, "queue")
            if not isinstance(spec, QueueSpec):
                raise InvalidOption(f"queue {name}", "must be a QueueSpec")
        put("apps", tuple(self.apps))

    def with_overrides(self, **values: Any) -> "Settings":
        return replace(self, **{k: v for k, v in values.items() if v is not None})


# the user-facing name of each duration field (toml key, XJOBS_ suffix, flag)
_DURATION_KEYS = {option: name for name, option, _ in _DURATIONS}


def _coerce(values: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Map user-facing keys (``lease = "30s"``, ``database_url``) onto ``Settings`` fields."""
    out: dict[str, Any] = {}
    names = {f.name for f in fields(Settings)}
    for key, value in values.items():
        key = key.replace("-", "_").lower()
        if key in ("database_url", "dsn"):
            out["dsn"] = value
        elif key in _DURATION_KEYS:
            out[_DURATION_KEYS[key]] = value   # parsed and checked by Settings itself
        elif key == "queues":
            if isinstance(value, str):
                value = [v for v in value.split(",") if v.strip()]
            if isinstance(value, Mapping):
                out["queues"] = {plain_name(k, "queue"): QueueSpec.parse(f"{k}={v}")[1] if not isinstance(v, Mapping)
                                 else QueueSpec.checked(v.get("processes", 1), v.get("concurrency", 16), f"queue {k}")
                                 for k, v in value.items()}
            else:
                out["queues"] = dict(QueueSpec.parse(v) for v in value)
        elif key == "apps" or key == "app":
            out["apps"] = tuple(value.split(",") if isinstance(value, str) else value)
        elif key == "limits":
            out["limits"] = _limits(value)
        elif key in ("max_payload_bytes", "recycle_after_jobs"):
            out[key] = _maybe_number(value, key)   # a count from text; Settings checks its range
        elif key in ("ui_actions", "migrate"):
            out[key] = _switch(value, key)
        elif key in ("recycle_above_rss", "recycle_above_rss_mib"):
            out["recycle_above_rss_mib"] = _maybe_number(value, "recycle_above_rss")
        elif key in names:
            out[key] = value
        else:
            raise InvalidOption(key, f"unknown setting in {source}")
    return out


def _switch(value: Any, option: str) -> bool:
    """A yes/no setting given as a bool (a file, a flag) or as text (the environment)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise InvalidOption(option, f"must be true or false, got {value!r}")


def _limits(value: Any) -> Limits:
    """``{"tenant": 5, "tenant_rate_window": "1s"}`` (a file's table), ``"tenant=5,global=100"``
    (the environment), or a list of ``"NAME=VALUE"`` (repeated flags)."""
    if isinstance(value, Limits):
        return value
    if isinstance(value, str):
        value = [part for part in value.split(",") if part.strip()]
    if not isinstance(value, Mapping):
        pairs = {}
        for part in value:
            name, sep, number = str(part).partition("=")
            if not sep:
                raise InvalidOption("limits", f"expected NAME=VALUE like tenant=5, got {part!r}")
            pairs[name.strip()] = number.strip()
        value = pairs
    return Limits.from_mapping({k: (v if k == "tenant_rate_window" else _maybe_number(v, f"limits.{k}"))
                                for k, v in value.items()})


def _maybe_number(value: Any, option: str) -> Any:
    if isinstance(value, str):
        try:
            return _number(value, option)
        except ValueError:
            raise InvalidOption(option, f"must be a number, got {value!r}") from None
    return value


_ENV = {"XJOBS_DATABASE_URL": "dsn", "XJOBS_SCHEMA": "schema", "XJOBS_LEASE": "lease",
        "XJOBS_HEARTBEAT": "heartbeat", "XJOBS_POLL": "poll", "XJOBS_RESCUE": "rescue",
        "XJOBS_DRAIN_DEADLINE": "drain_deadline", "XJOBS_QUEUES": "queues",
        "XJOBS_METRICS": "metrics", "XJOBS_CONTROL": "control", "XJOBS_APP": "apps",
        "XJOBS_MAX_PAYLOAD_BYTES": "max_payload_bytes",
        "XJOBS_RETENTION_COMPLETED": "retention_completed",
        "XJOBS_RETENTION_FINISHED": "retention_finished", "XJOBS_STATS_INTERVAL": "stats_interval",
        "XJOBS_RECYCLE_AFTER_JOBS": "recycle_after_jobs",
        "XJOBS_RECYCLE_ABOVE_RSS": "recycle_above_rss", "XJOBS_LEADER_LEASE": "leader_lease",
        "XJOBS_OUTBOX_LEASE": "outbox_lease", "XJOBS_OUTBOX_RETENTION": "outbox_retention",
        "XJOBS_LIMITS": "limits", "XJOBS_WAKE": "wake", "XJOBS_EVENT_RETENTION": "event_retention",
        "XJOBS_UI": "ui", "XJOBS_UI_ACTIONS": "ui_actions", "XJOBS_UI_TRUST_HEADER": "ui_trust_header",
        "XJOBS_MIGRATE": "migrate"}


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


def load_settings(config_path: str | None = None, env: Mapping[str, str] | None = None,
                  **flags: Any) -> Settings:
    """Flags > ``XJOBS_*`` environment > config file > defaults."""
    env = os.environ if env is None else env
    file_values, source = _file_values(config_path)
    merged = _coerce(file_values, source)
    merged.update(_coerce({key: env[var] for var, key in _ENV.items() if env.get(var)}, "environment"))
    merged.update(_coerce({k: v for k, v in flags.items() if v is not None}, "flags"))
    return Settings(**merged)


# -- the process-wide driver the enqueue facade and CLI use ------------------------------------

_state_lock = threading.Lock()
_settings: Settings | None = None
_driver: JobDriver | None = None


def configure(*, dsn: str | None = None, schema: str | None = None, driver: JobDriver | None = None,
              settings: Settings | None = None, **knobs: Any) -> Settings:
    """Say where the queue lives: ``xjobs.configure(dsn=...)`` or ``configure(driver=...)``."""
    global _settings, _driver
    base = settings or load_settings()
    base = base.with_overrides(dsn=dsn, schema=schema, **knobs)
    with _state_lock:
        old, _driver = _driver, driver
        _settings = base
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
    global _driver
    settings = current_settings()
    with _state_lock:
        if _driver is None:
            if not settings.dsn:
                raise NotConfigured("no database configured: set XJOBS_DATABASE_URL or call xjobs.configure(dsn=...)")
            from .drivers.postgres import PostgresDriver
            _driver = PostgresDriver(settings.dsn, schema=settings.schema, application_name="xjobs-app")
        return _driver
