"""Stand-in for ``torch_xla``, used only by stratgen's tests.

It is not PyTorch/XLA: its "XLA device" is the CPU, its process group is gloo, its spawn starts
CPU processes with torch.multiprocessing, and it records the calls stratlib makes (see
``standin_events``).
"""

from __future__ import annotations

import torch


def device(index: int | None = None) -> torch.device:
    return torch.device("cpu")
