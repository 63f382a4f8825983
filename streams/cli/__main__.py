"""`python -m omstream.cli`: how `om` starts its own children (`omstream.processes`)."""

import sys

from . import main

sys.exit(main())
