"""Run one scenario (see ``stratcore.testing.cli``): the scenario functions live in
``stratcore.testing.scenarios``, so they pickle under that name when a launcher sends them to new
processes."""

import sys

from .cli import main

sys.exit(main())
