"""The billing team's jobs: one scheduled job over its own invoices table (a jobfence example app)."""
