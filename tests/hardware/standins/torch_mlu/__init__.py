"""Stand-in for Cambricon's ``torch_mlu``, used only by stratgen's tests (CPU only).

Importing it registers the 'cncl' backend, as importing the real package does (here gloo
underneath). Like the other stand-ins, it leaves torch's PrivateUse1 device unnamed: its
processes use the CPU.
"""

from __future__ import annotations

import standin_devices

standin_devices.record("torch_mlu imported")

from . import mlu  # noqa: E402, F401
