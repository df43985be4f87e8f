"""Ports to external services, their offline fakes, and their real adapters.

Job code depends on a port (a `Protocol` and its typed errors); the composition
root picks the real adapter (over HTTP) or the offline fake (unit tests).
"""
