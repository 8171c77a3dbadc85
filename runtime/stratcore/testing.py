"""Test support: real multi-process scenarios for any strategy of the package.

The generated tests (and yours) run scenarios as ``python -m <package>.core.testing SCENARIO
STRATEGY ...`` in a fresh process, so that every launcher, the script-relaunching one
included, works as it does for users. Each scenario prints one JSON line that the test reads.

Scenarios:
    train        train the reference model for a few SGD steps; print rank 0's final parameters
                 and the losses, reduced over ranks
    collectives  every collective of the strategy; print each rank's view
    api          every method and property of the strategy API, the collectives included
    checkpoint   save, change, load, and print whether the state came back
    fail         make one rank raise, exit, kill itself or hang; the launch must fail, say which
                 rank, and leave no process behind
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .accelerator import PRECISIONS
from .collectives import REDUCE_OPS
from .exceptions import MisconfigurationError, MissingDependencyError
from .registry import Registry, loaded_packages, package_registry, registry_of

#: Variables a scheduler or launcher may have set; tests start without them.
CLUSTER_VARIABLES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "NODE_RANK",
    "GROUP_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_ERROR_FILE",
    "TORCHELASTIC_USE_AGENT_STORE",
    "SLURM_NTASKS",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_JOB_ID",
    "SLURM_JOB_NAME",
    "SLURM_NODELIST",
    "LSB_JOBID",
    "LSB_DJOB_RANKFILE",
    "JSM_NAMESPACE_RANK",
    "JSM_NAMESPACE_SIZE",
    "JSM_NAMESPACE_LOCAL_RANK",
    "KUBERNETES_PORT",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_SIZE",
    "PMI_RANK",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
    "STRATLIB_ERROR_FILE",
    "STRATLIB_LAUNCH_FILE",
    "STRATLIB_PARENT_PID",
)

#: Marks every process of one scenario run, so that a test can find any that outlived it.
RUN_MARKER_ENV = "STRATLIB_TEST_RUN"

_package: str | None = None


def use_package(package: str) -> None:
    """Make ``package`` (a generated package's import name) the one whose registry names the
    scenarios and assertions below use; a generated ``conftest.py`` calls it."""
    global _package
    _package = package


def package_name() -> str:
    """The package chosen with :func:`use_package`, or the only generated package loaded."""
    if _package is not None:
        return _package
    loaded = loaded_packages()
    if len(loaded) != 1:
        raise RuntimeError(
            "call stratcore.testing.use_package(NAME) first: "
            + (
                f"packages {', '.join(loaded)} are loaded"
                if loaded
                else "no generated package is loaded"
            )
        )
    return loaded[0]


def package_registry_in_use() -> Registry:
    return package_registry(package_name())


#: The folder holding the stratcore package that runs this.
RUNTIME_ROOT = Path(__file__).resolve().parents[1]

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
    # Lightning's ``launcher`` property is the launcher object; here ``launcher`` is the
    # class (a ClassVar the generated class sets) and the object is ``launcher_instance``.
    "launcher_instance",
    "model",
    "optimizers",
)

__all__ = [
    "API_METHODS",
    "API_PROPERTIES",
    "Expectation",
    "FailureRun",
    "MisconfigurationError",
    "MissingDependencyError",
    "assert_api",
    "available_or_skip",
    "assert_collectives",
    "assert_detection_priority",
    "assert_device_parsing",
    "assert_devices_addressed",
    "assert_hooks_called",
    "assert_options",
    "assert_precisions",
    "assert_trains_like_one_process",
    "assert_visible_devices_named",
    "assert_job_stopped",
    "assert_parameters_close",
    "assert_precision_plugin_trains",
    "assert_training_converges",
    "clean_environ",
    "cluster_variables",
    "environment_values",
    "expectation_for",
    "expected_values",
    "isolated_environment",
    "leftover_processes",
    "main",
    "use_package",
    "package_name",
    "precision_tolerance",
    "precision_variant",
    "reference_parameters",
    "run_failure_scenario",
    "run_scenario",
    "runnable_accelerator",
    "runnable_or_skip",
    "set_environment",
    "unavailable_plugin_reason",
    "unavailable_reason",
]
BATCH = 16
FEATURES = 8
#: An int64 that float32 cannot hold: a reduction cast through float32 visibly loses its last bit.
LARGE_INT = 2**40 + 1


def cluster_variables() -> frozenset[str]:
    """The variables above and every variable a cluster environment of this package reads."""
    names = set(CLUSTER_VARIABLES)
    environments = {
        environment
        for package in loaded_packages()
        for environment in package_registry(package).cluster_environments.values()
    }
    for environment in environments:
        for condition in (environment.detection, environment.external_processes):
            names.update(condition.all_set, condition.any_set, condition.not_equal)
        for key in (
            "world_size",
            "global_rank",
            "local_rank",
            "node_rank",
            "main_address",
            "main_port",
        ):
            names.update(getattr(environment, f"{key}_source").env)
    return frozenset(names)


def isolated_environment(monkeypatch: Any) -> None:
    """Remove cluster and rendezvous variables (for a pytest ``monkeypatch``)."""
    for name in cluster_variables():
        monkeypatch.delenv(name, raising=False)


def clean_environ(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of os.environ without cluster variables, with ``extra`` added.

    A process started with it imports this stratcore, installed or not: its folder ends the
    PYTHONPATH (after any ``extra`` one), ahead of an installed copy elsewhere."""
    names = cluster_variables()
    env = {k: v for k, v in os.environ.items() if k not in names}
    env.update(extra or {})
    runtime = str(RUNTIME_ROOT)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if runtime not in paths:
        env["PYTHONPATH"] = os.pathsep.join([*paths, runtime])
    return env


# --- the reference problem -----------------------------------------------------------------------


def reference_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 1))


