"""Scenarios: functions that run inside the launched processes and report what they saw.

Each takes the strategy first (``strategy.launch(train, 3, 0.1)``); ``SCENARIOS`` names them as
the command line does, and ``run_case`` runs one case of a job of several and reports it.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..contract import REDUCE_OPS
from ..exceptions import MisconfigurationError
from .reference import LARGE_INT, reference_batch, reference_loss, reference_model, shard

#: The strategy API every strategy offers (Lightning's names).
API_METHODS = (
    "launch",
    "setup_environment",
    "setup",
    "model_to_device",
    "backward",
    "optimizer_step",
    "reduce",
    "all_gather",
    "broadcast",
    "barrier",
    "reduce_boolean_decision",
    "block_backward_sync",
    "save_checkpoint",
    "load_checkpoint",
    "get_module_state_dict",
    "teardown",
)
API_PROPERTIES = (
    "root_device",
    "global_rank",
    "local_rank",
    "node_rank",
    "world_size",
    "is_global_zero",
    "parallel_devices",
    "distributed_sampler_kwargs",
    "accelerator",
    "precision_plugin",
    "checkpoint_io",
    "cluster_environment",
    # Lightning's name for the launcher object; its class is ``launcher_class``.
    "launcher",
    "model",
    "optimizers",
)


# --- scenarios (each runs inside the launched processes) -----------------------------------------


def _count_calls(paths: Sequence[str]) -> dict[str, int]:
    """Replace each function named by an import path with one that counts its calls (the
    runtime resolves hooks by path at every call, so it finds the counting one)."""

    counts: dict[str, int] = {}
    for path in dict.fromkeys(paths):
        module_name, _, attribute = path.partition(":")
        module = importlib.import_module(module_name)
        function = getattr(module, attribute)
        counts[path] = 0

        def counting(*args: Any, _path: str = path, _function: Any = function) -> Any:
            counts[_path] += 1
            return _function(*args)

        setattr(module, attribute, counting)
    return counts


def _step_hooks(accelerator: Any) -> dict[str, str]:
    hooks = {
        "after_backward": accelerator.after_backward_hook,
        "after_optimizer_step": accelerator.after_optimizer_step_hook,
    }
    return {point: path for point, path in hooks.items() if path is not None}


def train(strategy: Any, steps: int = 3, lr: float = 0.1) -> dict[str, Any]:
    """Train the reference model for ``steps`` SGD steps on this rank's share of the batch;
    report rank 0's final parameters, the losses (reduced over ranks) and the step hooks'
    calls."""
    hook_calls = _count_calls(list(_step_hooks(strategy.accelerator).values()))
    model = reference_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    model, optimizer = strategy.setup(model, optimizer)
    x, y = reference_batch()
    rank, world = strategy.global_rank, strategy.world_size
    xs = shard(x, rank, world).to(strategy.root_device)
    ys = shard(y, rank, world).to(strategy.root_device)
    losses = []
    for _ in range(steps):
        loss = reference_loss(model(xs), ys)
        strategy.backward(loss)
        strategy.optimizer_step(optimizer)
        losses.append(float(strategy.reduce(loss.detach(), reduce_op="mean")))
    state = strategy.get_module_state_dict(model)
    return {
        # float64 keeps every digit of float64 parameters and is exact for narrower ones.
        "params": [t.detach().cpu().double().tolist() for t in state.values()],
        "param_dtypes": sorted({str(t.dtype).removeprefix("torch.") for t in state.values()}),
        "losses": losses,
        "world_size": world,
        "precision": strategy.precision_plugin.precision,
        "model_type": type(model).__name__,
        "hook_calls": hook_calls,
    }


def train_after_replacing_moves(strategy: Any, steps: int = 3, lr: float = 0.1) -> dict[str, Any]:
    """``train``, where the strategy's move of the model onto its device gives the model new
    Parameter objects, as a move from the CPU onto an XLA device does (torch's
    ``set_overwrite_module_params_on_conversion``, for that move only: on such a device, as
    here, a library's later moves of a model already there keep them): the optimizer made
    before ``setup`` must train the parameters the set-up model holds."""
    move = strategy.model_to_device

    def replacing_move(module: nn.Module) -> nn.Module:
        future = torch.__future__
        replacing = future.get_overwrite_module_params_on_conversion()
        future.set_overwrite_module_params_on_conversion(True)
        try:
            return move(module)
        finally:
            future.set_overwrite_module_params_on_conversion(replacing)

    strategy.model_to_device = replacing_move
    return train(strategy, steps, lr)


def collectives(strategy: Any) -> dict[str, Any]:
    """Every collective of the strategy; report this rank's view of each."""
    import torch.distributed as dist

    rank, world = strategy.global_rank, strategy.world_size
    device = strategy.root_device
    value = torch.tensor([float(rank + 1)], device=device)
    reductions: dict[str, Any] = {}
    for op in REDUCE_OPS:
        try:
            reductions[op] = strategy.reduce(value, reduce_op=op).item()
        except MisconfigurationError as exc:
            reductions[op] = f"refused: {exc}"
    large = strategy.reduce(torch.tensor(LARGE_INT + rank, device=device), reduce_op="sum")
    views = {
        "rank": rank,
        "world_size": world,
        "reductions": reductions,
        "large_int_sum": [large.item(), str(large.dtype).removeprefix("torch.")],
        "gather": strategy.all_gather(torch.tensor([rank, 10 * rank], device=device))
        .cpu()
        .tolist(),
        "broadcast": strategy.broadcast({"sender": rank, "items": [1, 2]}, src=0),
        "all_true": strategy.reduce_boolean_decision(True, all=True),
        "all_rank0": strategy.reduce_boolean_decision(rank == 0, all=True),
        "any_rank0": strategy.reduce_boolean_decision(rank == 0, all=False),
        "sampler": strategy.distributed_sampler_kwargs,
        "process_group_backend": dist.get_backend() if dist.is_initialized() else None,
        "device_type": device.type,
    }
    strategy.barrier("collectives")
    gathered = strategy.all_gather(torch.tensor([float(rank)], device=device))
    views["every_rank"] = sorted(int(v) for v in gathered.flatten().tolist())
    return views


def _describe(value: Any) -> Any:
    if isinstance(value, torch.device):
        return str(value)
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _describe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_describe(v) for v in value]
    return type(value).__name__


