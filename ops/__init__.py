"""Operator tooling: the embedded local runtime, the operator CLI, the web console and the benchmarks.

`functions/` is the Lambda asset root: its packages (`jobfence`, `jobs`,
`providers`) import as top-level modules there, so the tooling puts it on the
path once, here, before any of its modules imports them; `infra/` holds the CDK
constructs' package (`jobfence_cdk`), which the local runtime synthesizes with.
"""

import pathlib
import sys

_ROOT = pathlib.Path(__file__).resolve().parents[1]
for _path in (str(_ROOT / "infra"), str(_ROOT / "functions")):  # the constructs' source, then the asset first
    if _path not in sys.path:
        sys.path.insert(0, _path)
