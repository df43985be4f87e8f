"""The job catalog, one package per source system (see `jobs/catalog.py`)."""
