"""Stand-in for ``horovod.torch`` of a GPU build (CUDA devices, NCCL), used only by stratgen's
tests.

The real Horovod (0.28.1 with Gloo, built by .ci/horovod) runs the Horovod tests here on the
CPU: training, collectives, compression, checkpoints, failing ranks (tests/runtime/wrappers/horovod, and the
generated tests of specs/horovod.yaml). What it cannot show here is the spec on CUDA devices:
tests/hardware/test_generated_on_standins.py runs those generated tests with stand-in CUDA
devices, and they need ``horovod.torch`` only to be found (building the strategy for CUDA
imports nothing of Horovod). Written from horovod 0.28.1's ``horovod/torch/__init__.py``, the
module a strategy's requirement names; it has none of its functions, so that nothing can pass
against it by calling Horovod: that is tested on the real package.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    raise AttributeError(
        f"the horovod.torch stand-in has no {name!r}: Horovod itself is tested on the real "
        "package (tests/runtime/wrappers/horovod)"
    )
