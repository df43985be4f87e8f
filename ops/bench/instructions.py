"""Instructions a Python statement executes in a fresh interpreter, counted by valgrind.

CPU seconds of a cold start move by 10% and more from one run to the next on a shared machine (other
processes, caches, the host), so a figure a few hundredths from a goal lands on either side of it. An
instruction count does not: valgrind's cachegrind (`--cache-sim=no`: it only counts) runs the interpreter on a
simulated CPU and reports the instructions it executed, the same for the same binary, code and environment
whatever else runs beside it (with `PYTHONHASHSEED` fixed: a function's init counted three times, each from
its own staged copy of the code, came out the same to 0.1 M of 1,871 M on 2026-12-05; without it, about 0.2%
apart). It is the repeatable measure of the work an init does; it leaves out what that work waits on
(cache misses, page faults, reads), which CPU seconds include, so the two are shown side by side.

A statement's count includes the interpreter's own start and exit: `instructions(statement) -
instructions("pass")` is the statement's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Hashable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

VALGRIND = ("valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null")
HASH_SEED = "0"  # a fixed string hash: dict and set layouts, and so the work, the same on every run
_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


class CountFailed(RuntimeError):
    """valgrind is missing, or the statement failed under it (the message ends with its stderr)."""


def refs(stderr: str) -> int:
    """The instruction count of cachegrind's summary (`==pid== I   refs:      1,027,527,211`)."""
    found = _REFS.search(stderr)
    if found is None:
        raise CountFailed("no instruction count in valgrind's output:\n" + stderr[-1500:])
    return int(found.group(1).replace(",", ""))


def instructions(statement: str, env: Mapping[str, str], cwd: str | None = None) -> int:
    """Instructions `python -S -c statement` executes under `env` (its start and exit included)."""
    if shutil.which(VALGRIND[0], path=env.get("PATH") or os.environ.get("PATH")) is None:
        raise CountFailed("valgrind is not on the PATH: install Debian's valgrind package")
    done = subprocess.run(
        [*VALGRIND, sys.executable, "-S", "-c", statement],
        env={**env, "PYTHONHASHSEED": HASH_SEED},
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise CountFailed(f"the statement failed under valgrind (exit {done.returncode}):\n" + done.stderr[-1500:])
    return refs(done.stderr)


@dataclass(frozen=True)
class Counted:
    """Instructions of each statement asked, by its key, less those of an interpreter that runs nothing
    (`interpreter`: its start and exit, in every count)."""

    interpreter: int
    counts: Mapping[Hashable, int]

    def ratio(self, key: Hashable, floor: Hashable) -> float:
        """`key`'s instructions as a multiple of `floor`'s."""
        return self.counts[key] / self.counts[floor]


def count_all(
    asks: Mapping[Hashable, tuple[str, Mapping[str, str]]], env: Mapping[str, str], cwd: str | None = None
) -> Counted:
    """Each (statement, environment) of `asks` counted once (a count is repeatable: one run is the figure), and
    `pass` under `env`, on every core at once (a count does not depend on what runs beside it)."""
    keys = list(asks)
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        empty = pool.submit(instructions, "pass", env, cwd)
        done = list(pool.map(lambda key: instructions(*asks[key], cwd), keys))
    interpreter = empty.result()
    return Counted(interpreter, {key: total - interpreter for key, total in zip(keys, done, strict=True)})


# What defining one class costs, in instructions: the excess of every function over its floor is mostly its own
# classes (each `ops.bench.instructions` count of ten such classes, less the count of the imports alone, over ten).
CLASS_FIELDS = (3, 12, 24)
_CLASS_PREAMBLE = "from __future__ import annotations\nimport dataclasses, enum\n"


def class_costs(env: Mapping[str, str]) -> list[str]:
    """The page's table of what one class costs: a frozen dataclass of 3, 12 and 24 fields, and a str enum."""
    fields = {n: "".join(f"    f{i}: int | None = None\n" for i in range(n)) for n in CLASS_FIELDS}
    kinds = {
        f"frozen dataclass, {n} fields": "@dataclasses.dataclass(frozen=True)\nclass C{i}:\n" + fields[n]
        for n in CLASS_FIELDS
    }
    kinds["str enum, 4 members"] = "class C{i}(str, enum.Enum):\n    A = 'a'\n    B = 'b'\n    C = 'c'\n    D = 'd'\n"
    asks: dict[Any, tuple[str, Mapping[str, str]]] = {
        kind: (_CLASS_PREAMBLE + "".join(body.replace("{i}", str(i)) for i in range(10)), env)
        for kind, body in kinds.items()
    }
    asks["imports"] = (_CLASS_PREAMBLE, env)
    counted = count_all(asks, env)
    per_class = {kind: (counted.counts[kind] - counted.counts["imports"]) / 10 for kind in kinds}
    return [
        "What one class costs to define, counted the same way (ten of each, less their imports; `class_costs`): "
        "a function's excess over its floor is mostly its own classes, each one's generated methods compiled at "
        "its init.",
        "",
        "| class | M instructions |",
        "|---|---:|",
        *(f"| {kind} | {each / 1e6:.1f} |" for kind, each in per_class.items()),
        "",
    ]
