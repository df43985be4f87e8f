"""The deterministic fault simulator (docs/guarantees.md): the real code, in-process moto, one seed.

kernel      the seeded scheduler: actor threads, one AWS call at a time, true and skewed clocks
wire        the botocore hooks: faults, moto dispatch, client-token idempotency, applied writes
faults      the fault kinds and a run's plan
queue       simulated SQS queues and provider (delivery and provider faults)
world       one run: tables, verdicts, `run_seed`
terms       lease-term invariants shared by every family that runs ticks
families    lease, work, listings (and the registry domain families are added to)
campaign    many seeds, the verdict, the share of runs per fault kind; the CLI's `sim`
"""