def reference_batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(BATCH, FEATURES, generator=generator)
    y = torch.randn(BATCH, 1, generator=generator)
    return x, y


def reference_parameters(
    steps: int, lr: float = 0.1, dtype: torch.dtype = torch.float32
) -> list[torch.Tensor]:
    """Parameters after ``steps`` SGD steps on the whole batch in one process."""
    model = reference_model().to(dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = (t.to(dtype) for t in reference_batch())
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return [p.detach().clone() for p in model.state_dict().values()]


def shard(tensor: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """This rank's equal share of the batch."""
    size = tensor.shape[0] // world_size
    return tensor[rank * size : (rank + 1) * size]


def _mse(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The loss in the output's precision (float64 under '64-true'), at least float32."""
    dtype = output.dtype if output.dtype == torch.float64 else torch.float32
    return nn.functional.mse_loss(output.to(dtype), target.to(dtype))


# --- scenarios (each runs inside the launched processes) -----------------------------------------


def _count_calls(paths: Sequence[str]) -> dict[str, int]:
    """Replace each function named by an import path with one that counts its calls (the
    runtime resolves hooks by path at every call, so it finds the counting one)."""
    import importlib

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


def _train(strategy: Any, steps: int, lr: float) -> dict[str, Any]:
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
        loss = _mse(model(xs), ys)
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


def _collectives(strategy: Any) -> dict[str, Any]:
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
#: Wrappers that average gradients inside ``optimizer_step`` (torch_xla's reduce_gradients),
#: not during backward: until the step each rank holds its own.
STEP_REDUCED_GRADIENTS = ("xla",)


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


def _api(strategy: Any, folder: str) -> dict[str, Any]:
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
    loss = _mse(wrapped(xs), ys)
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
        strategy.backward(_mse(wrapped(xs), ys))
    report["grads_agree_inside_block"] = _grads_agree(strategy, inner)
    strategy.backward(_mse(wrapped(xs), ys))
    report["grads_agree_after_block"] = _grads_agree(strategy, inner)
    optimizer.zero_grad(set_to_none=True)

    report["collectives"] = _collectives(strategy)

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


def _checkpoint(strategy: Any, folder: str) -> dict[str, Any]:
    model = reference_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = strategy.setup(model, optimizer)
    x, y = reference_batch()
    xs = shard(x, strategy.global_rank, strategy.world_size).to(strategy.root_device)
    ys = shard(y, strategy.global_rank, strategy.world_size).to(strategy.root_device)
    loss = _mse(model(xs), ys)
    strategy.backward(loss)
    strategy.optimizer_step(optimizer)
    path = Path(folder) / "checkpoint.pt"
    strategy.save_checkpoint({"model": model, "optimizer": optimizer, "step": 1}, path)
    saved = {
        k: v.detach().float().cpu().clone()
        for k, v in strategy.get_module_state_dict(model).items()
    }
    # Change the model, then restore it from the file.
    loss = _mse(model(xs), ys)
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


def _fail(strategy: Any, failing_rank: int, how: str, folder: str) -> None:
    strategy.barrier("start")
    if strategy.global_rank == failing_rank:
        # When the failure happened, for the test to measure how long stopping the job took.
        (Path(folder) / "failed_at").write_text(repr(time.time()), encoding="utf-8")
        if how == "raise":
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


# --- running scenarios --------------------------------------------------------------------------


def _build(args: argparse.Namespace) -> Any:
    use_package(args.package)
    package = importlib.import_module(args.package)
    options = json.loads(args.options)
    return package.get_strategy(
        args.strategy,
        accelerator=args.accelerator,
        devices=args.devices,
        num_nodes=args.num_nodes,
        precision=args.precision,
        **options,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stratcore.testing")
    parser.add_argument("--package", required=True, help="the generated package to test")
    parser.add_argument("scenario", choices=["train", "collectives", "api", "checkpoint", "fail"])
    parser.add_argument("strategy")
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument("--precision", default=None)
    parser.add_argument("--options", default="{}", help="JSON object of strategy options")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--folder", default=".")
    parser.add_argument("--rank", type=int, default=1)
    parser.add_argument("--how", choices=["raise", "exit", "kill", "hang"], default="raise")
    args = parser.parse_args(argv)
    strategy = _build(args)
    if args.scenario == "train":
        result = strategy.launch(_train, args.steps, args.lr)
    elif args.scenario == "collectives":
        result = strategy.launch(_collectives)
    elif args.scenario == "api":
        result = strategy.launch(_api, args.folder)
    elif args.scenario == "checkpoint":
        result = strategy.launch(_checkpoint, args.folder)
    else:
        result = strategy.launch(_fail, args.rank, args.how, args.folder)
    # Processes started by the launcher (or by torchrun) run this too; only rank 0 reports.
    if os.environ.get("RANK", "0") == "0" and os.environ.get("LOCAL_RANK", "0") == "0":
        print("RESULT " + json.dumps(result, default=str), flush=True)
    return 0


def _scenario_command(
    scenario: str, strategy: str, devices: int, options: dict[str, Any]
) -> list[str]:
    extra = []
    strategy_options = options.pop("strategy_options", {})
    for key, value in options.items():
        if value is not None:
            extra += [f"--{key.replace('_', '-')}", str(value)]
    return [
        sys.executable,
        "-m",
        "stratcore.testing",
        "--package",
        package_name(),
        scenario,
        strategy,
        "--devices",
        str(devices),
        "--options",
        json.dumps(strategy_options),
        *extra,
    ]


def _scenario_environ(env: dict[str, str] | None, marker: str) -> dict[str, str]:
    environ = clean_environ(env)
    environ[RUN_MARKER_ENV] = marker
    # The runtime and the package must import the same way in the new process, installed or
    # not.
    package = importlib.import_module(package_name())
    parents = {str(RUNTIME_ROOT), str(Path(str(package.__file__)).resolve().parents[1])}
    environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [*sorted(parents), environ.get("PYTHONPATH")])
    )
    return environ


def _result_of(stdout: str) -> Any:
    result = None
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
    return result


def run_scenario(
    scenario: str,
    strategy: str,
    *,
    devices: int = 2,
    timeout: float = 240,
    env: dict[str, str] | None = None,
    **options: Any,
) -> tuple[subprocess.CompletedProcess[str], Any]:
    """Run a scenario in a fresh process; returns the process and rank 0's parsed result.

    Keyword arguments become the scenario's command-line options (``precision="64-true"``,
    ``steps=3``, ``folder=...``); ``strategy_options`` is a dict of strategy options.
    """
    _skip_unless_optimizers_in_setup(strategy)
    command = _scenario_command(scenario, strategy, devices, options)
    environ = _scenario_environ(env, uuid.uuid4().hex)
    process = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environ)
    return process, _result_of(process.stdout)


def _skip_unless_optimizers_in_setup(strategy: str) -> None:
    """Skip the calling test for a strategy whose ``setup`` takes the module alone (its
    optimizers are made afterwards from the wrapped module): the scenarios set up a model
    and its optimizer together."""
    cls = package_registry_in_use().strategy_entry(strategy).cls
    if not getattr(cls, "optimizers_in_setup", True):
        import pytest

        pytest.skip(
            f"{cls.__name__} sets up the module alone and its optimizers afterwards; the shared "
            "training scenarios set up both together"
        )


@dataclass
class FailureRun:
    """How a ``fail`` scenario ended."""

    returncode: int
    stdout: str
    stderr: str
    #: Seconds from the failure (or the start of the hang, or the launcher's kill) until every
    #: process of the run had ended.
    seconds_to_stop: float | None
    #: Processes of the run still alive a few seconds after the launcher ended: (pid, command).
    leftovers: list[tuple[int, str]]


def run_failure_scenario(
    strategy: str,
    folder: Any,
    *,
    rank: int = 1,
    how: str = "raise",
    devices: int = 2,
    timeout: float = 180,
    env: dict[str, str] | None = None,
    kill_launcher: bool = False,
    **options: Any,
) -> FailureRun:
    """Run the ``fail`` scenario: rank ``rank`` raises, exits, SIGKILLs itself or hangs.

    With ``kill_launcher``, the launching process is SIGKILLed once the failing rank is in
    place (use it with ``how="hang"``): its ranks must notice and end.
    """
    import signal

    folder = Path(folder)
    command = _scenario_command(
        "fail", strategy, devices, {**options, "rank": rank, "how": how, "folder": folder}
    )
    marker = uuid.uuid4().hex
    failed_at = folder / "failed_at"
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_scenario_environ(env, marker),
    )
    try:
        if kill_launcher:
            deadline = time.monotonic() + timeout
            while (
                not failed_at.is_file() and process.poll() is None and time.monotonic() < deadline
            ):
                time.sleep(0.05)
            time.sleep(0.5)  # let the other ranks enter their collective
            failed_at.write_text(repr(time.time()), encoding="utf-8")
            process.send_signal(signal.SIGKILL)
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_marked(marker)
        process.kill()
        stdout, stderr = process.communicate()
        raise AssertionError(
            f"the failing job did not end within {timeout} s:\n{stderr[-4000:]}"
        ) from None
    leftovers = leftover_processes(marker)
    ended = time.time()
    seconds = ended - float(failed_at.read_text(encoding="utf-8")) if failed_at.is_file() else None
    _kill_marked(marker)
    return FailureRun(process.returncode, stdout, stderr, seconds, leftovers)


