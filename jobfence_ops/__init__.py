"""jobfence's operator tooling for any app: the CLI (`jobfence`), the web console and the local runtime.

Which app it works on is found by `jobfence_ops.app` (`--app MODULE:ATTR`, `$JOBFENCE_APP`, or
`[tool.jobfence] app` in the app's pyproject.toml); nothing here imports an app.
"""
