"""Settings for every test of this repository: tests/ and generated/tests/.

The commands tests start that import torch first start from preload servers
(``stratcore.testing.preloading``; benchmarks: ``python -m benchmarks --only preload``).
"""

pytest_plugins = ["stratcore.testing.preloading"]
