"""`python -m jobfence_ops COMMAND`: the operator CLI (see `jobfence_ops.cli`)."""

from jobfence_ops.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
