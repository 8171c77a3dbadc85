"""What the workers of ``benchmarks.gpu`` share: the command line, the result they write,
comparisons with their tolerances, and step timing.

A worker is ``python -m benchmarks.gpu.workers.<name> --device cuda|accelerator|cpu
--size full|small --out result.json [options]``. It writes one JSON object: ``status`` ('pass', 'fail' or 'skip'), ``figure`` (one
line for the table), ``conditions`` (each thing it checked, with what it found) and
``details``. An exception becomes a failed result carrying its traceback, so that the harness
always has a row to print.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from benchmarks.gpu.workers.model import NONDETERMINISTIC

#: Largest relative difference allowed between a strategy's run and the hand-written loop, per
#: precision, on every step's loss and on every parameter after the run (relative to the
#: largest entry of the reference tensor). Both sides run the same operations in the same
#: order with deterministic kernels, so the expected difference is zero; what these allow is a
#: few units of rounding of the precision's compute dtype (float32: 2**-23; float16: 2**-10;
#: bfloat16: 2**-7 at 1.0) carried over the run's steps, from a reduction done in another
#: order. A precision that is not applied at all (float32 where bfloat16 was asked for) is
#: caught by the dtype conditions of the check, not by these.
TOLERANCES = {
    "32-true": 1e-5,
    "16-mixed": 4e-3,
    "bf16-mixed": 1.6e-2,
    "bf16-true": 3.2e-2,
}


#: The kinds of device a check runs on: ``cuda`` (torch.cuda's first GPU, through the cuda
#: spec's and torch's own strategies: what a GPU report records), ``accelerator`` (the first
#: device of whichever accelerator ``torch.accelerator`` reports, through the generic spec's
#: strategies and plugins) and ``cpu``.
DEVICES = ("cuda", "accelerator", "cpu")
#: stratlib's accelerator for each kind of device.
ACCELERATORS = {"cuda": "cuda", "accelerator": "generic", "cpu": "cpu"}


class Skipped(Exception):
    """The check cannot run here (a precision the device lacks, a package not installed)."""


@dataclass
class Result:
    """What a check found: conditions, one figure for the table, details for the report."""

    figure: str = ""
    conditions: list[dict[str, Any]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def expect(self, what: str, ok: bool, found: Any = None) -> bool:
        """Record a condition; the check fails if any is false."""
        self.conditions.append({"what": what, "ok": bool(ok), "found": _plain(found)})
        return bool(ok)

    def as_json(self) -> dict[str, Any]:
        passed = all(c["ok"] for c in self.conditions) and bool(self.conditions)
        return {
            "status": "pass" if passed else "fail",
            "figure": self.figure,
            "conditions": self.conditions,
            "details": _plain(self.details),
        }


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float | int | str | bool) or value is None:
        return value
    return str(value)


def main(
    check: Callable[[argparse.Namespace, Result], None],
    options: Callable[[argparse.ArgumentParser], None] | None = None,
) -> int:
    """Run ``check(args, result)`` and write its result to ``--out``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=DEVICES, required=True)
    parser.add_argument("--size", choices=("full", "small"), required=True)
    parser.add_argument("--out", type=Path, required=True)
    if options is not None:
        options(parser)
    args = parser.parse_args()
    result = Result()
    try:
        check(args, result)
        result.details["nondeterministic"] = sorted(NONDETERMINISTIC)
        written = result.as_json()
    except Skipped as exc:
        written = {"status": "skip", "figure": str(exc), "conditions": [], "details": {}}
    except Exception as exc:
        last = str(exc).strip().splitlines()
        written = {
            "status": "fail",
            "figure": f"{type(exc).__name__}: {last[0] if last else ''}"[:300],
            "conditions": result.conditions,
            "details": _plain(result.details),
            "traceback": traceback.format_exc()[-6000:],
        }
    args.out.write_text(json.dumps(written, indent=2), encoding="utf-8")
    return 0


def device_of(args: argparse.Namespace) -> torch.device:
    """The device a check trains on, for ``--device``."""
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda, but torch.cuda.is_available() is False")
        return torch.device("cuda", 0)
    if args.device == "accelerator":
        found = torch.accelerator.current_accelerator(check_available=True)
        if found is None or found.type == "cpu":
            raise RuntimeError("--device accelerator, but torch.accelerator reports no device")
        return torch.device(found.type, 0)
    return torch.device("cpu")


def synchronize(device: torch.device) -> None:
    """Wait for the device's work, through its device module (``torch.cuda`` on CUDA)."""
    if device.type != "cpu":
        torch.get_device_module(device).synchronize(device)


