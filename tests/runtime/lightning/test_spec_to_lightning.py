"""One spec, written for stratlib alone, becomes a Lightning plugin with no other file.

The spec describes a made-up device, 'acme', as a vendor would: a collective library
registered when the job starts (gloo underneath), which can only sum and take maxima and
cannot reduce int64, step hooks after every backward pass and optimizer step, bf16-mixed by
default, and a job scheduler of its own. ``stratgen generate --target lightning`` turns it into
plugins for Lightning's Trainer and Fabric. Then:

- the project's generated Lightning tests pass (registries; a Trainer and a Fabric loop on one
  and on two CPU processes, like one process on the whole batch, also with a strategy that
  extends 'model_parallel', on Lightning's ModelParallelStrategy);
- an ordinary Lightning training script, which only imports the plugins and names them,
  trains on 2 CPU ranks started by Lightning, and on 2 ranks started by the scheduler, and
  ends with the weights of one process.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from stratcore.testing import (
    assert_parameters_close,
    clean_environ,
    reference_parameters,
    watch,
)
from stratcore.testing.processes import run_given_a_port

from tests.support import REPO

pytest.importorskip("lightning")

ROOT = REPO
STEPS = 3

DEVICE = '''\
"""Acme's device software: availability probes, step hooks and its collective library."""

import os

import torch.distributed as dist

CALLS = {"init": 0, "after_backward": 0, "after_optimizer_step": 0}


def is_available() -> bool:
    return True


def device_count() -> int:
    return int(os.environ.get("ACME_DEVICES", "4"))


def register_backend() -> None:
    """Register 'acmecl', Acme's collectives (gloo underneath)."""
    CALLS["init"] += 1
    if "acmecl" not in dist.Backend.backend_list:
        dist.Backend.register_backend(
            "acmecl",
            lambda store, rank, size, timeout: dist.ProcessGroupGloo(store, rank, size, timeout),
            devices=["cpu"],
        )


def after_backward() -> None:
    CALLS["after_backward"] += 1


def after_optimizer_step() -> None:
    CALLS["after_optimizer_step"] += 1
