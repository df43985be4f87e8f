"""What the operator commands do, by group, against any `jobfence_ops.targets.Target`.

`jobs` (status, runs, run, run-all), `batches` (list, rows first, submit,
retry failed), `switches` (rules and queue workers), `invoke` (a function with
a sample event), `scaffold` (`new job`: a job's module, entry, test and event;
it writes files in the app, no target). Each returns typed results; `jobfence_ops.cli` and `jobfence_ops.console`
render them.
"""
