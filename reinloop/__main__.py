"""`python -m reinloop`, the same as the `reinloop` command."""

import sys

from reinloop.cli import main

# Guarded: worker processes of process-isolated tools import the main module.
if __name__ == "__main__":
    sys.exit(main())
