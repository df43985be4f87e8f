"""The embedded local runtime (docs/local-runtime.md).

The system runs on moto's server on loopback from the very template `cdk
deploy` uses: `template` synthesizes the CDK app and deploys it into the
emulator's CloudFormation; `topology` reads the rules, functions, queues and
event-source mappings back from the emulator (or a real account); `workers`
runs each function in its own warm process (`worker` is that process's main);
`schedule` fires EventBridge ticks on the simulated clock (a `FrozenClock` only
the driver moves, sent to each isolate with every invocation); `sqs` delivers queue
batches with partial failures, visibility timeouts and DLQ redrive on that same
clock. `runtime.LocalRuntime` composes them.

Nothing is imported here: a worker process imports `jobfence_ops.runtime.worker` before
it has put its function's code on the path, and must not pull the runtime in.
"""
