"""Operator tooling: the embedded local runtime, the operator CLI, the web console and the benchmarks.

`functions/` is the Lambda asset root: its packages (`jobfence`, `jobs`,
`providers`) import as top-level modules there, so the tooling puts it on the
path once, here, before any of its modules imports them.
"""

import pathlib
import sys

_FUNCTIONS = str(pathlib.Path(__file__).resolve().parents[1] / "functions")
if _FUNCTIONS not in sys.path:
    sys.path.insert(0, _FUNCTIONS)
