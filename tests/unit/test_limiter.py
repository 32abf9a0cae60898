"""The per-process limiter: 0 blocks, omission allows, state stays bounded under a stream of
random tenants, and the least throttled tenant is evicted first."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xjobs.errors import InvalidOption
from xjobs.limits import Limits
from xjobs.workers.limiter import Limiter


def test_zero_is_a_hard_stop_and_omission_is_unlimited():
    for ceiling in ("global_", "queue", "tenant", "tenant_rate"):
        limiter = Limiter(Limits(**{ceiling: 0}))
        decision = limiter.admit("t", "q", 0.0, retry_ms=50)
        assert not decision.admitted and decision.reason == ceiling.rstrip("_")
    open_ = Limiter(Limits())
    assert all(open_.admit(f"t{i}", "q", 0.0, retry_ms=50).admitted for i in range(10_000))
    assert Limits().unlimited and not Limits(tenant=3).unlimited


@pytest.mark.parametrize("kw", [{"tenant": math.nan}, {"global_": math.inf}, {"queue": -1},
                                {"tenant_rate": 2.5}, {"tenant_rate_window_ms": 0},
                                {"tenant_rate_window_ms": "soon"}, {"max_tenants": 0}, {"tenant": True}])
def test_bad_numbers_are_refused_at_construction(kw):
    with pytest.raises(InvalidOption):
        Limits(**kw)


def test_from_mapping_names_unknown_limits():
    assert Limits.from_mapping({"global": 5, "tenant_rate_window": "2s"}).tenant_rate_window_ms == 2000
    with pytest.raises(InvalidOption) as refused:
        Limits.from_mapping({"fleet": 3})
    assert "fleet" in str(refused.value)


def test_in_flight_ceilings_count_and_release():
    limiter = Limiter(Limits(tenant=2, queue=3))
    assert limiter.admit("a", "q", 0, retry_ms=50).admitted
    assert limiter.admit("a", "q", 0, retry_ms=50).admitted
    refused = limiter.admit("a", "q", 0, retry_ms=50)
    assert (refused.admitted, refused.retry_after_ms, refused.reason) == (False, 50, "tenant")
    assert limiter.admit("b", "q", 0, retry_ms=50).admitted
    assert limiter.admit("c", "q", 0, retry_ms=50).reason == "queue"
    limiter.release("a", "q")
    assert limiter.admit("c", "q", 0, retry_ms=50).admitted
    for tenant in ("a", "b", "c"):
        limiter.release(tenant, "q")
    assert limiter.snapshot()["tracked"]["tenants_in_flight"] == 0    # zero counters are deleted
    assert limiter.snapshot()["in_flight"] == {"global": 0, "queues": {}}


def test_a_rate_refusal_waits_until_the_window_admits_again():
    limiter = Limiter(Limits(tenant_rate=2, tenant_rate_window_ms=1000))
    assert limiter.admit("t", "q", 0, retry_ms=50).admitted
    assert limiter.admit("t", "q", 300, retry_ms=50).admitted
    refused = limiter.admit("t", "q", 400, retry_ms=50)
    assert (refused.admitted, refused.retry_after_ms) == (False, 600)   # the first start leaves the window at 1000
    assert limiter.admit("t", "q", 1000, retry_ms=50).admitted


def test_the_least_full_window_is_evicted_first():
    """Forgetting a full window hands its tenant a free rate reset: the emptiest goes."""
    limiter = Limiter(Limits(tenant_rate=3, tenant_rate_window_ms=10_000, max_tenants=2))
    for at in (0, 1, 2):
        assert limiter.admit("full", "q", at, retry_ms=50).admitted
    assert limiter.admit("light", "q", 3, retry_ms=50).admitted          # one start of three
    assert limiter.admit("new", "q", 4, retry_ms=50).admitted            # evicts light, not full
    assert not limiter.admit("full", "q", 5, retry_ms=50).admitted       # still throttled
    assert limiter.snapshot()["tracked"]["tenants_rated"] == 2


def test_among_equally_full_windows_the_least_refused_is_evicted():
    limiter = Limiter(Limits(tenant_rate=1, tenant_rate_window_ms=10_000, max_tenants=2))
    assert limiter.admit("busy", "q", 0, retry_ms=50).admitted
    assert not limiter.admit("busy", "q", 1, retry_ms=50).admitted      # busy has been throttled
    assert limiter.admit("calm", "q", 2, retry_ms=50).admitted
    assert limiter.admit("new", "q", 3, retry_ms=50).admitted           # evicts calm, not busy
    assert not limiter.admit("busy", "q", 4, retry_ms=50).admitted


def test_a_spent_window_is_forgotten_before_any_live_one():
    limiter = Limiter(Limits(tenant_rate=2, tenant_rate_window_ms=1_000, max_tenants=2))
    assert limiter.admit("old", "q", 0, retry_ms=50).admitted
    assert limiter.admit("old", "q", 1, retry_ms=50).admitted
    assert limiter.admit("live", "q", 900, retry_ms=50).admitted
    assert limiter.admit("new", "q", 1_500, retry_ms=50).admitted       # old's window is spent
    assert limiter.admit("live", "q", 1_501, retry_ms=50).admitted     # its second of two
    assert not limiter.admit("live", "q", 1_502, retry_ms=50).admitted  # live kept its first start


def test_room_caps_a_claim_by_the_global_and_queue_ceilings_and_zero_leaves_none():
    limiter = Limiter(Limits(global_=3, queue=2))
    assert (limiter.room("q"), limiter.room("r")) == (2, 2)
    assert limiter.admit("a", "q", 0, retry_ms=50).admitted
    assert limiter.admit("b", "r", 0, retry_ms=50).admitted
    assert (limiter.room("q"), limiter.room("r")) == (1, 1)       # global: 3 - 2 in flight
    assert Limiter(Limits()).room("q") is None
    for zero in ("global_", "queue", "tenant", "tenant_rate"):
        assert Limiter(Limits(**{zero: 0})).room("q") == 0        # nothing is claimed to be shed


def test_blocked_tenants_are_those_at_their_ceiling_or_with_a_full_window():
    limiter = Limiter(Limits(tenant=1, tenant_rate=2, tenant_rate_window_ms=1000))
    assert limiter.admit("held", "q", 0, retry_ms=50).admitted
    assert limiter.admit(None, "q", 0, retry_ms=50).admitted       # "" stands for no tenant
    assert limiter.admit("busy", "q", 100, retry_ms=50).admitted
    limiter.release("busy", "q")
    assert limiter.admit("busy", "q", 200, retry_ms=50).admitted
    limiter.release("busy", "q")
    assert limiter.blocked_tenants(300) == ["", "busy", "held"]
    limiter.release("held", "q")
    limiter.release(None, "q")
    assert limiter.blocked_tenants(1_050) == ["busy"]              # its first start is still in the window
    assert limiter.blocked_tenants(1_100) == []


def test_spent_windows_are_swept_so_eviction_spares_the_live_tenants():
    limiter = Limiter(Limits(tenant_rate=1, tenant_rate_window_ms=1_000, max_tenants=2))
    assert limiter.admit("old", "q", 0, retry_ms=50).admitted
    assert not limiter.admit("old", "q", 1, retry_ms=50).admitted   # old was throttled, long ago
    assert limiter.admit("live", "q", 50_000, retry_ms=50).admitted
    assert limiter.snapshot()["tracked"] == {"tenants_in_flight": 2, "tenants_rated": 1, "refusals": 0}
    assert limiter.admit("new", "q", 50_001, retry_ms=50).admitted   # room: nothing to evict
    assert not limiter.admit("live", "q", 50_002, retry_ms=50).admitted   # live's window kept


@settings(max_examples=80, deadline=None)
@given(events=st.lists(st.tuples(st.integers(0, 500), st.sampled_from(["admit", "release"]),
                                 st.integers(0, 50)), max_size=400),
       max_tenants=st.integers(1, 20))
def test_tracked_state_stays_bounded_under_random_tenants(events, max_tenants):
    limiter = Limiter(Limits(tenant=3, tenant_rate=5, tenant_rate_window_ms=100, max_tenants=max_tenants))
    held: dict[str, int] = {}
    now = 0.0
    for tenant_no, action, step in events:
        now += step
        tenant = f"t{tenant_no}"
        if action == "admit":
            if limiter.admit(tenant, "q", now, retry_ms=10).admitted:
                held[tenant] = held.get(tenant, 0) + 1
        elif held.get(tenant):
            limiter.release(tenant, "q")
            held[tenant] -= 1
        snap = limiter.snapshot()
        assert snap["tracked"]["tenants_rated"] <= max_tenants
        assert snap["tracked"]["refusals"] <= max_tenants
        assert snap["tracked"]["tenants_in_flight"] == sum(1 for n in held.values() if n)
        assert snap["in_flight"]["global"] == sum(held.values())
