"""This repository's own tooling over its app: the benchmarks, the fault simulator's families and campaigns,
the demo day and its seeds, the provider stubs, the signing-key rotation, the policy evaluator and the API page
generator. The operator tooling any app runs (CLI, console, local runtime) is `jobfence_ops`; this
repository's pyproject.toml names its app's hooks for it (`ops.this_app`, `ops.app_commands`).

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
