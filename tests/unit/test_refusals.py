"""Bad input is refused at the earliest point, with a stable code, and writes nothing."""

from __future__ import annotations

import dataclasses
import math

import pytest

import xjobs
from xjobs.config import QueueSpec, Settings, load_settings
from xjobs.drivers.base import Claim, ListFilter
from xjobs.enqueue import enqueue_many
from xjobs.errors import (DuplicateJob, IdempotencyKeyRequired, InvalidOption, PayloadInvalid,
                          PayloadTooLarge, TenantRequired)

@dataclasses.dataclass
class Point:
    x: float


BAD_NUMBERS = [float("nan"), float("inf"), float("-inf"), -1]
BAD_COUNTS = BAD_NUMBERS + [2.5, True, "3"]
ODD_NAMES = ["constructor", "__proto__", "toString", "x'; drop table y; --", "名前", "a b"]


def declare(registry=None, **options):
    options.setdefault("idempotency_key", lambda i: "k")
    options.setdefault("tenant", "none")
    return xjobs.job(registry=registry or xjobs.Registry(), **options)(lambda ctx, i: None)


@pytest.mark.parametrize("bad", BAD_COUNTS)
def test_retry_attempts_must_be_a_whole_positive_count(bad):
    with pytest.raises(InvalidOption) as err:
        xjobs.Retry(attempts=bad)
    assert err.value.code == "X_INVALID_OPTION" and err.value.option == "retry.attempts"


@pytest.mark.parametrize("option", ["delay", "max_delay"])
@pytest.mark.parametrize("bad", BAD_NUMBERS + ["soon", "5 parsecs", "-5s"])
def test_retry_durations_must_be_finite_and_non_negative(option, bad):
    with pytest.raises(InvalidOption) as err:
        xjobs.Retry(**{option: bad})
    assert err.value.option == f"retry.{option}"


def test_retry_refuses_an_unknown_backoff_and_inverted_bounds():
    with pytest.raises(InvalidOption):
        xjobs.Retry(backoff="fibonacci")
    with pytest.raises(InvalidOption):
        xjobs.Retry(delay="1m", max_delay="1s")
    with pytest.raises(InvalidOption):
        xjobs.Retry(jitter="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("knob,bad", [("timeout", b) for b in BAD_NUMBERS + [0, "0s"]]
                         + [("concurrency", b) for b in BAD_COUNTS + [0]]
                         + [("priority", b) for b in [float("nan"), float("inf"), 2.5, 40_000]])
def test_job_knobs_are_refused_at_declaration(knob, bad):
    with pytest.raises(InvalidOption) as err:
        declare(**{knob: bad})
    assert err.value.option == knob


def test_job_requires_a_key_and_a_tenant():
    with pytest.raises(IdempotencyKeyRequired):
        xjobs.job(tenant="none")
    with pytest.raises(TenantRequired) as err:
        xjobs.job(idempotency_key=lambda i: "k")
    assert err.value.code == "X_JOB_TENANT_REQUIRED"
    with pytest.raises(InvalidOption):
        xjobs.job(idempotency_key=lambda i: "k", tenant="acme")  # a string that is not "none"


def test_two_handlers_on_one_name_collide_and_listing_is_by_code_point():
    registry = xjobs.Registry()
    xjobs.job(registry=registry, name="b", idempotency_key=lambda i: "k", tenant="none")(lambda c, i: 1)
    with pytest.raises(DuplicateJob) as err:
        xjobs.job(registry=registry, name="b", idempotency_key=lambda i: "k", tenant="none")(lambda c, i: 2)
    assert err.value.code == "X_JOB_DUPLICATE"
    for name in ["a", "B", "ä", "Z"]:
        xjobs.job(registry=registry, name=name, idempotency_key=lambda i: "k", tenant="none")(lambda c, i: 3)
    assert [h.name for h in registry.jobs()] == ["B", "Z", "a", "b", "ä"]


@pytest.mark.parametrize("bad", ["", " padded ", "tab\there", "x" * 129, 42, None])
def test_names_must_be_plain_text(bad):
    with pytest.raises(InvalidOption):
        declare(queue=bad)
    if bad is not None:  # name=None means "the function's name"
        with pytest.raises(InvalidOption):
            declare(name=bad)


