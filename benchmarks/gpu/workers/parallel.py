"""stratlib's ``ddp``, ``fsdp``, ``model_parallel`` and ``deepspeed_stage_2`` with a world of
one process.

``python -m benchmarks.gpu.workers.parallel --device cuda --size full --strategy fsdp
--out r.json [--compile]``

On CUDA and the CPU the strategies are stratlib's of those names; on whichever other device
``torch.accelerator`` reports (``--device accelerator``) the generic spec's (``generic_ddp``,
``generic_fsdp``, ``generic_model_parallel``, ``generic_deepspeed_stage_2``), over the backend
torch maps the device type to.

Two launches of the strategy in this process (the process group of the first serves the
second, as in any script that launches twice):

1. set up the model (``--compile``: a ``torch.compile``d model, which ``setup`` compiles again
   around the wrapper), look at the process group, the wrapping, the devices and (on a device)
   what ``setup`` put in the device's memory, run every collective of the strategy on a tensor of the device, train the compared steps saving a
   checkpoint halfway (fsdp: sharded; model_parallel: a distributed checkpoint; DeepSpeed:
   its own sharded format; ddp: one file), then time steps against the hand-written loop;
2. set up a model with other initial weights, resume from the checkpoint, train the rest.

The first launch must train as the hand-written loop does (float32, the tolerance of
``support.TOLERANCES``; compiled: ``COMPILED_TOLERANCE``) and the second end where the first
ended.

Compiled on the CPU, the backend is ``aot_eager`` (TorchDynamo and AOTAutograd, without
inductor's code generation, whose C++ build takes minutes on a small machine): the strategy's
path is the same, the kernels are eager ones. On a GPU it is torch.compile's default,
inductor; on another device, inductor where torch has code generation for its type (XPU),
else ``aot_eager`` (the project's test device).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from benchmarks.gpu.workers import model as m
from benchmarks.gpu.workers.model import deterministic
from benchmarks.gpu.workers.support import (
    ACCELERATORS,
    TOLERANCES,
    Result,
    allocated,
    backend_of,
    compare_runs,
    device_of,
    difference_text,
    expect_memory,
    main,
    memory_facts,
    peak_bytes,
    reset_peak_memory,
    seconds_text,
    step_times,
)

#: A compiled model against the eager hand-written loop: inductor fuses the elementwise work
#: around each matrix product and reorders the reductions of layer norm and softmax, which
#: changes float32 results by a few units of rounding per operation; over the blocks of
#: forward and backward and the steps of the run that grows to about 1e-6 relative (inductor
#: on the CPU: 2.5e-7 on the parameters). 1e-4 leaves a hundredfold margin and still fails on
#: any wrong gradient.
COMPILED_TOLERANCE = 1e-4
STRATEGIES = ("ddp", "fsdp", "model_parallel", "deepspeed_stage_2")
#: The class that wraps the model, for the strategies that do not shard it with FSDP2.
WRAPPERS = {"ddp": "DistributedDataParallel", "deepspeed_stage_2": "DeepSpeedEngine"}


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--strategy", choices=STRATEGIES, required=True)
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")


def parallelize(module: torch.nn.Module, mesh: Any) -> torch.nn.Module:
    """Tensor parallelism of every block's MLP (column-, then row-parallel), then FSDP2 over
    the data-parallel dimension: the layout of Lightning's ModelParallelStrategy examples."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    blocks: Any = module.blocks
    for block in blocks:
        parallelize_module(
            block.mlp, mesh["tensor_parallel"], {"0": ColwiseParallel(), "2": RowwiseParallel()}
        )
        fully_shard(block, mesh=mesh["data_parallel"])
    fully_shard(module, mesh=mesh["data_parallel"])
    return module


def strategy_name(name: str, device: str) -> str:
    """stratlib's strategy for ``--strategy name`` on ``--device device``: the generic spec's
    on a device that ``torch.accelerator`` reports."""
    return f"generic_{name}" if device == "accelerator" else name


def strategy_options(name: str) -> dict[str, Any]:
    if name in ("fsdp", "deepspeed_stage_2"):
        return {"state_dict_type": "sharded"}
    if name == "model_parallel":
        return {"parallelize_fn": parallelize, "data_parallel_size": 1, "tensor_parallel_size": 1}
    return {}


