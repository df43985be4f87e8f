"""The local runtime kept running in the background (`jobfence local up`): `daemon` and its `control`."""
