"""Test support: real multi-process scenarios for any strategy of the package.

The generated tests (and yours) run scenarios as ``python -m <package>.core.testing SCENARIO
STRATEGY ...`` in a fresh process, so that every launcher, the script-relaunching one
included, works as it does for users. Each scenario prints one JSON line that the test reads.

Scenarios:
    train        train the reference model for a few SGD steps; print rank 0's final parameters
                 and the losses, reduced over ranks
    collectives  every collective of the strategy; print each rank's view
    checkpoint   save, change, load, and print whether the state came back
    fail         make one rank raise, exit or hang; the launch must fail and say which rank
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .exceptions import MisconfigurationError, MissingDependencyError
from .factory import precision_plugin_class

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
    "TORCHELASTIC_RUN_ID",
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
    "STRATLIB_PARENT_PID",
)

PACKAGE = (__package__ or "").rsplit(".", 1)[0]

__all__ = [
    "MisconfigurationError",
    "MissingDependencyError",
    "assert_collectives",
    "assert_device_parsing",
    "assert_parameters_close",
    "assert_precision_plugin_trains",
    "clean_environ",
    "environment_values",
    "expected_values",
    "isolated_environment",
    "main",
    "option_defaults",
    "runnable_accelerator",
    "precision_plugin_class",
    "reference_parameters",
    "run_scenario",
    "set_environment",
    "unavailable_plugin_reason",
    "unavailable_reason",
]
BATCH = 16
FEATURES = 8


def isolated_environment(monkeypatch: Any) -> None:
    """Remove cluster and rendezvous variables (for a pytest ``monkeypatch``)."""
    for name in CLUSTER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def clean_environ(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of os.environ without cluster variables, with ``extra`` added."""
    env = {k: v for k, v in os.environ.items() if k not in CLUSTER_VARIABLES}
    env.update(extra or {})
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


def reference_parameters(steps: int, lr: float = 0.1) -> list[torch.Tensor]:
    """Parameters after ``steps`` SGD steps on the whole batch in one process."""
    model = reference_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = reference_batch()
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return [p.detach().clone() for p in model.state_dict().values()]


def shard(tensor: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """This rank's equal share of the batch."""
    size = tensor.shape[0] // world_size
    return tensor[rank * size : (rank + 1) * size]


# --- scenarios (each runs inside the launched processes) -----------------------------------------


def _train(strategy: Any, steps: int, lr: float) -> dict[str, Any]:
    model = reference_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    model, optimizer = strategy.setup(model, optimizer)
    x, y = reference_batch()
    rank, world = strategy.global_rank, strategy.world_size
    xs = shard(x, rank, world).to(strategy.root_device)
    ys = shard(y, rank, world).to(strategy.root_device)
    losses = []
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(xs).float(), ys.float())
        strategy.backward(loss)
        strategy.optimizer_step(optimizer)
        losses.append(float(strategy.reduce(loss.detach().float(), reduce_op="mean")))
    state = strategy.get_module_state_dict(model)
    return {
        "params": [t.detach().float().cpu().tolist() for t in state.values()],
        "losses": losses,
        "world_size": world,
        "precision": strategy.precision_plugin.precision,
        "model_type": type(model).__name__,
    }


def _collectives(strategy: Any) -> dict[str, Any]:
    rank, world = strategy.global_rank, strategy.world_size
    device = strategy.root_device
    value = torch.tensor([float(rank + 1)], device=device)
    views = {
        "rank": rank,
        "world_size": world,
        "mean": strategy.reduce(value, reduce_op="mean").item(),
        "sum": strategy.reduce(value, reduce_op="sum").item(),
        "max": strategy.reduce(value, reduce_op="max").item(),
        "min": strategy.reduce(value, reduce_op="min").item(),
        "int_sum": strategy.reduce(torch.tensor(rank + 1, device=device), reduce_op="sum").item(),
        "gather": strategy.all_gather(torch.tensor([rank, 10 * rank], device=device)).cpu().tolist(),
        "broadcast": strategy.broadcast({"sender": rank, "items": [1, 2]}, src=0),
        "all_true": strategy.reduce_boolean_decision(True, all=True),
        "all_rank0": strategy.reduce_boolean_decision(rank == 0, all=True),
        "any_rank0": strategy.reduce_boolean_decision(rank == 0, all=False),
        "sampler": strategy.distributed_sampler_kwargs,
    }
    strategy.barrier("collectives")
    gathered = strategy.all_gather(torch.tensor([float(rank)], device=device))
    views["every_rank"] = sorted(int(v) for v in gathered.flatten().tolist())
    return views