def _flat_grads(module: nn.Module) -> torch.Tensor | None:
    """Every gradient of ``module`` in one tensor; sharded gradients (DTensors) are gathered
    whole, which every rank must do together."""
    grads = []
    for parameter in module.parameters():
        grad = parameter.grad
        if grad is None:
            continue
        full = grad.full_tensor() if hasattr(grad, "full_tensor") else grad
        grads.append(full.detach().flatten().float())
    return torch.cat(grads) if grads else None


#: Wrappers that reduce each gradient to the one rank that owns its optimizer shard: the
#: other ranks' copies are not meant to agree.
OWNER_REDUCED_GRADIENTS = ("fairscale_sharded",)
#: Wrappers whose gradients are averaged only by ``optimizer_step``: torch_xla's
#: reduce_gradients runs there; Horovod averages in the background from backward on, in place,
#: and the step waits for it. Until the step a rank's gradients are its own, or in between.
STEP_REDUCED_GRADIENTS = ("xla", "horovod")


def _grads_agree(strategy: Any, module: nn.Module) -> bool | None:
    """Whether every rank holds the same gradients (None where the wrapper keeps none, or keeps
    them only on the rank that owns them)."""
    if strategy.wrapper in OWNER_REDUCED_GRADIENTS + STEP_REDUCED_GRADIENTS:
        return None
    grads = _flat_grads(module)
    if strategy.reduce_boolean_decision(grads is None, all=False) or grads is None:
        return None
    gathered = strategy.all_gather(grads.to(strategy.root_device))
    return bool(all(torch.allclose(gathered[0], g, atol=1e-6) for g in gathered))


def _on_device(actual: torch.device, device: torch.device) -> bool:
    """Whether a tensor on ``actual`` lives on ``device`` (CPU tensors carry no index, even when
    placed on 'cpu:0')."""
    if actual.type != device.type:
        return False
    return device.index is None or actual.index in (None, device.index)


