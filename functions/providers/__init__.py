"""Ports to external services, their offline fakes, and their real adapters.

Job code depends on a port (a `Protocol` and the one error vocabulary of
`providers.errors`); the composition root picks the real adapter (over the one
HTTP client, `providers.http`) or the offline fake beside the port
(`providers/<port>_fake.py`: unit tests and the simulator; never deployed).
"""
