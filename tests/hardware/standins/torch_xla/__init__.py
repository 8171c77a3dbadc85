"""Stand-in for ``torch_xla``, used only by stratgen's tests.

It is not PyTorch/XLA: its "XLA device" is the CPU, its process group is gloo, its spawn starts
CPU processes with torch.multiprocessing, and it records the calls stratlib makes (see
``standin_events``).

Written from PyTorch/XLA's source, torch_xla 2.9.0 (the wheel on PyPI, the release
specs/xla.yaml installs); tests/hardware/test_standin_apis.py checks it against that source.
"""

from __future__ import annotations

import torch


def device(index: int | None = None) -> torch.device:
    return torch.device("cpu")