def api(strategy: Any, folder: str) -> dict[str, Any]:
    """Every method and property of the strategy API, the collectives included, on a strategy
    that has set nothing up yet; a checkpoint goes to ``folder``."""
    cls = type(strategy)
    report: dict[str, Any] = {
        "missing_methods": [n for n in API_METHODS if not callable(getattr(strategy, n, None))],
        "missing_properties": [n for n in API_PROPERTIES if not hasattr(cls, n)],
        "empty_before_setup": strategy.model is None and list(strategy.optimizers) == [],
    }
    report["properties"] = {
        name: _describe(getattr(strategy, name))
        for name in API_PROPERTIES
        if name not in ("model", "optimizers")
    }
    root = strategy.root_device
    report["model_to_device"] = _on_device(
        next(strategy.model_to_device(nn.Linear(2, 2)).parameters()).device, root
    )

    model = reference_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    wrapped, optimizer = strategy.setup(model, optimizer)
    report["owns_model"] = strategy.model is wrapped and len(strategy.optimizers) == 1
    report["owns_optimizer"] = bool(strategy.optimizers) and strategy.optimizers[0] is optimizer
    inner = strategy.lightning_module if hasattr(strategy, "lightning_module") else wrapped

    rank, world = strategy.global_rank, strategy.world_size
    x, y = reference_batch()
    xs, ys = shard(x, rank, world).to(root), shard(y, rank, world).to(root)
    before = {
        k: v.detach().float().cpu().clone()
        for k, v in strategy.get_module_state_dict(wrapped).items()
    }
    loss = reference_loss(wrapped(xs), ys)
    strategy.backward(loss)
    report["grads_synced"] = _grads_agree(strategy, inner)
    strategy.optimizer_step(optimizer)
    report["grads_cleared"] = _flat_grads(inner) is None
    after = strategy.get_module_state_dict(wrapped)
    report["step_changed_parameters"] = any(
        not torch.equal(before[k], v.detach().float().cpu()) for k, v in after.items()
    )

    # Gradient accumulation: inside the block each rank keeps its own gradients; the first
    # backward after it synchronises again.
    with strategy.block_backward_sync():
        strategy.backward(reference_loss(wrapped(xs), ys))
    report["grads_agree_inside_block"] = _grads_agree(strategy, inner)
    strategy.backward(reference_loss(wrapped(xs), ys))
    report["grads_agree_after_block"] = _grads_agree(strategy, inner)
    # The accumulated gradients end in a step, as in training (Horovod refuses zero_grad()
    # while it still averages them).
    strategy.optimizer_step(optimizer)

    report["collectives"] = collectives(strategy)

    state = strategy.get_module_state_dict(wrapped)
    reference = reference_model().state_dict()
    report["full_state_dict"] = list(state) == list(reference) and all(
        tuple(state[k].shape) == tuple(v.shape) for k, v in reference.items()
    )
    path = Path(folder) / "api.ckpt"
    strategy.save_checkpoint({"model": wrapped, "optimizer": optimizer, "step": 5}, path)
    saved = {k: v.detach().float().cpu().clone() for k, v in state.items()}
    with torch.no_grad():
        for parameter in inner.parameters():
            parameter.add_(1.0)
    loaded = strategy.load_checkpoint(path)
    report["checkpoint_loaded_on_every_rank"] = strategy.reduce_boolean_decision(
        loaded.get("step") == 5 and "model" in loaded, all=True
    )
    remaining = strategy.load_checkpoint(path, state={"model": wrapped, "optimizer": optimizer})
    restored = strategy.get_module_state_dict(wrapped)
    report["checkpoint_restored"] = remaining == {"step": 5} and all(
        torch.allclose(saved[k], v.detach().float().cpu()) for k, v in restored.items()
    )
    return report


def checkpoint(strategy: Any, folder: str) -> dict[str, Any]:
    """Save after one step into ``folder``, take another step, load: report whether the saved
    state came back and what ``load_checkpoint`` returned."""
    model = reference_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = strategy.setup(model, optimizer)
    x, y = reference_batch()
    xs = shard(x, strategy.global_rank, strategy.world_size).to(strategy.root_device)
    ys = shard(y, strategy.global_rank, strategy.world_size).to(strategy.root_device)
    loss = reference_loss(model(xs), ys)
    strategy.backward(loss)
    strategy.optimizer_step(optimizer)
    path = Path(folder) / "checkpoint.pt"
    strategy.save_checkpoint({"model": model, "optimizer": optimizer, "step": 1}, path)
    saved = {
        k: v.detach().float().cpu().clone()
        for k, v in strategy.get_module_state_dict(model).items()
    }
    # Change the model, then restore it from the file.
    loss = reference_loss(model(xs), ys)
    strategy.backward(loss)
    strategy.optimizer_step(optimizer)
    remaining = strategy.load_checkpoint(path, state={"model": model, "optimizer": optimizer})
    restored = {
        k: v.detach().float().cpu() for k, v in strategy.get_module_state_dict(model).items()
    }
    same = all(torch.allclose(saved[k], restored[k]) for k in saved)
    return {
        "restored": same,
        "remaining": remaining,
        "exists": path.exists(),  # a file, or the folder of a sharded checkpoint
        "rank": strategy.global_rank,
    }


