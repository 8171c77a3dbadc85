"""Stand-in for Cambricon's ``torch_mlu``, used only by stratgen's tests (CPU only).

Importing it registers the 'cncl' backend, as importing the real package does (here gloo
underneath). Like the other stand-ins, it leaves torch's PrivateUse1 device unnamed: its
processes use the CPU.

Written from Cambricon's source, torch_mlu 1.22.2 for torch 2.1.0 (Cambricon/torch_mlu on
GitHub, branch r1.22_pt2.1.0), which is not on PyPI: torch_mlu/mlu/__init__.py (is_available,
is_bf16_supported), device.py (device_count, set_device), memory.py (empty_cache), cncl.py (the
backend). specs/mlu.yaml names the file of each fact it states.
"""

from __future__ import annotations

import standin_devices

standin_devices.record("torch_mlu imported")

from . import mlu  # noqa: E402, F401