@pytest.mark.parametrize("name", ODD_NAMES)
def test_odd_names_are_accepted_as_data(driver, name):
    handle = declare(name=name, queue=name, tenant=lambda i: i["t"], idempotency_key=lambda i: i["k"])
    first = enqueue_many(handle, [{"t": name, "k": name}], driver=driver)[0]
    again = enqueue_many(handle, [{"t": name, "k": name}], driver=driver)[0]
    assert (again.id, again.deduped) == (first.id, True)
    view = driver.job_get(first.id)
    assert (view.name, view.queue, view.tenant, view.idempotency_key) == (name, name, name, name)


@pytest.mark.parametrize("payload,error", [
    ({"x": float("nan")}, PayloadInvalid), ({"x": [1, float("inf")]}, PayloadInvalid),
    ({1: "non-string key"}, PayloadInvalid), ({"x": object()}, PayloadInvalid),
    ({"x": "nul\x00byte"}, PayloadInvalid), ({"nul\x00key": 1}, PayloadInvalid),
    ({"x": "y" * 2_000_000}, PayloadTooLarge), ({"x": Point(float("nan"))}, PayloadInvalid),
])
def test_bad_payloads_are_refused_and_nothing_is_written(driver, payload, error):
    handle = declare(idempotency_key=lambda i: "k" if isinstance(i, dict) else "k")
    good = {"fine": 1}
    with pytest.raises(error) as err:
        enqueue_many(handle, [good, payload], driver=driver)
    assert err.value.code in ("X_PAYLOAD_INVALID", "X_PAYLOAD_TOO_LARGE")
    assert driver.job_list(ListFilter()) == []


def test_text_that_merely_spells_an_escape_is_data(driver):
    handle = declare(idempotency_key=lambda i: "k")
    [job] = enqueue_many(handle, [{"path": "C:\\u0000dir", "s": "\\u0000"}], driver=driver)
    assert driver.job_get(job.id).payload == {"path": "C:\\u0000dir", "s": "\\u0000"}


def test_bad_keys_and_tenants_are_refused_before_writing(driver):
    keyless = declare(idempotency_key=lambda i: i.get("k"))
    with pytest.raises(IdempotencyKeyRequired):
        enqueue_many(keyless, [{"k": "a"}, {}], driver=driver)
    tenantless = declare(tenant=lambda i: i.get("org"))
    with pytest.raises(TenantRequired):
        enqueue_many(tenantless, [{"org": "a"}, {"org": None}], driver=driver)
    assert driver.job_list(ListFilter()) == []


def test_nul_characters_in_keys_and_tenants_are_refused(driver):
    with pytest.raises(InvalidOption):
        enqueue_many(declare(idempotency_key=lambda i: "a\x00b"), [{}], driver=driver)
    with pytest.raises(InvalidOption):
        enqueue_many(declare(tenant=lambda i: "t\x00"), [{}], driver=driver)
    with pytest.raises(InvalidOption):
        enqueue_many(declare(), [{}], driver=driver, enqueued_by="x\x00")
    assert driver.job_list(ListFilter()) == []


@pytest.mark.parametrize("kwargs", [{"delay": float("nan")}, {"delay": -1}, {"delay": "eventually"},
                                    {"run_at": float("inf")}, {"priority": 2.5},
                                    {"delay": "1s", "run_at": 0}])
def test_enqueue_timing_knobs_are_checked(driver, kwargs):
    with pytest.raises(InvalidOption):
        enqueue_many(declare(), [{}], driver=driver, **kwargs)
    assert driver.job_list(ListFilter()) == []


@pytest.mark.parametrize("bad", BAD_COUNTS + [0])
def test_claim_limits_must_be_whole(driver, bad):
    if bad == 0:
        assert driver.job_claim(Claim(["q"], 0, 1000, "w")) == []
        return
    with pytest.raises(InvalidOption):
        driver.job_claim(Claim(["q"], bad, 1000, "w"))


@pytest.mark.parametrize("field,bad", [("lease_ms", b) for b in BAD_NUMBERS + [0]]
                         + [("heartbeat_ms", b) for b in BAD_NUMBERS]
                         + [("poll_ms", b) for b in BAD_NUMBERS + [0]]
                         + [("drain_deadline_ms", b) for b in BAD_NUMBERS]
                         + [("max_payload_bytes", b) for b in BAD_COUNTS]
                         + [("schema", b) for b in ["Public", "x;drop", "", 7]])
def test_settings_are_checked_at_construction(field, bad):
    with pytest.raises(InvalidOption):
        Settings(**{field: bad})


def test_heartbeat_must_be_shorter_than_the_lease():
    with pytest.raises(InvalidOption):
        Settings(lease_ms=1000, heartbeat_ms=1000)


@pytest.mark.parametrize("spec", ["q=nan", "q=inf", "q=-1", "q=2.5", "q=1x2.5", "q=0x4", "q=x", "=2",
                                  "q=1xnan"])
