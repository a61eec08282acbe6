"""`python -m scheduler.simulation` entry point (see `cli`)."""

import sys

from .cli import main

sys.exit(main())
