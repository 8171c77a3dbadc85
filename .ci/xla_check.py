"""stratlib's XLA strategies on the real engine: torch_xla on one XLA:CPU device, against a plain
torch_xla training loop (the loop torch_xla documents: the model moved first, the optimizer made
from its parameters, ``xm.optimizer_step`` and a step mark). Run by ``.ci/xla``, which makes the
environment (torch 2.9, torch_xla 2.9) and sets PJRT_DEVICE=CPU.

What runs is the code users run, unchanged: ``stratlib.get_strategy("single_tpu")``, and
``tpu_spawn`` on one device (its launcher, torch_xla's spawn, which runs the one process in
place, and torch_xla's process group), on the runtime's XLA wrapper (stratcore/wrappers/xla.py).
One thing is bypassed: the TPU accelerator asks ``torch_xla._internal.tpu.num_available_devices``
whether TPU chips are present, which counts them on the PCI bus and finds none here; that probe
is replaced below by one that answers 1 (the XLA:CPU device PJRT_DEVICE=CPU provides). One
device only: collectives between processes on XLA:CPU hang or return wrong sums (pytorch/xla
#5005, #9089).

Each check prints a line, "ok" or "FAIL" with what differed; the exit status is 1 if any failed.
"""

from __future__ import annotations

import os
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch_xla
import torch_xla._internal.tpu
import torch_xla.core.xla_model as xm
from stratcore.testing.reference import reference_batch, reference_model
from torch import nn

import stratlib

STEPS = 4
LR = 0.1
MOMENTUM = 0.9
#: How far stratlib's parameters may be from the plain torch_xla loop's: the same operations on
#: the same device, so only the order in which XLA fuses them may differ.
ATOL = 1e-6


def one_device() -> int:
    return 1


# The one bypass (see the module documentation); torch_xla's typing does not expect it.
torch_xla._internal.tpu.num_available_devices = one_device  # type: ignore[assignment,unused-ignore]


# --- the plain torch_xla loop ---------------------------------------------------------------------


def plain_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: Any, y: Any) -> None:
    optimizer.zero_grad(set_to_none=True)
    nn.functional.mse_loss(model(x), y).backward()
    xm.optimizer_step(optimizer)
    torch_xla.sync()


