"""Stand-in for ``torch_mlu.mlu.cnpx``, Cambricon's range annotations (CNPX, their NVTX), which
torch_mlu exposes as ``torch.mlu.cnpx`` and DeepSpeed's MLU accelerator calls around its work
(deepspeed/accelerator/mlu_accelerator.py: range_push, range_pop). Here a range only counts."""

from __future__ import annotations

_open: list[str] = []


def range_push(msg: str) -> int:
    """Open a range named ``msg``; returns how deep the ranges now nest, less one."""
    _open.append(msg)
    return len(_open) - 1


def range_pop() -> int:
    """Close the innermost range; returns how deep they nested before, less one."""
    depth = len(_open) - 1
    if _open:
        _open.pop()
    return depth


def mark(msg: str) -> None:
    """A point in time named ``msg``."""