def wrapping(model: torch.nn.Module) -> dict[str, Any]:
    """How the model was wrapped: the outer class, FSDP2 modules and DTensor parameters."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    inner = getattr(model, "_orig_mod", model)
    return {
        "outer": type(inner).__name__,
        "fsdp_modules": sum(isinstance(x, FSDPModule) for x in inner.modules()),
        "dtensor_params": sum(isinstance(p, DTensor) for p in model.parameters()),
        "params": sum(1 for _ in model.parameters()),
        "param_devices": sorted({p.device.type for p in model.parameters()}),
    }


def collectives(strategy: Any, device: torch.device) -> dict[str, Any]:
    """Every collective of the strategy on a tensor of ``device``, with a world of one: each
    gives back what it was given, on the same device."""
    values = torch.arange(1.0, 5.0, device=device)
    reduced = {op: strategy.reduce(values.clone(), reduce_op=op) for op in ("sum", "mean", "max")}
    gathered = strategy.all_gather(values)
    raw = values.clone()
    dist.all_reduce(raw)
    strategy.barrier("collectives")
    return {
        "reduce": {op: (t.tolist(), t.device.type) for op, t in reduced.items()},
        "all_gather": (list(gathered.shape), gathered.device.type, gathered.flatten().tolist()),
        "all_reduce": (raw.tolist(), raw.device.type),
        "broadcast": strategy.broadcast({"step": 3}),
        "decision": strategy.reduce_boolean_decision(True),
    }


def zero_facts(strategy: Any) -> dict[str, Any]:
    from deepspeed.accelerator import get_accelerator

    engine = strategy.engine
    return {
        "stage": engine.zero_optimization_stage(),
        "optimizer": type(engine.optimizer).__name__,
        "accelerator": get_accelerator().device_name(),
    }


def has_inductor(device_type: str) -> bool:
    """Whether torch's inductor generates code for ``device_type``."""
    try:
        from torch._inductor.codegen.common import (
            get_scheduling_for_device,
            init_backend_registration,
        )

        init_backend_registration()
        return get_scheduling_for_device(device_type) is not None
    except Exception:  # noqa: BLE001 - inductor's registry is torch's own, and may change
        return False


