"""The fault simulator over this repository's catalog (docs/guarantees.md).

The simulator's core is the test kit's (`jobfence.testing.sim`: kernel, wire, faults, queues, world,
terms, the scheduled-job scenario); this package holds what is this application's:

families    lease, work, listings, club, safety_net (and the registry domain families are added to)
campaign    many seeds, the verdict, the share of runs per fault kind; the CLI's `sim`
"""
