"""Ray Train's TorchTrainer running the package's strategies, as a Ray user writes it.

``python ray_train.py OUT PACKAGE``: starts a local Ray cluster (2 CPUs, a custom resource
``testdev`` of 2, no dashboard, its files in $RAY_TMPDIR), then fits two trainers of 2 workers
each:

- ``cpu``: a plain ``TorchTrainer(train, scaling_config=ScalingConfig(num_workers=2))`` (Ray
  creates a gloo group; its timeout shortened). Each worker trains ``ddp`` and ``fsdp`` built with their defaults,
  asks for a wrong ``devices``, and asks for a group of its own through the default
  environment (a launch that cannot use Ray's group); after the errors, Ray's group must
  still reduce.
- ``testdev``: the trainer configured by PACKAGE, a generated package for the test device
  with its own backend 'testccl': ``TorchTrainer(train, **trainer_kwargs("testdev_ddp",
  workers=2))``. Each worker trains ``testdev_ddp`` and ``testdev_fsdp`` with their defaults,
  and a Lightning Trainer with the package's generated plugin.

Every worker writes ``<case>/rank<N>.json`` (N: Ray's rank) under OUT.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import ray
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer

#: Seconds a collective of Ray's group waits: a hung worker fails its trainer.
TIMEOUT_S = 300


def _check_group(device: str = "cpu") -> dict[str, Any]:
    """Whether this worker's process group is there and reduces on ``device`` (ranks 0 and 1:
    1 + 2)."""
    import torch
    import torch.distributed as dist

    value = torch.ones(1, device=device) * (dist.get_rank() + 1)
    dist.all_reduce(value)
    return {"initialized": dist.is_initialized(), "sum": value.item()}


def _error(build: Any) -> str:
    """The one-line error ``build()`` raises (the test fails where it raises none)."""
    try:
        build()
    except Exception as exc:  # noqa: BLE001 - what the user sees, whatever it is
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def _trained(strategy: Any, folder: Path) -> dict[str, Any]:
    """The documented training code (newcomer.py) on ``strategy``, and what the strategy saw."""
    import newcomer
    import torch.distributed as dist

    result = strategy.launch(newcomer.train, 3, 2, str(folder))
    result["last_loss"] = float(result["last_loss"])
    result.update(
        local_rank=strategy.local_rank,
        root_device=str(strategy.root_device),
        group_backend=str(dist.get_backend()),
    )
    return result


def train_cpu(config: dict[str, Any]) -> None:
    """A worker of the plain trainer: stratlib's strategies with their defaults."""
    import stratlib

    out = Path(config["out"])
    report: dict[str, Any] = {"env": {k: os.environ.get(k) for k in config["variables"]}}
    for name in ("ddp", "fsdp"):
        report[name] = _trained(stratlib.get_strategy(name), out / name)
    report["wrong_devices"] = _error(lambda: stratlib.get_strategy("ddp", devices=3))
    report["after_wrong_devices"] = _check_group()
    own = stratlib.get_strategy(
        "ddp", devices=1, cluster_environment=stratlib.LightningEnvironment()
    )
    report["own_group"] = _error(lambda: own.launch(lambda strategy: None))
    report["after_own_group"] = _check_group()
    _write(out, report)


def train_testdev(config: dict[str, Any]) -> None:
    """A worker of the trainer the generated package configured: the test device's strategies
    with their defaults, then a Lightning Trainer with the generated plugin."""
    import importlib

    import torch.distributed as dist

    package = importlib.import_module(config["package"])
    out = Path(config["out"])
    report: dict[str, Any] = {"group_backend": str(dist.get_backend())}
    for name in ("testdev_ddp", "testdev_fsdp"):
        report[name] = _trained(package.get_strategy(name), out / name)
    report["lightning"] = _lightning(config, out / "lightning")
    report["after"] = _check_group(f"testdev:{os.environ['LOCAL_RANK']}")
    _write(out, report)


def _lightning(config: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``Trainer(strategy="testdev_ddp", accelerator="testdev")``: 3 epochs of the reference
    problem, each rank a batch of its share; the weights and what the Trainer saw."""
    import importlib

    import lightning.pytorch as pl
    import newcomer
    import torch
    from stratcore import process_group
    from torch.utils.data import DataLoader

    importlib.import_module(f"{config['package']}.lightning.pytorch")  # registers the plugins

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = newcomer.build_model()

        def training_step(self, batch: list[torch.Tensor], index: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = pl.Trainer(
        strategy="testdev_ddp",
        accelerator="testdev",
        max_epochs=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(folder),
    )
    module = Module()
    loader = DataLoader(newcomer.build_dataset(), batch_size=8)
    trainer.fit(module, loader)
    strategy: Any = trainer.strategy
    return {
        "params": [p.detach().cpu().double().tolist() for p in module.net.state_dict().values()],
        "world_size": trainer.world_size,
        "global_rank": trainer.global_rank,
        "environment": type(strategy.cluster_environment).__name__,
        "root_device": str(strategy.root_device),
        "sampler": strategy.distributed_sampler_kwargs,
        "process_group_backend": strategy.process_group_backend,
        # Lightning reused Ray's group: the runtime must not count it as its own
        "runtime_owns_group": process_group.created_by_runtime(),
    }


def _write(out: Path, report: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rank = os.environ["RANK"]
    (out / f"rank{rank}.json").write_text(json.dumps(report), encoding="utf-8")


def main() -> None:
    out, package = Path(sys.argv[1]), sys.argv[2]
    # Ray's workers import what this script imports (this checkout's packages and PACKAGE, from
    # PYTHONPATH) and the scripts beside it.
    path = os.environ.get("PYTHONPATH", "")
    worker_path = os.pathsep.join(filter(None, [str(Path(__file__).parent), path]))
    started = time.monotonic()

    def done(what: str) -> None:
        print(f"{what}: {time.monotonic() - started:.1f} s", flush=True)

    ray.init(
        num_cpus=2,
        resources={"testdev": 2},
        include_dashboard=False,
        _temp_dir=os.environ["RAY_TMPDIR"],
        logging_level="WARNING",
        runtime_env={"env_vars": {"PYTHONPATH": worker_path}},
    )
    done("Ray started")
    try:
        variables = ["RAY_RAYLET_PID", "ACCELERATE_TORCH_DEVICE", "RANK", "LOCAL_RANK"]
        variables += ["WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "SLURM_NTASKS"]
        variables += ["KUBERNETES_PORT"]
        TorchTrainer(
            train_cpu,
            train_loop_config={"out": str(out / "cpu"), "variables": variables},
            scaling_config=ScalingConfig(num_workers=2),
            torch_config=TorchConfig(timeout_s=TIMEOUT_S),
            run_config=RunConfig(name="cpu", storage_path=str(out / "results")),
        ).fit()
        done("the plain trainer fitted")
        ray_module = __import__(f"{package}.ray", fromlist=["trainer_kwargs"])
        kwargs = ray_module.trainer_kwargs("testdev_ddp", workers=2, timeout_s=TIMEOUT_S)
        TorchTrainer(
            train_testdev,
            train_loop_config={"out": str(out / "testdev"), "package": package},
            run_config=RunConfig(name="testdev", storage_path=str(out / "results")),
            **kwargs,
        ).fit()
        done("the configured trainer fitted")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
