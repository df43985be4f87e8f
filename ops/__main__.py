"""`python -m ops COMMAND`: the operator CLI (see `ops.cli`)."""

from ops.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
