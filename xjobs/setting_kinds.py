"""The kinds of value a setting holds, and how each is read and refused.

A kind reads a value two ways:

* ``check`` takes a value given in Python (``Settings(lease_ms="30s")``, ``configure(...)``)
  and answers it normalised, or refuses it with ``X_INVALID_OPTION`` naming the setting;
* ``read`` also takes the text an environment variable, a flag or a file gives (``"3"`` for
  a count, ``"yes"`` for a switch, ``"emails=2x16,pdf"`` for queues), then checks it.

A count written as text in Python (``Settings(max_payload_bytes="3")``) is refused: only
what the environment, a flag or a file says is read. A duration is text in either
(``"30s"``). ``show`` writes a value as the table of settings (docs/guides/configuration.md)
prints a default (``30s``, ``1 MiB``; empty for none).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Generic, Mapping, TypeVar

from .errors import InvalidOption
from .options import duration_ms, duration_text, finite_count, plain_name
from .limits import Limits

T = TypeVar("T")

MAX_PROCESSES = 256   # per queue, from the configuration or from ``xjobsd scale``
_MIB = 1024 * 1024


class Kind(Generic[T]):
    """What values a setting takes, stored as ``T``; ``key`` names the setting in a refusal."""

    unit = ""              # what the stored number counts: ms, bytes, MiB
    metavar: str | None = None   # what a flag's value is called (DURATION, N, MiB)
    repeatable = False     # its flag adds up when given again (--queue, --app)
    switch = False         # its flag takes no value

    def check(self, value: object, key: str) -> T:
        raise NotImplementedError

    def read(self, value: object, key: str) -> T:
        return self.check(value, key)

    def show(self, value: T) -> str:
        return "" if value is None else str(value)


class Maybe(Kind[T | None]):
    """A setting that may be left unset (``None``): no recycling, no dashboard."""

    def __init__(self, kind: Kind[T]) -> None:
        self.kind = kind
        self.unit, self.metavar = kind.unit, kind.metavar

    def check(self, value: object, key: str) -> T | None:
        return None if value is None else self.kind.check(value, key)

    def read(self, value: object, key: str) -> T | None:
        return None if value is None else self.kind.read(value, key)

    def show(self, value: T | None) -> str:
        return "" if value is None else self.kind.show(value)


class Duration(Kind[float]):
    """``"250ms"``, ``"5s"``, ``"2m"``, ``"1h"``, ``"1d"`` or a number, stored in milliseconds."""

    unit = "ms"
    metavar = "DURATION"

    def __init__(self, minimum_ms: float) -> None:
        self.minimum_ms = minimum_ms

    def check(self, value: object, key: str) -> float:
        return duration_ms(value, key, minimum_ms=self.minimum_ms)

    def show(self, value: float) -> str:
        return duration_text(value)


class Count(Kind[int]):
    """A whole number of things in ``[minimum, maximum]``: ``2.5`` or ``True`` is refused, not
    rounded."""

    def __init__(self, minimum: int, maximum: int = 2**31 - 1, unit: str = "") -> None:
        self.minimum, self.maximum, self.unit = minimum, maximum, unit
        self.metavar = unit or "N"

    def check(self, value: object, key: str) -> int:
        return finite_count(value, key, minimum=self.minimum, maximum=self.maximum)

    def read(self, value: object, key: str) -> int:
        if isinstance(value, str):
            try:
                value = number(value)
            except ValueError:
                raise InvalidOption(key, f"must be a number, got {value!r}") from None
        return self.check(value, key)

    def show(self, value: int) -> str:
        if self.unit == "bytes" and value % _MIB == 0:
            return f"{value // _MIB} MiB"
        return f"{value} {self.unit}".strip()


class Switch(Kind[bool]):
    """Yes or no: a bool, or from text ``1/true/yes/on`` and ``0/false/no/off``."""

    switch = True

    def check(self, value: object, key: str) -> bool:
        if not isinstance(value, bool):
            raise InvalidOption(key, f"must be true or false, got {value!r}")
        return value

    def read(self, value: object, key: str) -> bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off", ""):
            return False
        raise InvalidOption(key, f"must be true or false, got {value!r}")

    def show(self, value: bool) -> str:
        return "true" if value else "false"


class Text(Kind[str]):
    """A string, and what ``validate`` accepts (it refuses in its own words)."""

    def __init__(self, validate: Callable[[str], object] | None = None) -> None:
        self.validate = validate

    def check(self, value: object, key: str) -> str:
        if not isinstance(value, str):
            raise InvalidOption(key, f"must be text, got {type(value).__name__} {value!r}")
        if self.validate is not None:
            self.validate(value)
        return value


class Names(Kind[tuple[str, ...]]):
    """Module names: ``"a,b"`` (the environment), a list (a file), or a flag given again."""

    repeatable = True

    def check(self, value: object, key: str) -> tuple[str, ...]:
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)):
            raise InvalidOption(key, f"must be a list of names, got {type(value).__name__} {value!r}")
        return tuple(items)

    def show(self, value: tuple[str, ...]) -> str:
        return ", ".join(value)


@dataclass(frozen=True)
class QueueSpec:
    """A queue's shape on one daemon: ``processes`` worker processes of ``concurrency`` slots."""

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
                return name, cls.checked(number(procs), number(conc), option)
            total = finite_count(number(procs), f"{option}.concurrency", minimum=1,
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


class Queues(Kind[Mapping[str, QueueSpec]]):
    """The queues a daemon serves and their shapes: ``"emails=2x16,pdf"`` (the environment),
    a flag given again, a list of the same, or a file's table (``emails = "2x16"`` or
    ``emails = {processes = 2, concurrency = 16}``)."""

    repeatable = True

    def check(self, value: object, key: str) -> Mapping[str, QueueSpec]:
        if not isinstance(value, Mapping):
            raise InvalidOption(key, "must map queue names to QueueSpec")
        for name, spec in value.items():
            plain_name(name, "queue")
            if not isinstance(spec, QueueSpec):
                raise InvalidOption(f"queue {name}", "must be a QueueSpec")
        return value

    def read(self, value: object, key: str) -> Mapping[str, QueueSpec]:
        if isinstance(value, str):
            value = [v for v in value.split(",") if v.strip()]
        if isinstance(value, Mapping):
            return {plain_name(k, "queue"): QueueSpec.parse(f"{k}={v}")[1] if not isinstance(v, Mapping)
                    else QueueSpec.checked(v.get("processes", 1), v.get("concurrency", 16), f"queue {k}")
                    for k, v in value.items()}
        if not isinstance(value, (list, tuple)):
            raise InvalidOption(key, f"expected NAME=PROCSxCONC like emails=2x16, got {value!r}")
        return dict(QueueSpec.parse(str(v)) for v in value)

    def show(self, value: Mapping[str, QueueSpec]) -> str:
        return ", ".join(f"{name}={spec.processes}x{spec.concurrency}" for name, spec in value.items())


class PerProcessLimits(Kind[Limits]):
    """``{"tenant": 5, "tenant_rate_window": "1s"}`` (a file's table), ``"tenant=5,global=100"``
    (the environment), or a list of ``"NAME=VALUE"``."""

    def check(self, value: object, key: str) -> Limits:
        if not isinstance(value, Limits):
            raise InvalidOption(key, "must be Limits(...)")
        return value

    def read(self, value: object, key: str) -> Limits:
        if isinstance(value, Limits):
            return value
        if isinstance(value, str):
            value = [part for part in value.split(",") if part.strip()]
        if not isinstance(value, Mapping):
            if not isinstance(value, (list, tuple)):
                raise InvalidOption(key, f"expected NAME=VALUE like tenant=5, got {value!r}")
            pairs = {}
            for part in value:
                name, sep, amount = str(part).partition("=")
                if not sep:
                    raise InvalidOption(key, f"expected NAME=VALUE like tenant=5, got {part!r}")
                pairs[name.strip()] = amount.strip()
            value = pairs
        return Limits.from_mapping({k: (v if k == "tenant_rate_window" else _maybe_number(v, f"{key}.{k}"))
                                    for k, v in value.items()})

    def show(self, value: Limits) -> str:
        return "" if value.unlimited else str(value)


def number(text: str) -> float:
    """A number from text: ``ValueError`` for junk; nan and inf pass, for the range check to
    refuse by name."""
    value = float(text.strip())
    return int(value) if value.is_integer() else value


def _maybe_number(value: Any, option: str) -> Any:
    if isinstance(value, str):
        try:
            return number(value)
        except ValueError:
            raise InvalidOption(option, f"must be a number, got {value!r}") from None
    return value
