"""Stand-in for Huawei's ``torch_npu``, used only by stratgen's tests (CPU only).

Importing it registers the 'hccl' backend, as importing the real package does (here gloo
underneath, so that HCCL's rules, applied by stratlib, run on CPUs). It does not rename torch's
PrivateUse1 device to 'npu': torch then expects the device's runtime hooks, which only the
real package has, and the stand-in's processes use the CPU.

Written from Huawei's source, torch-npu 2.13.0 (the wheel on PyPI, built for torch 2.13.0,
which specs/npu.yaml cites); tests/hardware/test_standin_apis.py checks it against that source.
"""

from __future__ import annotations

import standin_devices

standin_devices.register_backend("hccl")
standin_devices.record("torch_npu imported")

from . import npu  # noqa: E402, F401
