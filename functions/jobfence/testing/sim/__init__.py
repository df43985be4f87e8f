"""The deterministic fault simulator (docs/guarantees.md): the real code, in-process moto, one seed.

The test kit's own, so `jobfence.testing.simulate` needs no operator tooling: nothing here imports an
app (a family names its catalog, `Family.registry`) nor `ops` (whose `ops.sim` adds this repository's
families and the campaigns over them).

kernel      the seeded scheduler: actor threads, one AWS call at a time, true and skewed clocks
wire        the botocore hooks: faults, moto dispatch, client-token idempotency, applied writes
faults      the fault kinds and a run's plan
queue       simulated SQS queues and provider (delivery and provider faults)
world       one run: tables, verdicts, the `Family` protocol, `run_seed`
terms       lease-term invariants shared by every family that runs ticks
scheduled   one scheduled job under faults (the scenario `job` and the operator's lease family extend)
job         any catalog's job, judged by its author's invariant: what `simulate` runs
pipeline    any catalog's per-item pipeline around its reclaim job: what `simulate(..., pipelines=...)` runs
batch_checks the work invariants 5-9 over a work store's rows (the pipeline scenario's, and the demo's)
markers     a bare row written in a fenced transaction (the scenario's audit rows; probes, benches)
"""
