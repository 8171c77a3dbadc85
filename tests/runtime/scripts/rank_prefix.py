"""A rank prefix (STRATLIB_RANK_PREFIX) that starts the rank as a child of its own, as a
profiler such as ``nsys profile`` does: it appends its command line to the file PREFIX_LOG
names, then runs that command and ends with its exit code."""

import os
import subprocess
import sys

with open(os.environ["PREFIX_LOG"], "a", encoding="utf-8") as log:
    log.write(f"{os.getpid()} {' '.join(sys.argv[1:])}\n")
sys.exit(subprocess.call(sys.argv[1:]))
