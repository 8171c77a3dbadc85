"""Settings of every test under tests/: one OpenMP thread a process, the package the runtime's
test support names, and the hypothesis profiles (the folders below add their own)."""

from __future__ import annotations

import os

# Every test process, and each process the tests start, runs one OpenMP thread: the suite runs
# several processes per core (see stratcore.testing.clean_environ). Set before torch loads.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from hypothesis import HealthCheck, settings  # noqa: E402
from stratcore import testing  # noqa: E402

# Scenarios and assertions of the runtime's test support name strategies of stratlib.
testing.use_package("stratlib")

# The default profile is seeded (the same examples every run, a failure reproduces) and
# bounded by each test's max_examples; the long one explores with fresh examples.
settings.register_profile(
    "stratgen",
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    print_blob=True,
)
settings.register_profile(
    "stratgen-long",
    parent=settings.get_profile("stratgen"),
    derandomize=False,
    max_examples=1000,
)
settings.load_profile(os.environ.get("STRATGEN_HYPOTHESIS_PROFILE", "stratgen"))
