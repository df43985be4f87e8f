"""What the operator commands do, by group, against any `ops.targets.Target`.

`jobs` (status, runs, run, run-all), `batches` (list, rows first, submit,
retry failed), `switches` (rules and queue workers), `invoke` (a function with
a sample event). Each returns typed results; `ops.cli` and `ops.console`
render them.
"""