def _marked_processes(marker: str) -> list[tuple[int, str]]:
    """Live processes whose environment carries ``marker`` (found through /proc, or psutil)."""
    needle = f"{RUN_MARKER_ENV}={marker}".encode()
    found = []
    proc = Path("/proc")
    if proc.is_dir():
        for entry in proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if needle not in (entry / "environ").read_bytes().split(b"\0"):
                    continue
                stat = (entry / "stat").read_text()
                if stat[stat.rindex(")") + 2 :].startswith(("Z", "X")):
                    continue  # ended, waiting to be reaped
                command = (
                    (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
            except OSError:
                continue
            found.append((int(entry.name), command.strip()))
        return found
    try:
        import psutil
    except ImportError:
        return []
    for process in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if process.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if process.environ().get(RUN_MARKER_ENV) == marker:
                found.append((process.pid, " ".join(process.info["cmdline"] or [])))
        except (psutil.Error, OSError):
            continue
    return found


def leftover_processes(marker: str, wait: float = 5.0) -> list[tuple[int, str]]:
    """Processes of a run still alive ``wait`` seconds after its launcher ended (they may take
    a moment to notice that their launcher is gone); returns as soon as none is left."""
    deadline = time.monotonic() + wait
    while True:
        found = _marked_processes(marker)
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.2)


def _kill_marked(marker: str) -> None:
    import signal

    for pid, _ in _marked_processes(marker):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def assert_job_stopped(
    run: FailureRun, *, rank: int | None, message: str | None = None, within: float = 20.0
) -> None:
    """A failing job ended non-zero, named ``rank`` (and ``message``), quickly, with nothing left."""
    assert (
        run.returncode != 0
    ), f"the job succeeded although rank {rank} failed:\n{run.stderr[-3000:]}"
    if rank is not None:
        assert (
            f"rank {rank}" in run.stderr
        ), f"the error does not name rank {rank}:\n{run.stderr[-3000:]}"
    if message is not None:
        assert message in run.stderr, f"the error does not say {message!r}:\n{run.stderr[-3000:]}"
    assert not run.leftovers, f"processes outlived the job: {run.leftovers}"
    assert run.seconds_to_stop is not None, "the failing rank did not record when it failed"
    assert (
        run.seconds_to_stop < within
    ), f"the job took {run.seconds_to_stop:.1f} s to stop (limit {within} s)"


def assert_parameters_close(
    actual: Sequence[Any], expected: Sequence[torch.Tensor], atol: float = 1e-5
) -> None:
    assert len(actual) == len(expected), f"{len(actual)} tensors, expected {len(expected)}"
    for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
        got = torch.tensor(a, dtype=e.dtype if e.dtype == torch.float64 else torch.float32)
        assert got.shape == e.shape, f"tensor {index}: shape {tuple(got.shape)} != {tuple(e.shape)}"
        assert torch.allclose(got, e.to(got.dtype), atol=atol, rtol=0), (
            f"tensor {index} differs from the single-process reference by "
            f"{(got - e.to(got.dtype)).abs().max().item():.3g}"
        )


def assert_training_converges(result: dict[str, Any]) -> None:
    """Losses of the ``train`` scenario are finite and the last is below the first."""
    losses = result["losses"]
    assert losses and all(math.isfinite(v) for v in losses), f"losses not finite: {losses}"
    assert losses[-1] < losses[0], f"the loss did not decrease: {losses}"


# --- assertions for generated tests ------------------------------------------------------------


def runnable_accelerator(cls: type) -> str:
    """The first accelerator ``cls`` supports that is present here ('cpu' if none is)."""
    accelerators = registry_of(cls).accelerators
    for name in cls.supported_accelerators or tuple(accelerators):  # type: ignore[attr-defined]
        if name in accelerators and accelerators[name].is_available():
            return str(name)
    return "cpu"


def unavailable_reason(cls: type, accelerator: str | None = None) -> str | None:
    """Why ``cls`` cannot run (on ``accelerator``, by default its first available one) here,
    or None if it can."""
    accelerator = accelerator or runnable_accelerator(cls)

    missing = [r for r in cls.requirements if not r.available]  # type: ignore[attr-defined]
    if missing:
        return missing[0].message(cls.__name__)
    backend = cls.backend  # type: ignore[attr-defined]
    if backend is not None:
        absent = [r for r in backend.requirements if not r.available]
        if absent:
            return absent[0].message(f"backend {backend.name!r}")
    supported = cls.supported_accelerators  # type: ignore[attr-defined]
    if supported and accelerator not in supported:
        return f"{cls.__name__} does not run on {accelerator!r} (it runs on {', '.join(supported)})"
    accelerator_cls = registry_of(cls).accelerators.get(accelerator)
    if accelerator_cls is None or not accelerator_cls.is_available():
        return f"no {accelerator} device on this machine"
    return None


def unavailable_plugin_reason(cls: type) -> str | None:
    missing = [r for r in cls.requirements if not r.available]  # type: ignore[attr-defined]
    return missing[0].message(cls.__name__) if missing else None


def precision_variant(cls: type, accelerator: str) -> str | None:
    """A precision other than the default that ``cls`` runs with on ``accelerator``, to train
    with in a test: '64-true' where possible (it can be compared exactly), else a mixed one."""
    registry = registry_of(cls)
    accelerator_cls = registry.accelerators.get(accelerator)
    if accelerator_cls is None:
        return None
    default = cls.default_precision or accelerator_cls.default_precision  # type: ignore[attr-defined]
    for mode in ("64-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true"):
        if mode == default or mode not in cls.supported_precisions:  # type: ignore[attr-defined]
            continue
        if mode not in accelerator_cls.supported_precisions:
            continue
        try:
            registry.precision_plugin_class(cls, accelerator_cls, mode)
        except MisconfigurationError:
            continue
        return mode
    return None


@dataclass(frozen=True)
class Expectation:
    """What a strategy's spec says it does on one accelerator, for its generated tests.

    Attributes:
        devices: Processes (devices) its real-run tests start.
        default_precision: The precision it runs in when none is asked for.
        precisions: Every precision it accepts on this accelerator.
        backend: The collective backend of its process group (None for one process).
        reduce_ops: Reductions the backend performs natively ('mean' is emulated otherwise).
        casts: Tensor dtypes the backend reduces in another dtype, and that dtype.
        step_hooks: Functions (import paths) called after backward / optimizer step.
    """

    devices: int
    default_precision: str
    precisions: tuple[str, ...]
    backend: str | None = None
    reduce_ops: tuple[str, ...] = REDUCE_OPS
    casts: dict[str, str] = field(default_factory=dict)
    step_hooks: dict[str, str] = field(default_factory=dict)


def runnable_or_skip(cls: type) -> str:
    """The accelerator ``cls`` runs on here; skips the calling pytest test where it cannot run.

    Called inside tests, so that nothing is probed while pytest collects them.
    """
    import pytest

    accelerator = runnable_accelerator(cls)
    reason = unavailable_reason(cls, accelerator)
    if reason is not None:
        pytest.skip(reason)
    return accelerator


def available_or_skip(accelerator: type) -> None:
    """Skip the calling pytest test unless the accelerator is present here."""
    import pytest

    if not accelerator.is_available():  # type: ignore[attr-defined]
        pytest.skip(f"no {accelerator.accelerator_name} device on this machine")  # type: ignore[attr-defined]


def expectation_for(expected: dict[str, Expectation], accelerator: str) -> Expectation:
    assert (
        accelerator in expected
    ), f"the spec says nothing of {accelerator!r}; it declares {', '.join(expected)}"
    return expected[accelerator]


def assert_options(strategy: Any, expected: dict[str, Any]) -> None:
    """A built strategy holds every option at the expected value."""
    actual = {name: getattr(strategy, name, "<missing>") for name in expected}
    assert actual == expected, (
        f"{type(strategy).__name__} was built with options {actual}, "
        f"expected {expected} (the spec's defaults and the registry name's preset)"
    )


def assert_precisions(cls: type, accelerator: str, devices: int, expected: Expectation) -> None:
    """``get_strategy`` runs the default precision when none is given, every supported one
    when asked, and refuses every other one with a clear error."""
    package = importlib.import_module(registry_of(cls).package)
    name = cls.strategy_name  # type: ignore[attr-defined]
    chosen = package.get_strategy(name, accelerator=accelerator, devices=devices)
    assert chosen.precision_plugin.precision == expected.default_precision, (
        f"{name} runs in {chosen.precision_plugin.precision!r} by default on {accelerator!r}, "
        f"expected {expected.default_precision!r}"
    )
    for mode in PRECISIONS:
        if mode in expected.precisions:
            try:
                built = package.get_strategy(
                    name, accelerator=accelerator, devices=devices, precision=mode
                )
            except MissingDependencyError as exc:
                # A guarded precision: supported, but its package is not installed here.
                assert mode in str(exc) and "install" in str(exc), (
                    f"{name} refused the supported precision {mode!r} without naming what to "
                    f"install: {exc}"
                )
                continue
            assert (
                built.precision_plugin.precision == mode
            ), f"{name} asked for {mode!r} runs in {built.precision_plugin.precision!r}"
            continue
        try:
            package.get_strategy(name, accelerator=accelerator, devices=devices, precision=mode)
        except (MisconfigurationError, MissingDependencyError) as exc:
            # A precision whose package is missing is refused by naming the package first.
            assert mode in str(exc), f"refusing {mode!r}, the error does not name it: {exc}"
        else:
            raise AssertionError(
                f"{name} accepted precision={mode!r} on {accelerator!r}; "
                f"it supports only {', '.join(expected.precisions)}"
            )


#: How far training in each precision may drift from the reference at that precision after a
#: few steps: data-parallel training sums its gradients in another order than one process.
PRECISION_TOLERANCE = {
    "64-true": 1e-10,
    "32-true": 1e-5,
    "16-mixed": 5e-3,
    "bf16-mixed": 1e-2,
    "16-true": 1e-2,
    "bf16-true": 5e-2,
}
_TRUE_DTYPES = {
    "64-true": torch.float64,
    "16-true": torch.float16,
    "bf16-true": torch.bfloat16,
}


def precision_tolerance(precision: str) -> float:
    return PRECISION_TOLERANCE[precision]


def assert_trains_like_one_process(
    result: dict[str, Any], steps: int, expected: Expectation
) -> None:
    """Rank 0's parameters after ``steps`` equal one process training on the whole batch, at
    the same precision (parameters in the precision's dtype) within its tolerance."""
    precision = result["precision"]
    assert (
        precision == expected.default_precision
    ), f"trained in {precision!r}, expected the default {expected.default_precision!r}"
    assert (
        result["world_size"] == expected.devices
    ), f"trained on {result['world_size']} processes, expected {expected.devices}"
    dtype = _TRUE_DTYPES.get(precision, torch.float32)
    reference = reference_parameters(steps=steps, dtype=dtype)
    assert_parameters_close(result["params"], reference, atol=precision_tolerance(precision))
    assert_hooks_called(result["hook_calls"], steps, expected)


def assert_hooks_called(calls: dict[str, int], steps: int, expected: Expectation) -> None:
    """Each step hook ran once per step at its point (twice where one function serves both)."""
    wanted: dict[str, int] = {}
    for path in expected.step_hooks.values():
        wanted[path] = wanted.get(path, 0) + steps
    assert calls == wanted, (
        f"step hooks ran {calls} times in {steps} steps, expected {wanted} "
        f"(hooks: {expected.step_hooks})"
    )


def assert_collectives(
    result: dict[str, Any], world_size: int, expected: Expectation | None = None
) -> None:
    """Check rank 0's view of the ``collectives`` scenario against what the backend declares:
    its reductions are exact, 'mean' is emulated where it is not declared, other reductions
    are refused with an error naming the backend, and declared casts are applied and undone."""
    expected = expected or Expectation(
        devices=world_size, default_precision="32-true", precisions=()
    )
    ranks = list(range(world_size))
    assert (
        result["world_size"] == world_size
    ), f"world size {result['world_size']}, expected {world_size}"
    assert result["rank"] == 0, f"rank 0 reported as rank {result['rank']}"
    values = [float(r + 1) for r in ranks]
    exact = {
        "sum": sum(values),
        "product": math.prod(values),
        "min": min(values),
        "max": max(values),
        "mean": sum(values) / world_size,
    }
    reductions = result["reductions"]
    for op, value in exact.items():
        got = reductions[op]
        if op in expected.reduce_ops or op == "mean" or world_size == 1:
            assert (
                isinstance(got, float) and abs(got - value) < 1e-6
            ), f"reduce_op={op!r} over {world_size} ranks gave {got!r}, expected {value}"
        else:
            assert isinstance(got, str) and got.startswith("refused:") and op in got, (
                f"reduce_op={op!r}, which backend {expected.backend!r} does not declare, "
                f"gave {got!r}; expected a clear refusal"
            )
    cast = expected.casts.get("int64") if world_size > 1 else None
    addends = [torch.tensor(LARGE_INT + r) for r in ranks]
    if cast is not None:
        addends = [a.to(getattr(torch, cast)) for a in addends]
    large = int(sum(addends[1:], addends[0]).to(torch.int64).item())
    assert result["large_int_sum"] == [large, "int64"], (
        f"summing int64 {LARGE_INT}+rank gave {result['large_int_sum']}, expected {large} as "
        f"int64 ({'reduced as ' + cast if cast else 'reduced exactly'})"
    )
    if world_size > 1 and result["process_group_backend"] is not None:
        assert (
            result["process_group_backend"] == expected.backend
        ), f"the process group runs {result['process_group_backend']!r}, expected {expected.backend!r}"
    assert result["gather"] == [[r, 10 * r] for r in ranks], f"all_gather gave {result['gather']}"
    assert result["broadcast"] == {
        "sender": 0,
        "items": [1, 2],
    }, f"broadcast gave {result['broadcast']}"
    assert result["all_true"] is True, "reduce_boolean_decision(True, all=True) is not True"
    assert result["all_rank0"] is (
        world_size == 1
    ), "reduce_boolean_decision(rank == 0, all=True) is wrong"
    assert result["any_rank0"] is True, "reduce_boolean_decision(rank == 0, all=False) is not True"
    assert result["sampler"] == {
        "num_replicas": world_size,
        "rank": 0,
    }, f"distributed_sampler_kwargs: {result['sampler']}"
    assert result["every_rank"] == ranks, f"ranks seen after the barrier: {result['every_rank']}"


def assert_api(
    result: dict[str, Any], world_size: int, expected: Expectation | None = None
) -> None:
    """Check rank 0's report of the ``api`` scenario: every member exists and behaves."""
    assert result["missing_methods"] == [], f"missing methods: {result['missing_methods']}"
    assert result["missing_properties"] == [], f"missing properties: {result['missing_properties']}"
    props = result["properties"]
    assert (
        props["global_rank"] == 0 and props["local_rank"] == 0 and props["node_rank"] == 0
    ), f"rank 0 reports ranks {props['global_rank']}, {props['local_rank']}, {props['node_rank']}"
    assert (
        props["world_size"] == world_size and props["is_global_zero"] is True
    ), f"world size {props['world_size']} (expected {world_size}), global zero {props['is_global_zero']}"
    assert props["root_device"] in props["parallel_devices"], props
    assert props["distributed_sampler_kwargs"] == {
        "num_replicas": world_size,
        "rank": 0,
    }, f"distributed_sampler_kwargs: {props['distributed_sampler_kwargs']}"
    for plugin in ("accelerator", "precision_plugin", "checkpoint_io", "launcher_instance"):
        assert isinstance(props[plugin], str) and props[plugin], f"{plugin}: {props[plugin]!r}"
    assert result["empty_before_setup"], "model or optimizers set before setup()"
    assert result["model_to_device"], "model_to_device did not move the module to root_device"
    assert (
        result["owns_model"] and result["owns_optimizer"]
    ), "the strategy does not hold what setup() returned"
    assert result["step_changed_parameters"], "backward + optimizer_step changed no parameter"
    assert result["grads_synced"] in (True, None), "gradients differ across ranks after backward"
    assert result["grads_agree_after_block"] in (
        True,
        None,
    ), "gradients not synchronised after block_backward_sync"
    assert_collectives(result["collectives"], world_size, expected)
    assert result[
        "full_state_dict"
    ], "get_module_state_dict is not the full state of the user's module"
    assert result["checkpoint_loaded_on_every_rank"], "a rank could not load the checkpoint"
    assert result["checkpoint_restored"], "load_checkpoint did not restore the saved state"


def _refused(accelerator: type, devices: Any) -> str | None:
    try:
        accelerator.parse_devices(devices)  # type: ignore[attr-defined]
    except MisconfigurationError as exc:
        return str(exc)
    return None


def assert_device_parsing(accelerator: type, *, indexed: bool, counted: bool) -> None:
    """Device selection of an available accelerator: numbers, 'auto' and -1 as the device count
    says, index lists only for indexed devices, and clear errors for the rest."""
    name = accelerator.__name__
    count = accelerator.device_count()  # type: ignore[attr-defined]
    assert (count is not None) is counted, f"{name}.device_count() is {count!r}: expected " + (
        "a number (the spec names a count function)" if counted else "None (devices are processes)"
    )
    for one in (1, "1"):
        assert accelerator.parse_devices(one) == [0], f"devices={one!r} is not one device"  # type: ignore[attr-defined]
    assert len(accelerator.parse_devices("auto")) >= 1, "devices='auto' selects no device"  # type: ignore[attr-defined]
    if count is None:
        assert accelerator.parse_devices(3) == [0, 1, 2], "devices=3 is not three processes"  # type: ignore[attr-defined]
        assert _refused(accelerator, -1), "devices=-1 accepted although any number may be started"
    else:
        for every in (-1, "-1"):
            assert accelerator.parse_devices(every) == list(range(count)), (  # type: ignore[attr-defined]
                f"devices={every!r} does not select all {count} devices"
            )
        assert _refused(
            accelerator, count + 1
        ), f"devices={count + 1} accepted with {count} present"
    listed = _refused(accelerator, [0])
    if indexed:
        assert listed is None, f"devices=[0] refused by an indexed accelerator: {listed}"
    else:
        assert (
            listed is not None and "not addressed by index" in listed
        ), f"devices=[0] should be refused: {name} devices are not addressed by index ({listed})"
    for bad in (0, -2, "x", 1.5, True):
        message = _refused(accelerator, bad)
        assert message is not None, f"devices={bad!r} was accepted"
        assert "devices=" in message, f"the error for devices={bad!r} does not name it: {message}"


def assert_devices_addressed(accelerator: type, *, device_type: str, indexed: bool) -> None:
    """Processes get devices of the declared type, each its own index or all the whole device."""
    devices = accelerator.get_parallel_devices([0, 1])  # type: ignore[attr-defined]
    expected = (
        [torch.device(device_type, i) for i in (0, 1)]
        if indexed
        else [torch.device(device_type)] * 2
    )
    assert devices == expected, f"two processes get {devices}, expected {expected}"


def assert_visible_devices_named(accelerator: type, variable: str, monkeypatch: Any) -> None:
    """Asking for more devices than are visible names the visible-devices variable."""
    monkeypatch.setenv(variable, "0")
    count = accelerator.device_count()  # type: ignore[attr-defined]
    message = _refused(accelerator, count + 1)
    assert message is not None, f"devices={count + 1} accepted with {count} visible"
    assert f"{variable}='0'" in message, f"the error does not name {variable}: {message}"


def set_environment(
    monkeypatch: Any, folder: Any, environ: dict[str, str], files: dict[str, str]
) -> None:
    """Set variables for an environment test; ``files`` become files whose paths the variables
    hold. '<hostname>' stands for this machine's host name."""
    import socket

    for name in cluster_variables():
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    for name, content in files.items():
        path = Path(folder) / f"{name.lower()}.txt"
        path.write_text(content.replace("<hostname>", socket.gethostname()), encoding="utf-8")
        monkeypatch.setenv(name, str(path))


def _satisfying(condition: Any) -> dict[str, str]:
    """Variables under which a detection condition holds."""
    environ = dict.fromkeys(condition.all_set, "1")
    if condition.any_set and not any(name in environ for name in condition.any_set):
        environ[condition.any_set[0]] = "1"
    return environ


def assert_detection_priority(cls: type, monkeypatch: Any) -> None:
    """With the variables of two environments set at once, ``cls`` detects the one that comes
    first in its order (or one before it that the same variables also satisfy)."""
    registry = registry_of(cls)
    environments = registry.cluster_environments
    order = [name for name in cls.cluster_environments if name in environments]  # type: ignore[attr-defined]
    checked = 0
    for first_index, first in enumerate(order):
        for second in order[first_index + 1 :]:
            environ = {
                **_satisfying(environments[second].detection),
                **_satisfying(environments[first].detection),
            }
            if not environments[first].detection.holds(environ):
                continue
            for name in cluster_variables():
                monkeypatch.delenv(name, raising=False)
            for name, value in environ.items():
                monkeypatch.setenv(name, value)
            expected = next(
                n
                for n in order
                if environments[n].detection.holds(environ) and environments[n].detect()
            )
            detected = registry.detect_environment(cls)
            assert type(detected) is environments[expected], (
                f"with {sorted(environ)} set, {cls.__name__} detected {type(detected).__name__}, "
                f"expected {environments[expected].__name__} (order: {', '.join(order)})"
            )
            assert order.index(expected) <= first_index
            checked += 1
    assert checked or len(order) < 2, f"{cls.__name__}: no pair of environments could be checked"


def environment_values(environment: Any) -> dict[str, Any]:
    return {
        "world_size": environment.world_size(),
        "global_rank": environment.global_rank(),
        "local_rank": environment.local_rank(),
        "node_rank": environment.node_rank(),
        "main_address": environment.main_address,
        "main_port": environment.main_port,
    }


def expected_values(expected: dict[str, Any]) -> dict[str, Any]:
    """Expected readings, '<hostname>' replaced; readings the example leaves open are taken
    as read (they come from fallbacks such as a free port)."""
    import socket

    resolved = {k: socket.gethostname() if v == "<hostname>" else v for k, v in expected.items()}
    return _OpenDict(resolved)


class _OpenDict(dict[str, Any]):
    """Compares equal to a dict that agrees on every key this one has."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, dict) and all(other.get(k) == v for k, v in self.items())

    __hash__ = None


def assert_precision_plugin_trains(plugin_cls: type, precision: str) -> None:
    """One training step through a single-device strategy with this plugin on the CPU."""
    package = importlib.import_module(registry_of(plugin_cls).package)
    plugin = plugin_cls(precision)
    if plugin_cls.wrappers or (plugin_cls.accelerators and "cpu" not in plugin_cls.accelerators):  # type: ignore[attr-defined]
        return  # exercised by the tests of the strategies it belongs to
    strategy = package.SingleDeviceStrategy(
        device="cpu", accelerator=package.CPUAccelerator(), precision_plugin=plugin
    )
    model = reference_model()
    model, _ = strategy.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    before = [p.detach().clone() for p in model.parameters()]
    x, y = reference_batch()
    output = model(x)
    assert output.dtype == torch.get_default_dtype() or plugin.precision.endswith("-true")
    loss = nn.functional.mse_loss(output.float(), y)
    assert torch.isfinite(loss)
    strategy.backward(loss)
    strategy.optimizer_step()
    after = list(model.parameters())
    assert any(
        not torch.equal(a, b) for a, b in zip(after, before, strict=True)
    ), "no parameter changed"
    strategy.teardown()


if __name__ == "__main__":
    # Run the imported module's main, so that scenario functions pickle under their real
    # module name when a launcher sends them to new processes.
    sys.exit(importlib.import_module(__spec__.name).main())
