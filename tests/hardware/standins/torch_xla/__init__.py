"""Stand-in for ``torch_xla``, used only by stratgen's tests.

It is not PyTorch/XLA: its "XLA device" is the CPU, its process group is gloo, its spawn starts
CPU processes with torch.multiprocessing, and it records the calls stratlib makes (see
``standin_events``).

Written from PyTorch/XLA's source, torch_xla 2.9.0 (the wheel on PyPI, the release
specs/xla.yaml installs); tests/hardware/test_standin_apis.py checks it against that source.

Moving a module onto its device gives the module new Parameter objects, as moving it onto a
real XLA device does: torch cannot turn a CPU tensor into an XLA tensor in place
(``torch._has_compatible_shallow_copy_type`` is false between the two), so
``nn.Module._apply`` (torch/nn/modules/module.py, torch 2.9) puts the moved tensor into a new
Parameter, and an optimizer made before the move still holds the old ones (seen with torch_xla
2.9 on an XLA:CPU device; Lightning Fabric's ``_move_model_to_device`` maps them for this
reason). The stand-in's device is the CPU, where torch keeps the Parameters unless told
otherwise; importing the stand-in tells it to replace them on every conversion, a move or a
change of dtype (with the real package, a change of dtype keeps them, on the CPU as on the XLA
device: stricter here).
"""

from __future__ import annotations

import torch

torch.__future__.set_overwrite_module_params_on_conversion(True)


def device(index: int | None = None) -> torch.device:
    return torch.device("cpu")
