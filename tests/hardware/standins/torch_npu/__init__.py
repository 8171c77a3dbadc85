"""Stand-in for Huawei's ``torch_npu``, used only by stratgen's tests.

Importing it renames torch's PrivateUse1 device to 'npu' and registers the 'hccl' backend for
it, as importing the real package does: the device is the project's test device
(``standin_devices.load_device``), STANDIN_NPU_COUNT devices (2 by default) trimmed by
ASCEND_RT_VISIBLE_DEVICES, whose collectives run gloo on the host under HCCL's name.

Written from Huawei's source, torch-npu 2.13.0 (the wheel on PyPI, built for torch 2.13.0,
which specs/npu.yaml cites); tests/hardware/test_standin_apis.py checks it against that source.
"""

from __future__ import annotations

import standin_devices

standin_devices.load_device("npu", "hccl", "STANDIN_NPU_COUNT", "ASCEND_RT_VISIBLE_DEVICES")
standin_devices.record("torch_npu imported")

from . import npu  # noqa: E402, F401
