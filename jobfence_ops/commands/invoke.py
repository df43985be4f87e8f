"""Invoking a function (or a job's function) with a sample event from `events/`."""

from __future__ import annotations

import json
import pathlib
from typing import Any

from jobfence_ops.runtime.workers import Invocation
from jobfence_ops.targets import OperatorError, Target

EVENTS = pathlib.Path(__file__).resolve().parents[2] / "events"


def event_path(event_file: str) -> pathlib.Path:
    """A sample event by name (`events/<name>.json`) or by path; ValueError when there is none."""
    path = pathlib.Path(event_file)
    if path.is_file():
        return path
    candidate = EVENTS / (event_file if event_file.endswith(".json") else f"{event_file}.json")
    if not candidate.is_file():
        raise ValueError(f"no event file {event_file!r} (looked for {path} and {candidate})")
    return candidate


def load_event(path: pathlib.Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON: {exc}") from None


def invoke(target: Target, function: str, event: Any) -> Invocation:
    """Invoke a function (its name, or a job's name) with an event."""
    functions = target.topology.functions
    jobs = target.topology.job_functions()
    if function in functions:
        name = function
    elif function in jobs:
        name = jobs[function].name
    else:
        raise OperatorError(f"no deployed function {function!r}; functions: {', '.join(sorted(functions))}")
    return target.invoke(name, event)
