"""``python -m olympia.cli``."""

import sys

from olympia.cli import main

sys.exit(main())
