"""Lightning's Trainer or Fabric with one of stratlib's plugins (``stratlib.lightning``).

``python -m benchmarks.gpu.workers.lightning --device cuda --size full --framework trainer
--plugin generic_ddp --out r.json``

Plugins:

- ``generic_ddp`` and ``generic_fsdp``: stratlib's strategies for whichever accelerator
  ``torch.accelerator`` finds (CUDA on an NVIDIA machine), on Lightning's DDPStrategy and
  FSDPStrategy (FSDP1), with stratlib's accelerator;
- ``model_parallel``: stratlib's ModelParallelStrategy on Lightning's own (FSDP2 and tensor
  parallelism on a device mesh), on Lightning's accelerator for the device; on a device that
  Lightning does not know (``--device accelerator``), the generic spec's
  GenericModelParallelStrategy with stratlib's accelerator.

One process, float32, deterministic kernels: the run must train as the hand-written loop does
(``support.TOLERANCES['32-true']``), in a process group over the device's backend, with the
parameters on the device.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.gpu.workers import model as m
from benchmarks.gpu.workers.model import deterministic
from benchmarks.gpu.workers.parallel import parallelize
from benchmarks.gpu.workers.support import (
    TOLERANCES,
    Result,
    backend_of,
    compare_runs,
    device_of,
    difference_text,
    main,
)

PLUGINS = ("generic_ddp", "generic_fsdp", "model_parallel")
#: stratlib's class of each plugin, by framework module.
CLASSES = {
    "generic_ddp": "GenericDDPStrategy",
    "generic_fsdp": "GenericFSDPStrategy",
    "model_parallel": "ModelParallelStrategy",
}
#: The class of a plugin on a device Lightning has no accelerator of its own for.
GENERIC_CLASSES = {**CLASSES, "model_parallel": "GenericModelParallelStrategy"}


def class_name(plugin: str, device: str) -> str:
    """stratlib's class for ``plugin`` on ``--device device``."""
    return (GENERIC_CLASSES if device == "accelerator" else CLASSES)[plugin]


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--framework", choices=("trainer", "fabric"), required=True)
    parser.add_argument("--plugin", choices=PLUGINS, required=True)


def plugin_and_accelerator(framework: str, plugin: str, device: str) -> tuple[Any, Any]:
    """The strategy and the accelerator to hand Lightning on ``--device device``: Lightning's
    own accelerator for CUDA and the CPU under ``model_parallel``, stratlib's generic one for
    the generic plugins and for any device Lightning does not know."""
    package = "pytorch" if framework == "trainer" else "fabric"
    plugins = importlib.import_module(f"stratlib.lightning.{package}")
    cls = getattr(plugins, class_name(plugin, device))
    if plugin == "model_parallel":
        accelerator = plugins.GenericAccelerator() if device == "accelerator" else device
        if framework == "trainer":  # the LightningModule's configure_model lays it out
            return cls(data_parallel_size=1, tensor_parallel_size=1), accelerator
        return (
            cls(parallelize_fn=parallelize, data_parallel_size=1, tensor_parallel_size=1),
            accelerator,
        )
    return cls(), plugins.GenericAccelerator()


def full_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The parameters of the model inside ``module`` (any wrapper, sharded or not), keyed by
    their names in the model."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(
        module, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    out = m.full_parameters(state)
    return {name.split("net.", 1)[-1] if "net." in name else name: v for name, v in out.items()}


