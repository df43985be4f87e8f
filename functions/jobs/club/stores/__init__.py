"""Store modules of the club tables: one module per table, its pynamodb model private to it."""
