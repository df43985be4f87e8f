"""Loopback HTTP stubs of external providers' APIs (the real adapters are pointed at them locally).

The embedded runtime (`ops.runtime.providers`) starts `ops/stubs/<provider>.py`
for every provider a deployed function calls (its `PROVIDER_<NAME>_URL`) and
points that variable at it. A stub module defines either
`start_local(clock) -> (stub, base_url, secret_value)` or one `<Name>Stub(clock)`
class with `start() -> base_url` and `stop()`; a stub with `client_id` and
`client_secret` also seeds the provider's secret in the emulator's Secrets Manager.
"""
