"""One embedded runtime per test session: deploy into moto (the synth is cached), warm isolates.

Starting it costs a CloudFormation deploy into moto (and, the first time for a
given checkout, a CDK synth), so every sim test shares it and leaves it as it
found it where that matters (rules and workers re-enabled, the clock only
ever moves forward). The test process's own stores point at its emulator.
"""

from __future__ import annotations

import os
import pathlib

import pytest

from jobfence_ops.emulator import environment_for
from jobfence_ops.runtime.runtime import LocalRuntime
from jobfence_ops.targets import EmbeddedTarget
from tests.sim.browser import browser, console, page  # noqa: F401  (the console's browser fixtures)
from tests.sim.chained import serving

HERE = pathlib.Path(__file__).parent


def pytest_collection_modifyitems(items):
    """Every test here runs on (or beside) the deployed runtime, which costs a deploy before the first: `slow`."""
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def runtime():
    rt = LocalRuntime.start()
    patch = pytest.MonkeyPatch()
    for key, value in environment_for(str(rt.emulator.endpoint), rt.emulator.region).items():
        patch.setenv(key, value)  # undone at the end of the session
    patch.delenv("AWS_PROFILE", raising=False)
    try:
        yield rt
    finally:
        patch.undo()
        rt.stop()


@pytest.fixture
def target(runtime):
    return EmbeddedTarget(runtime)


@pytest.fixture
def aws_environment_kept(monkeypatch):
    """The process's AWS environment as it was before the test, whatever the test pointed it at: a
    `LocalTarget` points this process at its runtime's emulator (pynamodb reads the environment), and that
    emulator may be gone once the test ends."""
    for key in (*environment_for("http://127.0.0.1:1"), "AWS_PROFILE"):
        if key in os.environ:
            monkeypatch.setenv(key, os.environ[key])
        else:
            monkeypatch.delenv(key, raising=False)


@pytest.fixture
def local_dir(runtime, tmp_path, monkeypatch, aws_environment_kept):
    """The session's runtime served as the background local runtime; `--local` commands reach it."""
    with serving(runtime, tmp_path):
        monkeypatch.setenv("JOBFENCE_LOCAL_DIR", str(tmp_path))
        yield tmp_path
