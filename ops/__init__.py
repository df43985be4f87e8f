"""Operator tooling: the embedded local runtime, the operator CLI and the benchmarks."""