def compile_backend(device: torch.device) -> str:
    """The backend ``nn.Module.compile`` uses in this process (see the module's notes)."""
    if device.type == "cuda" or (device.type != "cpu" and has_inductor(device.type)):
        return "inductor"
    default = torch.nn.Module.compile

    def compile_eagerly(module: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
        default(module, *args, **{"backend": "aot_eager", **kwargs})

    torch.nn.Module.compile = compile_eagerly  # type: ignore[method-assign,assignment]
    return "aot_eager"


def first_launch(
    strategy: Any, args: argparse.Namespace, data: list[Any], path: Path, hand: Any
) -> dict[str, Any]:
    import torch._dynamo

    device = strategy.root_device
    size = m.SIZES[args.size]
    half = len(data) // 2
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    net = m.build_model(size)
    optimizer = m.make_optimizer(net)
    backend = compile_backend(device) if args.compile else None
    if backend is not None:
        net = torch.compile(net, backend=backend)  # type: ignore[assignment]
    reset_peak_memory(device)
    before = allocated(device)
    model, optimizer = strategy.setup(net, optimizer)
    found: dict[str, Any] = {
        "memory": memory_facts(device, before, model),
        "compile_backend": backend,
        "compiled_in_place": getattr(model, "_compiled_call_impl", None) is not None,
        "backend": dist.get_backend(),
        "world_size": dist.get_world_size(),
        "root_device": str(device),
        "wrapping": wrapping(model),
        "collectives": collectives(strategy, device),
    }
    step = m.strategy_step(strategy, model, optimizer)
    with deterministic():
        found["losses"] = m.train(step, data[:half])
        strategy.save_checkpoint({"model": model, "optimizer": optimizer, "step": half}, path)
        found["losses"] += m.train(step, data[half:])
    found["memory"]["peak_bytes"] = peak_bytes(device)
    found["params"] = m.full_parameters(strategy.get_module_state_dict(model))
    found["compiled_graphs"] = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    if args.strategy == "deepspeed_stage_2":
        found["zero"] = zero_facts(strategy)
    # Compiled code is guarded on the deterministic setting: timed as it was compiled, so that
    # timing does not compile it again.
    with deterministic() if backend is not None else contextlib.nullcontext():
        found["times"] = step_times(
            {"stratlib": step, "hand-written": hand.step},
            data,
            size.warmup,
            size.rounds,
            size.round_steps,
            device,
        )
    return found


def resumed_launch(strategy: Any, args: argparse.Namespace, data: list[Any], path: Path) -> Any:
    half = len(data) // 2
    net = m.build_model(m.SIZES[args.size], seed=1)
    optimizer = m.make_optimizer(net)
    model, optimizer = strategy.setup(net, optimizer)
    state = {"model": model, "optimizer": optimizer, "step": 0}
    strategy.load_checkpoint(path, state)
    with deterministic():
        losses = m.train(m.strategy_step(strategy, model, optimizer), data[half:])
    return {
        "step": state["step"],
        "losses": losses,
        "params": m.full_parameters(strategy.get_module_state_dict(model)),
    }


def check(args: argparse.Namespace, result: Result) -> None:
    import stratlib

    device = device_of(args)
    size = m.SIZES[args.size]
    data = m.batches(size, size.steps, device)
    hand, expected_losses, expected_params = m.reference_run(size, device, data)

    def make() -> Any:
        return stratlib.get_strategy(
            strategy_name(args.strategy, args.device),
            accelerator=ACCELERATORS[args.device],
            devices=1,
            **strategy_options(args.strategy),
        )

    with tempfile.TemporaryDirectory(prefix="stratgen-gpu-") as folder:
        path = Path(folder) / "checkpoint"
        found = make().launch(first_launch, args, data, path, hand)
        saved = {"is_dir": path.is_dir(), "is_file": path.is_file()}
        resumed = make().launch(resumed_launch, args, data, path)
    result.details.update({k: v for k, v in found.items() if k != "params"})
    result.details["strategy"] = strategy_name(args.strategy, args.device)
    result.details["checkpoint"] = saved
    result.details["resumed_losses"] = resumed["losses"]
    backend = backend_of(device)
    result.expect(f"a process group over {backend}", found["backend"] == backend, found["backend"])
    result.expect("a world of one process", found["world_size"] == 1, found["world_size"])
    wrapped = found["wrapping"]
    expect_memory(result, device, found["memory"])
    result.expect(
        f"parameters on {device.type}",
        wrapped["param_devices"] == [device.type],
        wrapped["param_devices"],
    )
    if args.strategy in WRAPPERS:
        result.expect(
            f"wrapped in {WRAPPERS[args.strategy]}",
            wrapped["outer"] == WRAPPERS[args.strategy],
            wrapped["outer"],
        )
    else:
        result.expect("sharded by FSDP2", wrapped["fsdp_modules"] >= 1, wrapped["fsdp_modules"])
        result.expect(
            "every parameter a DTensor", wrapped["dtensor_params"] == wrapped["params"], wrapped
        )
    expected_collectives = {
        "reduce": {op: ([1.0, 2.0, 3.0, 4.0], device.type) for op in ("sum", "mean", "max")},
        "all_gather": ([1, 4], device.type, [1.0, 2.0, 3.0, 4.0]),
        "all_reduce": ([1.0, 2.0, 3.0, 4.0], device.type),
        "broadcast": {"step": 3},
        "decision": True,
    }
    got = {k: _lists(v) for k, v in found["collectives"].items()}
    for name, expected in expected_collectives.items():
        result.expect(f"{name} on the device", got[name] == _lists(expected), got[name])
    if args.strategy == "deepspeed_stage_2":
        zero = found["zero"]
        result.expect("ZeRO stage 2", zero["stage"] == 2, zero)
        result.expect(
            f"DeepSpeed's {device.type} accelerator", zero["accelerator"] == device.type, zero
        )
    sharded = args.strategy != "ddp"
    kind = "a folder of shards" if sharded else "one file"
    result.expect(
        f"the checkpoint is {kind}",
        saved["is_dir"] if sharded else saved["is_file"],
        saved,
    )
    tolerance = COMPILED_TOLERANCE if args.compile else TOLERANCES["32-true"]
    loss_diff, param_diff = compare_runs(
        result,
        "against the hand-written loop",
        found["losses"],
        expected_losses,
        found["params"],
        expected_params,
        tolerance,
    )
    half = len(data) // 2
    resume_loss, resume_param = compare_runs(
        result,
        "resumed",
        resumed["losses"],
        found["losses"][half:],
        resumed["params"],
        found["params"],
        TOLERANCES["32-true"],
    )
    result.expect("the step restored", resumed["step"] == half, resumed["step"])
    if args.compile:
        result.expect(
            "compiled again around the wrapper", found["compiled_in_place"], found["wrapping"]
        )
        result.expect("graphs compiled", found["compiled_graphs"] >= 1, found["compiled_graphs"])
    times = found["times"]
    ratio = times["stratlib"] / times["hand-written"]
    result.details["step_time_ratio"] = ratio
    result.figure = (
        f"{difference_text(loss_diff, param_diff)}; resumed: "
        f"{difference_text(resume_loss, resume_param)}; step time x{ratio:.3f} "
        f"({seconds_text(times['stratlib'])} vs {seconds_text(times['hand-written'])}"
        + (f" eager; compiled with {found['compile_backend']})" if args.compile else ")")
    )


def _lists(value: Any) -> Any:
    """Tuples as lists, so that values read back from JSON compare equal."""
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_lists(v) for v in value]
    return value


if __name__ == "__main__":
    sys.exit(main(check, options))