def _checkpoint(strategy: Any, folder: str) -> dict[str, Any]:
    model = reference_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = strategy.setup(model, optimizer)
    x, y = reference_batch()
    xs = shard(x, strategy.global_rank, strategy.world_size).to(strategy.root_device)
    ys = shard(y, strategy.global_rank, strategy.world_size).to(strategy.root_device)
    loss = nn.functional.mse_loss(model(xs).float(), ys.float())
    strategy.backward(loss)
    strategy.optimizer_step(optimizer)
    path = Path(folder) / "checkpoint.pt"
    strategy.save_checkpoint({"model": model, "optimizer": optimizer, "step": 1}, path)
    saved = {k: v.detach().float().cpu().clone() for k, v in strategy.get_module_state_dict(model).items()}
    # Change the model, then restore it from the file.
    loss = nn.functional.mse_loss(model(xs).float(), ys.float())
    strategy.backward(loss)
    strategy.optimizer_step(optimizer)
    remaining = strategy.load_checkpoint(path, state={"model": model, "optimizer": optimizer})
    restored = {k: v.detach().float().cpu() for k, v in strategy.get_module_state_dict(model).items()}
    same = all(torch.allclose(saved[k], restored[k]) for k in saved)
    return {"restored": same, "remaining": remaining, "exists": path.is_file(), "rank": strategy.global_rank}


def _fail(strategy: Any, failing_rank: int, how: str) -> None:
    strategy.barrier("start")
    if strategy.global_rank == failing_rank:
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
    package = __import__(PACKAGE)
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
    parser = argparse.ArgumentParser(prog=f"python -m {PACKAGE}.core.testing")
    parser.add_argument("scenario", choices=["train", "collectives", "checkpoint", "fail"])
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
    elif args.scenario == "checkpoint":
        result = strategy.launch(_checkpoint, args.folder)
    else:
        result = strategy.launch(_fail, args.rank, args.how)
    # Processes started by the launcher (or by torchrun) run this too; only rank 0 reports.
    if os.environ.get("RANK", "0") == "0" and os.environ.get("LOCAL_RANK", "0") == "0":
        print("RESULT " + json.dumps(result, default=str), flush=True)
    return 0


def run_scenario(
    scenario: str,
    strategy: str,
    *,
    devices: int = 2,
    timeout: float = 240,
    env: dict[str, str] | None = None,
    **options: Any,
) -> tuple[subprocess.CompletedProcess[str], Any]:
    """Run a scenario in a fresh process; returns the process and rank 0's parsed result."""
    extra = []
    strategy_options = options.pop("strategy_options", {})
    for key, value in options.items():
        if value is not None:
            extra += [f"--{key.replace('_', '-')}", str(value)]
    command = [
        sys.executable,
        "-m",
        f"{PACKAGE}.core.testing",
        scenario,
        strategy,
        "--devices",
        str(devices),
        "--options",
        json.dumps(strategy_options),
        *extra,
    ]
    environ = clean_environ(env)
    # The package must import the same way in the new process, installed or not.
    package_parent = str(Path(__file__).resolve().parents[2])
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [package_parent, environ.get("PYTHONPATH")]))
    process = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environ)
    result = None
    for line in process.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
    return process, result


def assert_parameters_close(actual: Sequence[Any], expected: Sequence[torch.Tensor], atol: float = 1e-5) -> None:
    assert len(actual) == len(expected), f"{len(actual)} tensors, expected {len(expected)}"
    for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
        got = torch.tensor(a, dtype=torch.float32)
        assert got.shape == e.shape, f"tensor {index}: shape {tuple(got.shape)} != {tuple(e.shape)}"
        assert torch.allclose(got, e.float(), atol=atol), f"tensor {index} differs from the single-process reference"


# --- assertions for generated tests ------------------------------------------------------------


def option_defaults(cls: type) -> dict[str, Any]:
    """The options of a strategy class with their default values."""
    from .factory import strategy_options

    return {name: p.default for name, p in strategy_options(cls).items()}


def runnable_accelerator(cls: type) -> str:
    """The first accelerator ``cls`` supports that is present here ('cpu' if none is)."""
    from .registry import generated_registry

    accelerators = generated_registry().ACCELERATORS
    for name in cls.supported_accelerators or tuple(accelerators):  # type: ignore[attr-defined]
        if name in accelerators and accelerators[name].is_available():
            return str(name)
    return "cpu"


