"""One embedded runtime per test session: synth, deploy into moto, warm isolates.

Starting it costs a CDK synth and a CloudFormation deploy (tens of seconds), so
every sim test shares it and leaves it as it found it where that matters
(rules re-enabled, the clock only ever moves forward).
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def runtime():
    from ops.runtime.runtime import LocalRuntime

    rt = LocalRuntime().start()
    try:
        yield rt
    finally:
        rt.stop()


@pytest.fixture
def target(runtime):
    from ops.operator import EmbeddedTarget

    target = EmbeddedTarget(runtime)
    with target.environment():
        yield target