def test_queue_specs_are_checked(spec):
    with pytest.raises(InvalidOption):
        QueueSpec.parse(spec)


def test_queue_spec_forms():
    assert QueueSpec.parse("emails=2x16") == ("emails", QueueSpec(2, 16))
    assert QueueSpec.parse("emails=4") == ("emails", QueueSpec(1, 4))
    # N jobs at once: one process up to 128 of them, then spread up to two processes per core
    assert QueueSpec.spread(128, cores=2) == QueueSpec(1, 128)
    assert QueueSpec.spread(256, cores=2) == QueueSpec(2, 128)
    assert QueueSpec.spread(1024, cores=2) == QueueSpec(4, 256)
    assert QueueSpec.spread(1024, cores=8) == QueueSpec(8, 128)
    with pytest.raises(InvalidOption):
        QueueSpec.parse("emails=99999999")
    assert QueueSpec.parse("emails") == ("emails", QueueSpec())


def test_environment_values_are_checked_and_flags_win(tmp_path):
    with pytest.raises(InvalidOption) as err:
        load_settings(env={"XJOBS_LEASE": "nan"})
    assert err.value.option == "lease"
    config = tmp_path / "xjobs.toml"
    config.write_text('[xjobs]\nlease = "40s"\npoll = "2s"\n')
    settings = load_settings(str(config), env={"XJOBS_POLL": "3s"}, lease="50s")
    assert (settings.lease_ms, settings.poll_ms) == (50_000, 3_000)
    with pytest.raises(InvalidOption):
        load_settings(str(config), env={}, no_such_knob=1)
    assert math.isfinite(load_settings(env={}).lease_ms)


def test_durations_are_stored_normalised_wherever_they_come_from(tmp_path):
    assert Settings(lease_ms="30s", heartbeat_ms="5s").lease_ms == 30_000.0  # type: ignore[arg-type]
    assert load_settings(env={"XJOBS_LEASE": "30000"}).lease_ms == 30_000.0   # bare numbers are ms
    config = tmp_path / "xjobs.toml"
    config.write_text('[xjobs]\nlease_ms = "45s"\n')
    assert load_settings(str(config), env={}).lease_ms == 45_000.0


def test_run_at_beyond_what_every_driver_holds_is_refused(driver):
    with pytest.raises(InvalidOption):
        enqueue_many(declare(), [{}], driver=driver, run_at=1e16)
    assert driver.job_list(ListFilter()) == []


def test_a_jobs_input_validator_refuses_at_enqueue_and_normalises_what_it_keeps():
    from xjobs.drivers.memory import MemoryDriver
    from xjobs.enqueue import enqueue_many
    registry = xjobs.Registry()
    driver = MemoryDriver()

    def order(value):
        if not isinstance(value.get("order"), int):
            raise ValueError("order must be an integer id")
        return {"currency": "EUR", **value}
    handle = xjobs.job(idempotency_key=lambda i: str(i["order"]), tenant="none", registry=registry,
                       name="charge", input=order)(lambda ctx, i: None)
    with pytest.raises(xjobs.XJobsError) as err:
        enqueue_many(handle, [{"order": 1}, {"order": "two"}, {"order": 3}], driver=driver)
    assert err.value.code == "X_JOB_INPUT_INVALID" and "order must be an integer id" in str(err.value)
    assert driver.job_list(ListFilter()) == []                           # one bad input: nothing written
    [done] = enqueue_many(handle, [{"order": 1}], driver=driver)
    assert driver.job_get(done.id).payload == {"currency": "EUR", "order": 1}

    class Model:            # the two methods xjobs uses of a pydantic model class
        def __init__(self, data):
            self.data = data

        @classmethod
        def model_validate(cls, value):
            if "email" not in value:
                raise ValueError("email: field required")
            return cls(value)

        def model_dump(self, mode="python"):
            return {"email": self.data["email"].lower()}
    modelled = xjobs.job(idempotency_key=lambda i: i["email"], tenant="none", registry=registry,
                         name="welcome", input=Model)(lambda ctx, i: None)
    [kept] = enqueue_many(modelled, [{"email": "A@B.example", "extra": 1}], driver=driver)
    assert driver.job_get(kept.id).payload == {"email": "a@b.example"}
    with pytest.raises(xjobs.XJobsError) as err:
        enqueue_many(modelled, [{}], driver=driver)
    assert err.value.code == "X_JOB_INPUT_INVALID"
    with pytest.raises(InvalidOption):
        xjobs.job(idempotency_key=str, tenant="none", registry=registry, name="bad", input=42)(lambda c, i: None)
    with pytest.raises(xjobs.XJobsError):     # a cron task's input is checked at declaration
        xjobs.task(name="nightly", cron="0 3 * * *", tz="UTC", job=handle, input={"order": "x"},
                   registry=registry)