def run_trainer(args: argparse.Namespace, device: torch.device, data: list[Any]) -> dict[str, Any]:
    import lightning.pytorch as pl

    strategy, accelerator = plugin_and_accelerator("trainer", args.plugin, args.device)
    size = m.SIZES[args.size]
    losses: list[float] = []
    facts: dict[str, Any] = {}

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = m.build_model(size)

        def configure_model(self) -> None:
            if args.plugin == "model_parallel":
                parallelize(self.net, self.device_mesh)

        def training_step(self, batch: Any, index: int) -> torch.Tensor:
            loss = m.loss_of(self.net, *batch)
            losses.append(float(loss))
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return m.make_optimizer(self)

        def train_dataloader(self) -> Any:
            # The same batches in the same order; Lightning moves them to the device.
            tokens = torch.cat([t.cpu() for t, _ in data])
            targets = torch.cat([y.cpu() for _, y in data])
            return DataLoader(TensorDataset(tokens, targets), batch_size=size.batch)

        def on_train_end(self) -> None:
            facts["backend"] = dist.get_backend()
            facts["world_size"] = dist.get_world_size()
            facts["param_devices"] = sorted({p.device.type for p in self.parameters()})

    trainer = pl.Trainer(
        accelerator=accelerator,
        strategy=strategy,
        devices=1,
        precision="32-true",
        max_steps=len(data),
        # The batches in their order, as the hand-written loop takes them (Lightning would
        # put a shuffling DistributedSampler in).
        use_distributed_sampler=False,
        # Deterministic kernels where they exist; a warning where none does, as ``deterministic``.
        deterministic="warn",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    module = Module()
    trainer.fit(module)
    assert trainer.strategy.model is not None
    return {
        **facts,
        "strategy": type(trainer.strategy).__module__ + "." + type(trainer.strategy).__name__,
        "wrapper": type(trainer.strategy.model).__name__,
        "root_device": str(trainer.strategy.root_device),
        "losses": losses,
        "params": full_state(trainer.strategy.model),
    }


def run_fabric(args: argparse.Namespace, device: torch.device, data: list[Any]) -> dict[str, Any]:
    from lightning.fabric import Fabric

    strategy, accelerator = plugin_and_accelerator("fabric", args.plugin, args.device)
    fabric = Fabric(accelerator=accelerator, strategy=strategy, devices=1, precision="32-true")
    fabric.launch()
    net = m.build_model(m.SIZES[args.size])
    # Lightning's FSDP sets up the module before the optimizer is made from its parameters.
    model = fabric.setup_module(net)
    optimizer: Any = fabric.setup_optimizers(m.make_optimizer(model))
    losses = []
    with deterministic():
        for tokens, targets in data:
            loss = m.loss_of(model, tokens, targets)
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(float(loss))
    return {
        "backend": dist.get_backend(),
        "world_size": dist.get_world_size(),
        "param_devices": sorted({p.device.type for p in model.parameters()}),
        "strategy": type(fabric.strategy).__module__ + "." + type(fabric.strategy).__name__,
        "wrapper": type(model.module).__name__,
        "root_device": str(fabric.device),
        "losses": losses,
        "params": full_state(model.module),
    }


def check(args: argparse.Namespace, result: Result) -> None:
    device = device_of(args)
    size = m.SIZES[args.size]
    data = m.batches(size, size.steps, device)
    _, expected_losses, expected_params = m.reference_run(size, device, data)
    run = run_trainer if args.framework == "trainer" else run_fabric
    found = run(args, device, data)
    result.details.update({k: v for k, v in found.items() if k != "params"})
    expected_class = class_name(args.plugin, args.device)
    result.expect(
        f"stratlib's {expected_class}",
        found["strategy"].startswith("stratlib.lightning.")
        and found["strategy"].rsplit(".", 1)[-1] == expected_class,
        found["strategy"],
    )
    backend = backend_of(device)
    result.expect(f"a process group over {backend}", found["backend"] == backend, found["backend"])
    result.expect("a world of one process", found["world_size"] == 1, found["world_size"])
    result.expect(
        f"trains on {device.type}",
        found["root_device"].startswith(device.type) and found["param_devices"] == [device.type],
        (found["root_device"], found["param_devices"]),
    )
    loss_diff, param_diff = compare_runs(
        result,
        "against the hand-written loop",
        found["losses"],
        expected_losses,
        found["params"],
        expected_params,
        TOLERANCES["32-true"],
    )
    result.figure = f"{difference_text(loss_diff, param_diff)} ({len(found['losses'])} steps)"


if __name__ == "__main__":
    sys.exit(main(check, options))
