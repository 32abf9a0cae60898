"""``make_arbiter``: start an ``Arbiter`` over fake roles; every one made is closed after the test."""

from __future__ import annotations

import pytest

from tests.supervisor.harness import FAST, SETTINGS, RecordingProbe
from xjobs.supervisor.arbiter import Arbiter
from xjobs.supervisor.reload import Configuration


@pytest.fixture
def make_arbiter():
    made: list[Arbiter] = []

    def build(specs, *, options=FAST, settings=None, configure=None, notifier=None) -> Arbiter:
        # configure() -> (settings, specs): what a reload reads; these roles run no app code
        configuration = None if configure is None else Configuration(
            read=lambda: configure()[0], groups=lambda settings: configure()[1])
        arbiter = Arbiter(settings or SETTINGS, specs, options=options,
                          probe=RecordingProbe(), configuration=configuration, notifier=notifier)
        made.append(arbiter)
        arbiter.start()
        return arbiter

    yield build
    for arbiter in made:
        arbiter.close()