def test_only_the_declarations_register_and_the_registry_is_no_second_way_in():
    from xjobs.registry import JobHandle
    from xjobs.retry import DEFAULT_RETRY
    registry = xjobs.Registry()
    assert not hasattr(registry, "add")      # job(), task() and scan() are the way in
    forged = JobHandle(lambda ctx, i: None, name="forged", queue="q", idempotency_key=str, tenant="none",
                       retry=DEFAULT_RETRY, timeout_ms=None, concurrency=None, priority=0)
    with pytest.raises(InvalidOption) as err:
        registry._add(forged)
    assert "only job() registers" in str(err.value)
    with pytest.raises(InvalidOption):
        registry._add_task(object())  # type: ignore[arg-type]
    declared = xjobs.job(idempotency_key=str, tenant="none", registry=registry, name="real")(lambda ctx, i: None)
    assert registry.get("real") is declared


def test_every_entry_point_enqueues_through_the_one_enqueue_module():
    """Outside the drivers, only enqueue.py builds a NewJob or calls job_enqueue: a second
    path would let the key, tenant, payload and timing rules drift apart."""
    import ast
    import pathlib
    root = pathlib.Path(xjobs.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative == "enqueue.py" or relative.startswith("drivers/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if name in ("job_enqueue", "NewJob"):
                    found.append(f"{relative}:{node.lineno} {name}")
    assert found == []


_TWICE_APP = """
import sys
import xjobs

@xjobs.job(idempotency_key=str, tenant="none")
def welcome(ctx, i):
    return None

@xjobs.scan(every="5m")
def expire(ctx):
    return None

xjobs.task(name="nightly", cron="0 3 * * *", tz="UTC", job=welcome, input={})
"""


@pytest.mark.parametrize("how", ["as __main__ and by name", "from two sys.path roots"])
def test_a_module_really_imported_twice_is_one_registration(tmp_path, how):
    """A real second import compiles the module again (new code objects, another
    ``__module__``): its declarations are still the same ones, not a collision."""
    import subprocess
    import sys
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "jobs.py").write_text(_TWICE_APP + (
        "if __name__ == '__main__':\n"
        "    import pkg.jobs\n"
        "    assert pkg.jobs.welcome.fn is not welcome.fn\n" if how.startswith("as") else ""))
    report = ("from xjobs.registry import REGISTRY\n"
              "print([j.name for j in REGISTRY.jobs()], [s.name for s in REGISTRY.scans()],"
              " [t.name for t in REGISTRY.tasks()])\n")
    if how.startswith("as"):
        script = f"import runpy, sys; sys.path.insert(0, {str(tmp_path)!r}); " \
                 f"runpy.run_path({str(package / 'jobs.py')!r}, run_name='__main__')\n" + report
    else:
        script = (f"import sys; sys.path[:0] = [{str(tmp_path)!r}, {str(package)!r}]\n"
                  "import pkg.jobs, jobs\n"
                  "assert pkg.jobs.welcome.fn is not jobs.welcome.fn\n" + report)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['welcome'] ['expire'] ['nightly']"


def test_two_functions_of_one_name_on_different_lines_still_collide():
    registry = xjobs.Registry()

    def first(ctx, i):
        return None

    def second(ctx, i):
        return None
    xjobs.job(idempotency_key=str, tenant="none", registry=registry, name="same")(first)
    with pytest.raises(DuplicateJob) as err:
        xjobs.job(idempotency_key=str, tenant="none", registry=registry, name="same")(second)
    assert err.value.code == "X_JOB_DUPLICATE"


def test_one_declaration_seen_twice_is_one_registration():
    """A module imported as __main__ and by name declares its jobs twice: the same code is
    one job, not a collision."""
    registry = xjobs.Registry()

    def body(ctx, i):
        return None
    first = xjobs.job(idempotency_key=str, tenant="none", registry=registry, name="twice")(body)
    copy = type(body)(body.__code__, body.__globals__, "body")  # type: ignore[misc]  # what a second import makes
    second = xjobs.job(idempotency_key=str, tenant="none", registry=registry, name="twice")(copy)
    assert registry.get("twice") is second and first.name == second.name
    assert [job.name for job in registry.jobs()] == ["twice"]