'''

SPEC = """\
# Acme's (imaginary) training device, written for stratlib.
version: 1

backends:
  - name: acmecl
    description: Acme's collective library.
    init_hook: acmedev:register_backend
    reduce_ops: [sum, max]
    casts: {int64: float64}

accelerator:
  name: acme
  class_name: AcmeAccelerator
  description: Acme's training device; each device is a CPU process.
  device_type: cpu
  indexed: false
  is_available: acmedev:is_available
  device_count: acmedev:device_count
  backend: acmecl
  precision: {default: bf16-mixed, supported: [32-true, bf16-mixed]}
  step_hooks:
    after_backward: acmedev:after_backward
    after_optimizer_step: acmedev:after_optimizer_step

cluster_environments:
  - name: acme_job
    class_name: AcmeJobEnvironment
    extends: cluster_environment
    description: Processes started by Acme's job scheduler.
    detect: {all_set: [ACME_JOB_ID, ACME_RANK]}
    world_size: ACME_WORLD_SIZE
    global_rank: ACME_RANK
    local_rank: ACME_LOCAL_RANK
    node_rank: {env: ACME_NODE_RANK, default: 0}
    main_address: {env: ACME_MAIN_ADDRESS, default: 127.0.0.1}
    main_port: {env: ACME_MAIN_PORT, parse: int}

strategies:
  - name: acme_single
    class_name: SingleAcmeStrategy
    base: single_device
    description: Strategy for training on one Acme device.
    accelerators: [acme]

  - name: acme_parallel
    class_name: AcmeParallelStrategy
    extends: ddp
    description: DistributedDataParallel over Acme devices, one process per device.
    accelerators: [acme]
    cluster: [acme_job, torchelastic, lightning]

  - name: acme_model_parallel
    class_name: AcmeModelParallelStrategy
    extends: model_parallel
    description: FSDP2 and tensor parallelism over Acme devices.
    accelerators: [acme]
    cluster: [acme_job, torchelastic, lightning]
"""

PYPROJECT = """\
[project]
name = "acme-strategies"
version = "0.1.0"

[tool.stratgen]
package = "acmelib"
"""

#: An ordinary Lightning script: it imports the plugins, and names them.
SCRIPT = """\
import json
import sys

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import acmedev
import acmelib.lightning.pytorch  # registers 'acme' and 'acme_parallel' with Lightning
from stratcore.testing import reference_batch, reference_model, shard


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = reference_model()

    def training_step(self, batch, index):
        x, y = batch
        return nn.functional.mse_loss(self.net(x).float(), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


trainer = pl.Trainer(
    strategy="acme_parallel",
    accelerator="acme",
    devices=2,
    precision="bf16-mixed",
    max_steps=3,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    use_distributed_sampler=False,
)
x, y = reference_batch()
rank = trainer.global_rank
model = Model()
trainer.fit(model, DataLoader(TensorDataset(shard(x, rank, 2), shard(y, rank, 2)), batch_size=8))
strategy = trainer.strategy
ints = torch.tensor([rank + 1, 10 * (rank + 1)], dtype=torch.int64)
report = {
    "rank": rank,
    "world_size": trainer.world_size,
    "backend": str(dist.get_backend()),
    "environment": type(strategy.cluster_environment).__name__,
    "calls": acmedev.CALLS,
    "mean_int64": strategy.reduce(ints, reduce_op="mean").tolist(),
    "sum_int64": strategy.reduce(ints, reduce_op="sum").tolist(),
    "precision": strategy.precision_plugin.precision,
    "parameters": [p.detach().float().tolist() for p in model.net.state_dict().values()],
}
with open(f"{sys.argv[1]}/rank{rank}.json", "w") as handle:
    json.dump(report, handle)
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("acme") / "project"
    (root / "specs").mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    (root / "acmedev.py").write_text(DEVICE, encoding="utf-8")
    (root / "specs" / "acme.yaml").write_text(SPEC, encoding="utf-8")
    (root / "train.py").write_text(SCRIPT, encoding="utf-8")
    environ = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "runtime"), str(ROOT / "generator")]),
    }
    made = watch.run(
        [sys.executable, "-m", "stratgen", "generate", "--target", "lightning"],
        cwd=root,
        env=environ,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    return root


def _environ(project: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    environ = clean_environ(extra)
    environ["PYTHONPATH"] = os.pathsep.join(
        [str(project), str(project / "generated"), str(ROOT / "runtime")]
    )
    return environ


def test_the_spec_yields_lightning_plugins_and_their_tests(project: Path) -> None:
    package = project / "generated" / "acmelib" / "lightning"
    for framework in ("pytorch", "fabric"):
        module = (package / framework / "acme.py").read_text(encoding="utf-8")
        assert "class AcmeParallelStrategy(DDPAdapter, DDPStrategy):" in module
        # Its 'model_parallel' gets Lightning's ModelParallelStrategy (2D parallelism).
        assert (
            "class AcmeModelParallelStrategy(ModelParallelAdapter, ModelParallelStrategy):"
            in module
        )
        # Its devices are CPU processes: for Lightning, a CPU accelerator.
        assert "class AcmeAccelerator(AcceleratorAdapter, CPUAccelerator):" in module
        assert "environments = ACME_PARALLEL_ENVIRONMENTS" in module
    # What both frameworks share: the spec's own scheduler, first among the environments.
    shared = (package / "environments.py").read_text(encoding="utf-8")
    assert "class AcmeJobEnvironment(EnvironmentAdapter, ClusterEnvironment):" in shared
    assert "ACME_PARALLEL_ENVIRONMENTS = (\n    AcmeJobEnvironment," in shared
    # The built-in 'ddp' it extends is Lightning's own: no plugin shadows it.
    assert not (package / "pytorch" / "ddp.py").exists()
    tests = project / "generated" / "tests" / "test_lightning_acme.py"
    run_pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    ran = watch.run([*run_pytest, str(tests)], cwd=project, env=_environ(project))
    assert ran.returncode == 0, ran.stdout[-6000:] + ran.stderr[-2000:]
    # In each framework: the accelerator and the three strategy names registered, and the
    # three strategies training.
    assert "14 passed" in ran.stdout, ran.stdout[-2000:]


def _check(reports: list[dict], environment: str) -> None:
    expected = reference_parameters(STEPS, 0.1)
    for rank, report in enumerate(reports):
        assert report["rank"] == rank and report["world_size"] == 2
        assert report["backend"] == "acmecl"
        assert report["environment"] == environment
        assert report["precision"] == "bf16-mixed"
        assert report["calls"] == {
            "init": 1,
            "after_backward": STEPS,
            "after_optimizer_step": STEPS,
        }
        # 'acmecl' has no mean and cannot reduce int64: both emulated
        assert report["mean_int64"] == [1.5, 15.0]
        assert report["sum_int64"] == [3, 30]
        assert_parameters_close(report["parameters"], expected, atol=5e-2)


def _reports(folder: Path) -> list[dict]:
    return [json.loads((folder / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.slow
def test_an_ordinary_lightning_script_trains_on_two_ranks_lightning_starts(
    project: Path, tmp_path: Path
) -> None:
    done = watch.run(
        [sys.executable, "train.py", str(tmp_path)], cwd=project, env=_environ(project)
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    _check(_reports(tmp_path), "LightningEnvironment")


@pytest.mark.slow
def test_the_script_trains_on_two_ranks_acmes_scheduler_starts(
    project: Path, tmp_path: Path
) -> None:

    def start(port: str) -> list[watch.Job]:
        ranks = []
        for rank in range(2):
            job = {
                "ACME_JOB_ID": "7",
                "ACME_RANK": str(rank),
                "ACME_LOCAL_RANK": str(rank),
                "ACME_WORLD_SIZE": "2",
                "ACME_MAIN_PORT": port,
            }
            ranks.append(
                watch.Job(
                    [sys.executable, "train.py", str(tmp_path)],
                    cwd=project,
                    env=_environ(project, job),
                )
            )
        return ranks

    for done in run_given_a_port(start):
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    _check(_reports(tmp_path), "AcmeJobEnvironment")
