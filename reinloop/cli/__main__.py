"""`python -m reinloop.cli`, the same as the `reinloop` command."""

import sys

from reinloop.cli import main

sys.exit(main())
