"""Opt-in plugin: each test's CPU time, for tests/measured_slow.txt (`-p tests.cpu_time --cpu-durations=1.0`).

pytest's `--durations` reports wall time, which a shared machine inflates by its load; CPU time
(`time.process_time`, every thread of the process, so an in-process moto server counts) does not
move with the load. Run it serially (`-n 0`): under xdist each worker measures its own tests, and
the report is the controller's, which runs none.
"""

from __future__ import annotations

import time

import pytest

_SPENT: dict[str, float] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-durations", type=float, default=1.0, help="list tests that took this many CPU-seconds or more")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    start = time.process_time()
    yield
    _SPENT[item.nodeid] = time.process_time() - start


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    floor = config.getoption("--cpu-durations")
    heavy = sorted(((spent, node) for node, spent in _SPENT.items() if spent >= floor), reverse=True)
    terminalreporter.section(f"tests of {floor} CPU-seconds or more ({len(heavy)} of {len(_SPENT)}; all: {sum(_SPENT.values()):.1f} CPU-s)")
    for spent, node in heavy:
        terminalreporter.write_line(f"{spent:7.2f}  {node}")