def backend_of(device: torch.device) -> str:
    """The collective backend a strategy's process group must use on ``device``: the one torch
    maps its type to (nccl on CUDA, gloo on the CPU, what an extension registered for its
    device)."""
    import torch.distributed as dist

    return str(dist.Backend.default_device_backend_map.get(device.type, "?"))


def allocated(device: torch.device) -> int:
    """Bytes of tensors on ``device`` now, as its device module counts them (0 on the CPU)."""
    if device.type == "cpu":
        return 0
    return int(torch.get_device_module(device).memory_allocated(device))


def memory_facts(device: torch.device, before: int, model: torch.nn.Module) -> dict[str, Any]:
    """What ``setup`` added to the device's memory (``before``: ``allocated`` before it) and the
    bytes of ``model``'s parameters."""
    return {
        "setup_bytes": allocated(device) - before,
        "parameter_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
    }


def peak_bytes(device: torch.device) -> int | None:
    """The most bytes the device held since ``reset_peak_memory`` (None on the CPU)."""
    if device.type == "cpu":
        return None
    return int(torch.get_device_module(device).max_memory_allocated(device))


def reset_peak_memory(device: torch.device) -> None:
    if device.type != "cpu":
        torch.get_device_module(device).reset_peak_memory_stats(device)


def expect_memory(result: Result, device: torch.device, memory: dict[str, Any]) -> None:
    """On a device, a condition that ``setup`` put the model's parameters in the device's
    memory (its allocator's count grew by at least their bytes)."""
    result.details["memory"] = memory
    if device.type != "cpu":
        result.expect(
            "setup put the parameters in the device's memory",
            memory["setup_bytes"] >= memory["parameter_bytes"],
            memory,
        )


# -- comparisons -------------------------------------------------------------------------


def relative_difference(found: float, expected: float) -> float:
    return abs(found - expected) / max(abs(expected), 1e-12)


def compare_runs(
    result: Result,
    label: str,
    losses: Sequence[float],
    expected_losses: Sequence[float],
    params: Mapping[str, torch.Tensor],
    expected_params: Mapping[str, torch.Tensor],
    tolerance: float,
) -> tuple[float, float]:
    """Conditions that ``losses`` and ``params`` equal the reference within ``tolerance``
    (relative); returns the largest loss and parameter differences."""
    result.expect(f"{label}: as many losses as the reference", len(losses) == len(expected_losses))
    loss_diff = max(
        (relative_difference(a, b) for a, b in zip(losses, expected_losses, strict=False)),
        default=float("inf"),
    )
    result.expect(
        f"{label}: the same parameter names as the reference",
        sorted(params) == sorted(expected_params),
        sorted(set(params) ^ set(expected_params))[:5],
    )
    param_diff = 0.0
    for name, expected in expected_params.items():
        if name not in params:
            continue
        scale = max(float(expected.abs().max()), 1e-12) if expected.numel() else 1.0
        diff = float((params[name] - expected).abs().max()) if expected.numel() else 0.0
        param_diff = max(param_diff, diff / scale)
    result.expect(
        f"{label}: every step's loss within {tolerance:g} of the reference",
        loss_diff <= tolerance,
        loss_diff,
    )
    result.expect(
        f"{label}: parameters after the run within {tolerance:g} of the reference",
        param_diff <= tolerance,
        param_diff,
    )
    return loss_diff, param_diff


def difference_text(loss_diff: float, param_diff: float) -> str:
    if loss_diff == 0 and param_diff == 0:
        return "identical"
    return f"loss diff {loss_diff:.1e}, param diff {param_diff:.1e}"


# -- timing --------------------------------------------------------------------------------


def step_times(
    sides: Mapping[str, Callable[..., Any]],
    data: Sequence[tuple[torch.Tensor, torch.Tensor]],
    warmup: int,
    rounds: int,
    round_steps: int,
    device: torch.device,
) -> dict[str, float]:
    """Median seconds per step of each side: warm-up steps, then ``rounds`` rounds of
    ``round_steps`` steps of each side in turn, the order rotated every round."""
    names = list(sides)
    for name in names:
        for index in range(warmup):
            sides[name](*data[index % len(data)])
    per_step: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            synchronize(device)
            started = time.perf_counter()
            for index in range(round_steps):
                sides[name](*data[index % len(data)])
            synchronize(device)
            per_step[name].append((time.perf_counter() - started) / round_steps)
    return {name: statistics.median(values) for name, values in per_step.items()}


def seconds_text(value: float) -> str:
    return f"{value * 1000:.2f} ms" if value < 1 else f"{value:.2f} s"
