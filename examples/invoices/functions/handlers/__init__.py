"""Lambda entry points of the invoices app (the jobfence-cdk constructs name `handlers.scheduled.handler`)."""
