"""Backoffice jobs (seed 000): the operator-access ledger cleanup, separate from the commerce API."""
