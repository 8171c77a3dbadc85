"""Stand-in for Cambricon's ``torch_mlu``, used only by stratgen's tests.

Importing it renames torch's PrivateUse1 device to 'mlu' and registers the 'cncl' backend for
it, as importing the real package does: the device is the project's test device
(``standin_devices.load_device``), STANDIN_MLU_COUNT devices (2 by default) trimmed by
MLU_VISIBLE_DEVICES, whose collectives run gloo on the host under CNCL's name.

Written from Cambricon's source, torch_mlu 1.22.2 for torch 2.1.0 (Cambricon/torch_mlu on
GitHub, branch r1.22_pt2.1.0), which is not on PyPI: torch_mlu/mlu/__init__.py (is_available,
is_bf16_supported), device.py (device_count, set_device), memory.py (empty_cache), cncl.py (the
backend). specs/mlu.yaml names the file of each fact it states.
"""

from __future__ import annotations

import standin_devices

standin_devices.load_device("mlu", "cncl", "STANDIN_MLU_COUNT", "MLU_VISIBLE_DEVICES")
standin_devices.record("torch_mlu imported")

from . import mlu  # noqa: E402
from .mlu import cnpx  # noqa: E402

# torch_mlu extends the device module with its own parts, as torch.mlu.cnpx.
if mlu.is_available():
    import torch

    torch.mlu.cnpx = cnpx  # type: ignore[attr-defined]
