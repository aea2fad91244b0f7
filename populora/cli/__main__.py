"""``python -m populora.cli ...``: the ``populora`` command (jobs and Ray Jobs start it this way)."""

import sys

from populora.cli import main

sys.exit(main())
