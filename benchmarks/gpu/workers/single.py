"""stratlib's single-device strategy in one precision against the hand-written loop.

``python -m benchmarks.gpu.workers.single --device cuda --size full --precision bf16-mixed
--out r.json``

The strategy is ``single_device`` on CUDA and the CPU, ``generic_single`` (the generic spec's)
on whichever other device ``torch.accelerator`` reports (``--device accelerator``).

Both sides train the same model from the same initial weights on the same batches, with
deterministic kernels: every step's loss and the parameters after the run must agree within
the precision's tolerance (``support.TOLERANCES``). The check also looks at what the precision
means, so that a precision not applied at all cannot pass: the dtype of the parameters and of
a linear layer's output during the forward pass, and for '16-mixed' on a device a GradScaler on
the device that ends at the hand-written loop's scale; on a device, that ``setup`` put the
parameters in the device's memory. Then it times both sides, back to back.

float16 on a device needs its loss scaled (torch's automatic mixed precision recipe; stratlib's
cuda and generic accelerators declare ``grad_scaler: true``); its CPU accelerator declares no
scaler, so '16-mixed' on the CPU is compared with a hand-written loop without one.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import torch

from benchmarks.gpu.workers import model as m
from benchmarks.gpu.workers.model import deterministic
from benchmarks.gpu.workers.support import (
    ACCELERATORS,
    TOLERANCES,
    Result,
    Skipped,
    allocated,
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

#: The single-device strategy of each kind of device.
STRATEGIES = {"cuda": "single_device", "accelerator": "generic_single", "cpu": "single_device"}

#: The dtype of a linear layer's output inside the forward pass, and of the parameters.
COMPUTE_DTYPES = {
    "32-true": (torch.float32, torch.float32),
    "16-mixed": (torch.float16, torch.float32),
    "bf16-mixed": (torch.bfloat16, torch.float32),
    "bf16-true": (torch.bfloat16, torch.bfloat16),
}


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--precision", choices=list(COMPUTE_DTYPES), required=True)


def output_dtypes(module: torch.nn.Module) -> list[torch.dtype]:
    """Record the dtype of every output of ``module`` (a forward hook)."""
    seen: list[torch.dtype] = []
    module.register_forward_hook(lambda _m, _a, out: seen.append(out.dtype))
    return seen


def check(args: argparse.Namespace, result: Result) -> None:
    import stratlib

    device = device_of(args)
    size = m.SIZES[args.size]
    precision = args.precision
    try:
        strategy = stratlib.get_strategy(
            STRATEGIES[args.device],
            accelerator=ACCELERATORS[args.device],
            devices=1,
            precision=precision,
        )
    except stratlib.MisconfigurationError as exc:
        if args.device == "cpu":
            raise Skipped(f"the CPU lacks {precision}: {exc}") from None
        raise
    data = m.batches(size, size.steps, device)
    compute, param_dtype = COMPUTE_DTYPES[precision]
    scaled = precision == "16-mixed" and device.type != "cpu"

    with deterministic():
        hand = m.HandLoop(m.build_model(size), precision, device, scaler=scaled)
        expected_losses = m.train(hand.step, data)
        expected_params = m.hand_parameters(hand.model)
        expected_scale = None if hand.scaler is None else float(hand.scaler.get_scale())

    def train(strategy: Any) -> dict[str, Any]:
        net = m.build_model(size)
        reset_peak_memory(device)
        before = allocated(device)
        model, optimizer = strategy.setup(net, m.make_optimizer(net))
        memory = memory_facts(device, before, model)
        seen = output_dtypes(strategy.unwrap(model).blocks[0].mlp[0])
        step = m.strategy_step(strategy, model, optimizer)
        with deterministic():
            losses = m.train(step, data)
        memory["peak_bytes"] = peak_bytes(device)
        params = m.full_parameters(strategy.get_module_state_dict(model))
        plugin = strategy.precision_plugin
        scaler = getattr(plugin, "scaler", None)
        scale = None if scaler is None else float(scaler.get_scale())
        times = step_times(
            {"stratlib": step, "hand-written": hand.step},
            data,
            size.warmup,
            size.rounds,
            size.round_steps,
            device,
        )
        return {
            "strategy": STRATEGIES[args.device],
            "memory": memory,
            "losses": losses,
            "params": params,
            "root_device": str(strategy.root_device),
            "param_dtypes": sorted({str(p.dtype) for p in model.parameters()}),
            "compute_dtypes": sorted({str(d) for d in seen[:1]}),
            "plugin": type(plugin).__name__,
            "scaler": None if scaler is None else type(scaler).__name__,
            "scaler_device": getattr(scaler, "_device", None),
            "scale": scale,
            "times": times,
        }

    found = strategy.launch(train)
    result.details.update({k: v for k, v in found.items() if k not in ("params",)})
    result.details["expected_losses"] = expected_losses
    expect_memory(result, device, found["memory"])
    result.expect(
        f"trains on {device.type}",
        found["root_device"].startswith(device.type),
        found["root_device"],
    )
    result.expect(
        f"parameters in {param_dtype}",
        found["param_dtypes"] == [str(param_dtype)],
        found["param_dtypes"],
    )
    result.expect(
        f"a linear layer computes in {compute}",
        found["compute_dtypes"] == [str(compute)],
        found["compute_dtypes"],
    )
    if precision == "16-mixed" and not scaled:
        result.expect("no GradScaler", found["scaler"] is None, found["scaler"])
    if scaled:
        result.expect(
            f"a GradScaler on {device.type}",
            found["scaler"] == "GradScaler" and found["scaler_device"] == device.type,
            (found["scaler"], found["scaler_device"]),
        )
        result.expect(
            "the loss scale ends where the hand-written loop's does",
            found["scale"] == expected_scale,
            (found["scale"], expected_scale),
        )
    loss_diff, param_diff = compare_runs(
        result,
        precision,
        found["losses"],
        expected_losses,
        found["params"],
        expected_params,
        TOLERANCES[precision],
    )
    result.expect("the loss falls", found["losses"][-1] < found["losses"][0], found["losses"][::3])
    times = found["times"]
    ratio = times["stratlib"] / times["hand-written"]
    result.details["step_time_ratio"] = ratio
    result.figure = (
        f"{difference_text(loss_diff, param_diff)}; step time x{ratio:.3f} "
        f"({seconds_text(times['stratlib'])} vs {seconds_text(times['hand-written'])})"
    )


if __name__ == "__main__":
    sys.exit(main(check, options))
