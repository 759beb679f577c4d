"""``python -m computedomains``."""

import sys

from computedomains.cli import main

sys.exit(main())
