"""Loopback HTTP stubs of external providers' APIs (the real adapters are pointed at them locally).

The embedded runtime (`jobfence_ops.runtime.providers`) starts `ops/stubs/<provider>.py`
for every provider a deployed function calls (its `PROVIDER_<NAME>_URL`) and
points that variable at it. A stub module defines either
`start_local(clock) -> (stub, base_url, secret_value)` or one `<Name>Stub(clock)`
class with `start() -> base_url` and `stop()`; a stub with `client_id` and
`client_secret` (or a `start_local` secret value) also seeds the secrets its
module names in `SECRETS` (default: the provider's name) in the emulator's
Secrets Manager.
"""
