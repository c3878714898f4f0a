"""``python -m taugate.cli``."""

import sys

from taugate.cli import main

sys.exit(main())
