"""``python -m benchmarks.gpu``: see ``benchmarks/gpu/run.py``."""

import sys

from benchmarks.gpu.run import main

sys.exit(main())