def plain_xla(
    steps: int, make: Callable[[Any], torch.optim.Optimizer], state: dict[str, Any] | None = None
) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The reference model trained ``steps`` steps on the XLA device, its optimizer made after
    the move (and loaded from ``state``, as torch_xla's users resume)."""
    device = torch_xla.device()
    model = reference_model().to(device)
    optimizer = make(model.parameters())
    if state is not None:
        optimizer.load_state_dict(state)
    x, y = (t.to(device) for t in reference_batch())
    for _ in range(steps):
        plain_step(model, optimizer, x, y)
    return model, optimizer


def sgd(parameters: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(parameters, lr=LR, momentum=MOMENTUM)


def adam(parameters: Any) -> torch.optim.Optimizer:
    return torch.optim.Adam(parameters, lr=LR / 10)


def difference(a: nn.Module, b: nn.Module) -> float:
    pairs = zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    return max((x.detach().cpu() - y.detach().cpu()).abs().max().item() for x, y in pairs)


# --- stratlib -------------------------------------------------------------------------------------


def strategy_step(strategy: Any, model: nn.Module, optimizer: Any, x: Any, y: Any) -> None:
    strategy.backward(nn.functional.mse_loss(model(x), y))
    strategy.optimizer_step(optimizer)


class Events:
    """What happens around each optimizer step: the optimizer's steps and torch_xla's step
    marks, in order (the accelerator's hook is looked up by its path at every call, so it
    finds the recording one)."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self._mark_step = xm.mark_step

    def watch(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.register_step_post_hook(lambda *_: self.seen.append("step"))

    def __enter__(self) -> Events:
        def mark_step(*args: Any, **kwargs: Any) -> None:
            self.seen.append("mark_step")
            self._mark_step(*args, **kwargs)

        xm.mark_step = mark_step
        return self

    def __exit__(self, *exc: object) -> None:
        xm.mark_step = self._mark_step


def set_up(
    make: Callable[[Any], torch.optim.Optimizer], before: Callable[[Any, Any], None] | None = None
) -> tuple[Any, nn.Module, torch.optim.Optimizer]:
    """single_tpu as its users use it: the optimizer made from the model on the CPU (after
    ``before(model, optimizer)``), then both set up."""
    strategy = stratlib.get_strategy("single_tpu")
    model = reference_model()
    optimizer = make(model.parameters())
    if before is not None:
        before(model, optimizer)
    model, optimizer = strategy.setup(model, optimizer)
    return strategy, model, optimizer


def batch(strategy: Any) -> Iterator[torch.Tensor]:
    return (t.to(strategy.root_device) for t in reference_batch())


# --- the checks -----------------------------------------------------------------------------------


def check_placement() -> str:
    strategy, model, optimizer = set_up(sgd)
    device = strategy.root_device
    assert device.type == "xla", f"root_device is {device}"
    where = {str(p.device) for p in model.parameters()}
    assert where == {str(device)}, f"the model's parameters are on {where}, not {device}"
    trained = [p for group in optimizer.param_groups for p in group["params"]]
    model_params = list(model.parameters())
    assert len(trained) == len(model_params) and all(
        any(p is q for q in model_params) for p in trained
    ), "the optimizer holds parameters the set-up model does not train"
    strategy.teardown()
    return f"root_device {device}, every parameter there and in the optimizer"


def check_training() -> str:
    plain, _ = plain_xla(STEPS, sgd)
    cpu = reference_model()
    cpu_optimizer = sgd(cpu.parameters())
    x, y = reference_batch()
    for _ in range(STEPS):
        cpu_optimizer.zero_grad()
        nn.functional.mse_loss(cpu(x), y).backward()
        cpu_optimizer.step()
    assert difference(plain, cpu) < 1e-5, f"plain torch_xla vs CPU: {difference(plain, cpu):.3g}"

    strategy, model, optimizer = set_up(sgd)
    start = reference_model()
    with Events() as events:
        events.watch(optimizer)
        xs, ys = batch(strategy)
        for _ in range(STEPS):
            strategy_step(strategy, model, optimizer, xs, ys)
            assert all(p.grad is None for p in model.parameters()), "gradients not cleared"
    moved = difference(model, start)
    assert moved > 0, "training left the model as it started"
    off = difference(model, plain)
    assert off <= ATOL, f"{off:.3g} from the plain torch_xla loop (the update was {moved:.3g})"
    assert events.seen == ["step", "mark_step"] * STEPS, f"around the steps: {events.seen}"
    strategy.teardown()
    return (
        f"{STEPS} SGD steps with momentum: {off:.2g} from the plain torch_xla loop (update "
        f"{moved:.3g}; plain torch_xla vs CPU {difference(plain, cpu):.2g}); each "
        "optimizer step followed by one mark_step"
    )


def check_state_before_setup() -> str:
    """An optimizer that stepped on the CPU before setup (as one that loaded a checkpoint
    there) keeps its state for the parameters the set-up model trains, on their device."""

    def cpu_step(model: Any, optimizer: Any) -> None:
        x, y = reference_batch()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()

    cpu_model = reference_model()
    cpu_optimizer = adam(cpu_model.parameters())
    cpu_step(cpu_model, cpu_optimizer)
    saved = cpu_optimizer.state_dict()
    device = torch_xla.device()
    plain = reference_model().to(device)
    plain.load_state_dict(cpu_model.state_dict())
    plain_optimizer = adam(plain.parameters())
    plain_optimizer.load_state_dict(saved)
    x, y = (t.to(device) for t in reference_batch())
    for _ in range(STEPS):
        plain_step(plain, plain_optimizer, x, y)

    strategy, model, optimizer = set_up(adam, before=cpu_step)
    for parameter in model.parameters():
        state = optimizer.state[parameter]
        assert state, "no optimizer state for a parameter of the set-up model"
        assert state["exp_avg"].device == parameter.device, "state not on the parameter's device"
    xs, ys = batch(strategy)
    for _ in range(STEPS):
        strategy_step(strategy, model, optimizer, xs, ys)
    off = difference(model, plain)
    assert off <= ATOL, f"{off:.3g} from the plain torch_xla loop"
    strategy.teardown()
    return f"Adam stepped on the CPU, then {STEPS} steps on XLA: {off:.2g} from the plain loop"


def check_checkpoint(folder: Path) -> str:
    """Saved after STEPS steps, trained on, loaded: the saved state comes back, and training
    on from it matches the plain loop that never stopped."""
    plain, _ = plain_xla(STEPS + 2, sgd)
    strategy, model, optimizer = set_up(sgd)
    xs, ys = batch(strategy)
    for _ in range(STEPS):
        strategy_step(strategy, model, optimizer, xs, ys)
    path = folder / "single_tpu.ckpt"
    strategy.save_checkpoint({"model": model, "optimizer": optimizer, "step": STEPS}, path)
    saved = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    on_disk = torch.load(path, map_location="cpu", weights_only=True)
    devices = {t.device.type for t in tensors(on_disk)}
    assert devices == {"cpu"}, f"the file holds tensors on {devices}"
    for _ in range(3):
        strategy_step(strategy, model, optimizer, xs, ys)
    remaining = strategy.load_checkpoint(path, state={"model": model, "optimizer": optimizer})
    assert remaining == {"step": STEPS}, f"load_checkpoint returned {remaining}"
    restored = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    assert all(torch.equal(saved[k], restored[k]) for k in saved), "the weights did not come back"
    assert {str(p.device) for p in model.parameters()} == {str(strategy.root_device)}
    for _ in range(2):
        strategy_step(strategy, model, optimizer, xs, ys)
    off = difference(model, plain)
    assert off <= ATOL, f"resumed training is {off:.3g} from the plain loop"
    strategy.teardown()
    assert next(strategy.model.parameters()).device.type == "cpu", "teardown left it on XLA"
    return (
        f"saved at step {STEPS} (CPU tensors), loaded after 3 more steps, 2 steps on: "
        f"{off:.2g} from the plain loop's {STEPS + 2} steps; teardown returns it to the CPU"
    )


def spawned_training(strategy: Any, steps: int) -> dict[str, Any]:
    """What each process of a ``tpu_spawn`` launch runs (here the one process)."""
    import torch.distributed as dist

    model = reference_model()
    optimizer = sgd(model.parameters())
    model, optimizer = strategy.setup(model, optimizer)
    xs, ys = batch(strategy)
    for _ in range(steps):
        strategy_step(strategy, model, optimizer, xs, ys)
    return {
        "state": strategy.get_module_state_dict(model),
        "world_size": strategy.world_size,
        "backend": dist.get_backend() if dist.is_initialized() else None,
        "device": str(strategy.root_device),
    }


def check_tpu_spawn() -> str:
    """tpu_spawn on one device: torch_xla's ``xmp.spawn`` runs the one process in this one, which
    joins torch_xla's process group ('xla://') and averages gradients over a world of one."""
    plain, _ = plain_xla(STEPS, sgd)
    strategy = stratlib.get_strategy("tpu_spawn", devices=1)
    result = strategy.launch(spawned_training, STEPS)
    assert (result["world_size"], result["backend"]) == (1, "xla"), result
    model = reference_model()
    model.load_state_dict(result["state"])
    off = difference(model, plain)
    assert off <= ATOL, f"{off:.3g} from the plain torch_xla loop"
    return (
        f"xmp.spawn (one process) on {result['device']}, process group 'xla': {STEPS} steps "
        f"{off:.2g} from the plain loop"
    )


def tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from tensors(item)


def main() -> int:
    print(f"torch {torch.__version__}, torch_xla {torch_xla.__version__}, ", end="")
    print(f"PJRT_DEVICE={os.environ.get('PJRT_DEVICE')}, device {torch_xla.device()}")
    failed = 0
    with tempfile.TemporaryDirectory() as folder:
        checks: list[tuple[str, Callable[[], str]]] = [
            ("placement", check_placement),
            ("trains like torch_xla", check_training),
            ("optimizer state made before setup", check_state_before_setup),
            ("checkpoint saved and loaded", lambda: check_checkpoint(Path(folder))),
            ("tpu_spawn on one device", check_tpu_spawn),
        ]
        for name, check in checks:
            try:
                detail = check()
            except Exception as exc:
                failed += 1
                where = traceback.extract_tb(exc.__traceback__)[-1]
                print(f"FAIL {name}: {exc or type(exc).__name__} (line {where.lineno})")
            else:
                print(f"ok   {name}: {detail}")
    print(f"{len(checks) - failed} of {len(checks)} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
