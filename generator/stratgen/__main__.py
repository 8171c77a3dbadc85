"""``python -m stratgen``."""

import sys

from .cli import main

sys.exit(main())
