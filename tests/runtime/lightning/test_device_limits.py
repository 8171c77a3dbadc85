"""Lightning plugins of a device of the project's own, backed by CPU processes, for strategies
extending fsdp, deepspeed and ddp_spawn (cases the conformance property found).

Lightning's DeepSpeedStrategy needs each process's device index to be its local rank, so a
device addressed as a whole gets no DeepSpeed plugin; its FSDPStrategy wraps the model in torch's
FSDP1, which needs a non-CPU device: no plugin where Lightning refuses every accelerator of the
strategy, and an honest skip where only this machine's devices are refused. A spawning strategy trains with the Trainer and with Fabric (whose launch needs the
training function), in double precision, to the weights of one process training in double.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from stratcore.testing import watch

from tests.support.generator import make_project, run_cli

pytest.importorskip("lightning", reason="the Lightning target needs lightning>=2.6,<2.7")

SPEC = """\
version: 1
accelerator:
  name: conf
  class_name: ConfAccelerator
  description: A made-up device; each device is a CPU process.
  device_type: cpu
  indexed: false
  backend: gloo
strategies:
  - name: conf_fsdp
    class_name: ConfFSDPStrategy
    extends: fsdp
    description: FSDP on the made-up device.
    accelerators: [conf]
  - name: conf_deepspeed
    class_name: ConfDeepSpeedStrategy
    extends: deepspeed
    description: DeepSpeed on the made-up device.
    accelerators: [conf]
  - name: conf_deepspeed_cuda
    class_name: ConfDeepSpeedCUDAStrategy
    extends: deepspeed
    description: DeepSpeed on the made-up device or on CUDA GPUs.
    accelerators: [conf, cuda]
  - name: conf_spawn
    class_name: ConfSpawnStrategy
    extends: ddp_spawn
    description: Spawned DDP on the made-up device, in double precision.
    accelerators: [conf]
    precision: {default: 64-true, supported: [32-true, 64-true]}
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = make_project(
        tmp_path_factory.mktemp("limits") / "project",
        {"conf.yaml": SPEC},
        base=False,
        builtin=True,
        config='targets = ["stratlib", "lightning"]\n',
    )
    result = run_cli("generate", "--project", root)
    assert result.code == 0, result.err
    return root


@pytest.mark.parametrize("framework", ["pytorch", "fabric"])
def test_no_plugin_where_lightning_refuses_every_accelerator(project: Path, framework: str) -> None:
    source = (project / "out" / "minilib" / "lightning" / framework / "conf.py").read_text()
    assert "class ConfFSDPStrategy(StrategyAdapter, FSDPStrategy)" in source
    assert "class ConfDeepSpeedCUDAStrategy(DeepSpeedAdapter, DeepSpeedStrategy)" in source
    assert "ConfDeepSpeedStrategy" not in source  # conf's devices carry no index


def test_the_generated_tests_pass_or_skip_saying_why(project: Path) -> None:
    tests = project / "out" / "tests" / "test_lightning_conf.py"
    pytest = [sys.executable, "-m", "pytest", "-v", "-rs", "-p", "no:cacheprovider"]
    done = watch.run(
        [*pytest, str(tests)],
        cwd=project / "out",
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(project / "out"), *sys.path])},
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    fsdp1 = [line for line in skipped if "torch's FSDP1, which needs a non-CPU device" in line]
    # The Trainer and Fabric training tests of conf_fsdp; the CUDA DeepSpeed plugin skips for
    # want of a GPU or for Lightning's limit, whichever this machine meets first.
    assert len(fsdp1) >= 1, done.stdout[-4000:]
    assert "accelerator 'conf' drives 'cpu' devices here" in fsdp1[0]
    for framework in ("pytorch", "fabric"):
        trained = f"test_trains_like_one_process[{framework}-conf_spawn] PASSED"
        assert trained in done.stdout, done.stdout[-4000:]
