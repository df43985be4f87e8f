"""Loopback HTTP stubs of external providers' APIs (the real adapters are pointed at them locally)."""
