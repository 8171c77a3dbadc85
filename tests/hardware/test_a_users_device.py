"""A user's own device, from nothing to its generated tests passing on it, as the tutorial goes.

The tutorial's device computes on the CPU; here the device is real: ``acme_runtime``, the
vendor's package of the story, loads the project's test device as torch's 'acme' device with
its collective backend 'accl' (a PrivateUse1 extension, as a vendor's is). The flow is the
tutorial's: ``stratgen init`` with the Lightning target (and DeepSpeed's), a spec drafted
outside the project and added with ``stratgen new --from``, then the generated tests with the
vendor's package on the path: every one of them, the 2-process runs, FSDP2, DeepSpeed on the
accelerator generated from the spec and the Lightning plugins included, on ``acme:N`` tensors.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from stratcore.testing import clean_environ, watch

from tests.support import REPO
from tests.support.generator import run_cli

pytestmark = pytest.mark.slow

SPEC = """\
# Acme's training devices, through acme_runtime: a PrivateUse1 extension of torch that names the
# device 'acme' and registers Acme's collective library as 'accl' when it is imported.
version: 1

backends:
  - name: accl
    description: Acme's collective library, which acme_runtime registers.
    registered_by: acme_runtime  # acme_runtime/__init__.py: registers 'accl' for 'acme'
    reduce_ops: [sum, product, min, max]

accelerator:
  name: acme
  class_name: AcmeAccelerator
  product: "Acme: Acme's training devices"
  description: |-
    Accelerator for Acme's training devices, through acme_runtime.

    A process drives one device (torch.device('acme', i)).
  device_type: acme  # acme_runtime/__init__.py: rename_privateuse1_backend("acme")
  indexed: true
  requires:
    - {module: acme_runtime, install: pip install acme-runtime}
  is_available: acme_runtime:is_available
  device_count: acme_runtime:device_count
  set_device: acme_runtime:set_device
  visible_devices_env: ACME_VISIBLE_DEVICES
  backend: accl
  grad_scaler: true
  precision: {default: 32-true, supported: [32-true, 16-mixed, bf16-mixed]}

strategies:
  - name: acme_single
    class_name: SingleAcmeStrategy
    base: single_device
    description: Strategy for training on one Acme device.
    accelerators: [acme]

  - name: acme_ddp
    class_name: AcmeDDPStrategy
    extends: ddp
    description: DistributedDataParallel over Acme devices, one process per device.
    accelerators: [acme]

  - name: acme_fsdp
    class_name: AcmeFSDPStrategy
    extends: fsdp
    description: Fully sharded data parallel training (FSDP2) over Acme devices.
    accelerators: [acme]

  - name: acme_deepspeed
    class_name: AcmeDeepSpeedStrategy
    extends: deepspeed
    description: DeepSpeed's ZeRO engine on Acme devices.
    accelerators: [acme]
    aliases:
      acme_deepspeed_stage_2: {zero_stage: 2}
"""

#: The vendor's package: the test device named 'acme', its backend 'accl'.
ACME_RUNTIME = '''"""Acme's device software, as the test device: importing it makes the 'acme' device and
its 'accl' backend, as a vendor's PrivateUse1 extension does."""

import stratgen_testdevice
import torch

stratgen_testdevice.load("acme", "accl")


def is_available() -> bool:
    return torch.acme.is_available()


def device_count() -> int:
    return torch.acme.device_count()


def set_device(device) -> None:
    torch.acme.set_device(device)
'''


def test_a_device_of_ones_own_passes_its_generated_tests_on_it(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    pytest.importorskip("deepspeed")
    made = run_cli("init", tmp_path / "acme", "--package", "acmelib", "--defaults", "--lightning")
    assert made.code == 0, made.err
    project = tmp_path / "acme"
    pyproject = project / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    targets = 'targets = ["stratlib", "lightning"]'
    assert targets in text
    pyproject.write_text(
        text.replace(targets, 'targets = ["stratlib", "lightning", "deepspeed"]'),
        encoding="utf-8",
    )
    (project / "drafts").mkdir()
    (project / "drafts" / "acme.yaml").write_text(SPEC, encoding="utf-8")
    added = run_cli("new", "--from", "drafts/acme.yaml", cwd=project)
    assert added.code == 0, added.out + added.err
    assert run_cli("check", cwd=project).code == 0

    vendor = project / "vendor"
    vendor.mkdir()
    (vendor / "acme_runtime.py").write_text(ACME_RUNTIME, encoding="utf-8")
    environ = clean_environ(
        {"PYTHONPATH": os.pathsep.join([str(project / "src"), str(vendor), str(REPO)])}
    )
    tests = sorted((project / "tests" / "generated").glob("test_*acme*.py"))
    assert [t.name for t in tests] == ["test_acme.py", "test_lightning_acme.py"]
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs"]
    ran = watch.run([*command, *map(str, tests)], cwd=project, env=environ)
    assert ran.returncode == 0, ran.stdout[-6000:] + ran.stderr[-2000:]
    # Every case ran (the accelerator's "absent" case skips where the device is present).
    skipped = re.findall(r"^SKIPPED \[\d+\] .*$", ran.stdout, re.M)
    assert len(skipped) == 1 and "present" in skipped[0], skipped
    assert re.search(r"\b\d+ passed, 1 skipped\b", ran.stdout), ran.stdout[-2000:]
