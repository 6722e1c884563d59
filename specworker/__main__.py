"""`python -m specworker ...`: see specworker.cli."""

import sys

from specworker.cli import main

if __name__ == "__main__":
    sys.exit(main())