def unavailable_reason(cls: type, accelerator: str | None = None) -> str | None:
    """Why ``cls`` cannot run (on ``accelerator``, by default its first available one) here,
    or None if it can."""
    from .registry import generated_registry

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
    accelerator_cls = generated_registry().ACCELERATORS.get(accelerator)
    if accelerator_cls is None or not accelerator_cls.is_available():
        return f"no {accelerator} device on this machine"
    return None


def unavailable_plugin_reason(cls: type) -> str | None:
    missing = [r for r in cls.requirements if not r.available]  # type: ignore[attr-defined]
    return missing[0].message(cls.__name__) if missing else None


def assert_collectives(result: dict[str, Any], world_size: int) -> None:
    """Check rank 0's view of the ``collectives`` scenario."""
    ranks = list(range(world_size))
    assert result["world_size"] == world_size
    assert result["rank"] == 0
    assert result["sum"] == sum(r + 1 for r in ranks)
    assert abs(result["mean"] - sum(r + 1 for r in ranks) / world_size) < 1e-6
    assert result["max"] == world_size and result["min"] == 1
    assert result["int_sum"] == sum(r + 1 for r in ranks)
    assert result["gather"] == [[r, 10 * r] for r in ranks]
    assert result["broadcast"] == {"sender": 0, "items": [1, 2]}
    assert result["all_true"] is True
    assert result["all_rank0"] is (world_size == 1)
    assert result["any_rank0"] is True
    assert result["sampler"] == {"num_replicas": world_size, "rank": 0}
    assert result["every_rank"] == ranks


def assert_device_parsing(accelerator: type) -> None:
    """Device selection of an available accelerator: counts, 'auto', errors."""
    from .exceptions import MisconfigurationError

    count = accelerator.device_count()  # type: ignore[attr-defined]
    assert accelerator.parse_devices(1) == [0]  # type: ignore[attr-defined]
    assert accelerator.parse_devices("1") == [0]  # type: ignore[attr-defined]
    assert len(accelerator.parse_devices("auto")) >= 1  # type: ignore[attr-defined]
    if count is None:
        assert accelerator.parse_devices(3) == [0, 1, 2]  # type: ignore[attr-defined]
    else:
        assert accelerator.parse_devices(-1) == list(range(count))  # type: ignore[attr-defined]
    for bad in (0, -2, "x", 1.5, True):
        try:
            accelerator.parse_devices(bad)  # type: ignore[attr-defined]
        except MisconfigurationError as exc:
            assert "devices=" in str(exc)
        else:
            raise AssertionError(f"devices={bad!r} was accepted")
    devices = accelerator.get_parallel_devices([0])  # type: ignore[attr-defined]
    assert devices[0].type == accelerator.device_type  # type: ignore[attr-defined]


def set_environment(monkeypatch: Any, folder: Any, environ: dict[str, str], files: dict[str, str]) -> None:
    """Set variables for an environment test; ``files`` become files whose paths the variables
    hold. '<hostname>' stands for this machine's host name."""
    import socket

    for name in CLUSTER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    for name, content in files.items():
        path = Path(folder) / f"{name.lower()}.txt"
        path.write_text(content.replace("<hostname>", socket.gethostname()), encoding="utf-8")
        monkeypatch.setenv(name, str(path))


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


class _OpenDict(dict):  # type: ignore[type-arg]
    """Compares equal to a dict that agrees on every key this one has."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, dict) and all(other.get(k) == v for k, v in self.items())

    __hash__ = None  # type: ignore[assignment]


def assert_precision_plugin_trains(plugin_cls: type, precision: str) -> None:
    """One training step through a single-device strategy with this plugin on the CPU."""
    package = __import__(PACKAGE)
    plugin = plugin_cls(precision)
    if plugin_cls.wrappers or (plugin_cls.accelerators and "cpu" not in plugin_cls.accelerators):  # type: ignore[attr-defined]
        return  # exercised by the tests of the strategies it belongs to
    strategy = package.SingleDeviceStrategy(device="cpu", accelerator=package.CPUAccelerator(), precision_plugin=plugin)
    model = reference_model()
    model, optimizer = strategy.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    before = [p.detach().clone() for p in model.parameters()]
    x, y = reference_batch()
    output = model(x)
    assert output.dtype == torch.get_default_dtype() or plugin.precision.endswith("-true")
    loss = nn.functional.mse_loss(output.float(), y)
    assert torch.isfinite(loss)
    strategy.backward(loss)
    strategy.optimizer_step()
    after = list(model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(after, before, strict=True)), "no parameter changed"
    strategy.teardown()


if __name__ == "__main__":
    # Run the imported module's main, so that scenario functions pickle under their real
    # module name when a launcher sends them to new processes.
    import importlib

    sys.exit(importlib.import_module(__spec__.name).main())