#: The file in its folder ``fail`` writes the time of the failure to.
FAILED_AT = "failed_at"
#: How ``fail`` can make its rank fail.
FAILURES = ("raise", "raise_slowly", "exit", "kill", "hang")


def fail(strategy: Any, failing_rank: int, how: str, folder: str) -> None:
    """Make ``failing_rank`` raise, exit, kill itself or hang once every rank has started; the
    other ranks wait in a collective. The time of the failure goes to ``folder/failed_at``.

    ``raise_slowly`` closes the rank's connections first and raises seconds later, as a rank
    of a busy machine can end seconds after its peers lost it: they fail first, with a lost
    connection, and the report must still name the rank that raised."""
    strategy.barrier("start")
    if strategy.global_rank == failing_rank:
        # When the failure happened, for the test to measure how long stopping the job took.
        (Path(folder) / FAILED_AT).write_text(repr(time.time()), encoding="utf-8")
        if how == "raise_slowly":
            torch.distributed.destroy_process_group()
            time.sleep(4.0)
        if how in ("raise", "raise_slowly"):
            raise RuntimeError(f"deliberate failure on rank {failing_rank}")
        if how == "exit":
            os._exit(3)
        if how == "kill":
            os.kill(os.getpid(), 9)
        if how == "hang":
            time.sleep(3600)
    # Every other rank waits in a collective, as training would.
    strategy.reduce(torch.tensor(1.0, device=strategy.root_device), reduce_op="sum")
    strategy.barrier("end")


#: Every scenario, by its name on the command line (``python -m stratcore.testing``).
SCENARIOS: dict[str, Callable[..., Any]] = {
    "train": train,
    "train_after_replacing_moves": train_after_replacing_moves,
    "collectives": collectives,
    "api": api,
    "checkpoint": checkpoint,
    "fail": fail,
}

#: How ``run_case`` starts the line that reports a case (its JSON follows).
CASE_MARKER = "CASE "
#: How a job of several cases starts the line that says when it launched one (``{"case":
#: name, "time": seconds since the epoch}`` follows).
CASE_STARTED_MARKER = "STARTED "


#: The tag a program that starts every rank itself puts before each line a rank writes:
#: horovodrun's ``[1]<stdout>:``, ``mpirun --tag-output``'s ``[1,0]<stdout>:``.
_RANK_TAG = re.compile(r"^\[(\d+)(?:,(\d+))?\]<stdout>:")


def rank_zero_lines(stdout: str) -> list[str]:
    """The lines of a job's output that rank 0 (or the process the job started with) wrote;
    lines another program tagged with their rank lose the tag, those of other ranks are left
    out."""
    lines = []
    for line in stdout.splitlines():
        tag = _RANK_TAG.match(line)
        if tag is None:
            lines.append(line)
        elif int(tag.group(2) if tag.group(2) is not None else tag.group(1)) == 0:
            lines.append(line[tag.end() :])
    return lines


def case_started(stdout: str, case: str) -> float | None:
    """When the job whose output is ``stdout`` launched ``case`` (None if it did not)."""
    for line in rank_zero_lines(stdout):
        if line.startswith(CASE_STARTED_MARKER):
            started = json.loads(line[len(CASE_STARTED_MARKER) :])
            if started["case"] == case:
                return float(started["time"])
    return None


def run_case(strategy: Any, case: Mapping[str, Any]) -> Any:
    """Run one case of a job of several, ``{"case": name, "scenario": scenario name, "args":
    keyword arguments}``; rank 0 prints its report as soon as it has it (``CASE {"case": ...,
    "result": ...}``), so that a job that fails later still reports it."""
    result = SCENARIOS[case["scenario"]](strategy, **case.get("args", {}))
    if strategy.is_global_zero:
        line = json.dumps({"case": case["case"], "result": result}, default=str)
        print(CASE_MARKER + line, flush=True)
    return result
