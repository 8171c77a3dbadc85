"""Per-step time and launch latency of the generated DDP strategies on 2 CPU ranks (gloo),
against hand-written torch DistributedDataParallel and, where installed, Lightning Fabric.

Every round runs each variant once, in a rotating order, as a fresh ``python -m`` process
(``workers/ddp_step.py``); ratios are taken within a round, so variants compared with each
other ran back to back under the same machine load.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from functools import cache
from typing import Any

from .common import (
    BenchmarkError,
    Row,
    Section,
    Settings,
    at_most,
    median,
    rotate,
    run_worker,
    seconds,
    spread,
)

BASELINE = "torch"
LABELS = {
    "torch": "hand-written torch DDP",
    "stratlib-ddp": "stratlib 'ddp' (popen launcher)",
    "stratlib-ddp_spawn": "stratlib 'ddp_spawn' (spawn launcher)",
    "fabric": "Lightning Fabric 'ddp'",
}
SHORT = {"stratlib-ddp": "ddp", "stratlib-ddp_spawn": "ddp_spawn", "fabric": "Fabric ddp"}
STEP_TARGET = 1.02
LAUNCH_TARGET = 1.05


def fabric_installed() -> bool:
    return importlib.util.find_spec("lightning") is not None


def variants() -> list[str]:
    found = [BASELINE, "stratlib-ddp", "stratlib-ddp_spawn"]
    return [*found, "fabric"] if fabric_installed() else found


def step_config(settings: Settings) -> dict[str, int]:
    """Big enough for a step of tens of milliseconds on one thread per rank."""
    if settings.quick:  # a smoke test of the plumbing: one step
        return {"width": 256, "depth": 2, "batch": 64, "warmup": 0, "steps": 1, "threads": 1}
    return {"width": 512, "depth": 4, "batch": 256, "warmup": 10, "steps": 60, "threads": 1}


def launch_config(settings: Settings) -> dict[str, int]:
    """A small model and one step: launching dominates. The quick run shares the step runs."""
    if settings.quick:
        return step_config(settings)
    return {"width": 256, "depth": 2, "batch": 64, "warmup": 0, "steps": 1, "threads": 1}


#: Runs that failed and were repeated, with the first line of their error, for the details.
RETRIED: list[str] = []


@cache
def _run(variant: str, config: tuple[tuple[str, int], ...], round_index: int) -> dict[str, Any]:
    args = ["--variant", variant]
    for key, value in config:
        args += [f"--{key}", str(value)]
    try:
        return run_worker("benchmarks.workers.ddp_step", args)
    except BenchmarkError as exc:
        # One failure is reported and repeated; a second one fails the benchmark.
        RETRIED.append(f"{LABELS[variant]}: {_cause(str(exc))}")
        return run_worker("benchmarks.workers.ddp_step", args)


def _cause(error: str) -> str:
    """The last line of a failed run's output, and any C++ abort message before it."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    if not lines:
        return "no output"
    aborts = [line for line in lines if line.startswith("terminate called")]
    return " / ".join([*aborts[:1], lines[-1]])


def _retried_detail() -> list[str]:
    if not RETRIED:
        return []
    listed = "; ".join(RETRIED)
    return [f"Runs that failed and were repeated once ({len(RETRIED)}): {listed}."]


def run_rounds(config: dict[str, int], rounds: int) -> list[dict[str, dict[str, Any]]]:
    key = tuple(sorted(config.items()))
    results = []
    for index in range(rounds):
        results.append({v: _run(v, key, index) for v in rotate(variants(), index)})
    return results


def _ratios(values: dict[str, list[float]], variant: str) -> list[float]:
    return [a / b for a, b in zip(values[variant], values[BASELINE], strict=True)]


def _parameters(config: dict[str, int]) -> int:
    width, depth = config["width"], config["depth"]
    return (depth + 1) * (width * width + width)


def step_time(settings: Settings) -> Section:
    config = step_config(settings)
    rounds = settings.pick(1, 5)
    results = run_rounds(config, rounds)
    per_step = {v: [median(r[v]["step_times"]) for r in results] for v in variants()}
    section = Section("runtime")
    base = median(per_step[BASELINE])
    for variant in variants():
        if variant == BASELINE:
            continue
        ratios = _ratios(per_step, variant)
        ours = variant.startswith("stratlib")
        ratio = median(ratios)
        section.rows.append(
            Row(
                name=f"step time: {SHORT[variant]}",
                measured=seconds(median(per_step[variant])),
                baseline=f"{seconds(base)} torch DDP",
                ratio=ratio,
                spread=spread(ratios),
                target=at_most(STEP_TARGET) if ours else "- (reference)",
                met=(ratio <= STEP_TARGET) if ours else None,
                notes=_step_notes(results, variant),
            )
        )
    section.details.append(
        f"Model: MLP of {config['depth'] + 1} Linear({config['width']}, {config['width']}) layers "
        f"({_parameters(config) / 1e6:.2f} M parameters), batch {config['batch']} per rank, SGD, "
        f"MSE loss; 2 ranks, gloo, {config['threads']} intra-op thread per rank for every variant. "
        f"{rounds} round(s) x {config['steps']} timed steps after {config['warmup']} warm-up "
        "steps; measured = median over rounds of each run's median step time on rank 0; ratio "
        "= median of per-round ratios to the torch run of the same round [min-max over rounds]."
    )
    launched = {v: results[0][v].get("threads_as_launched") for v in variants()}
    section.details.append(
        "Intra-op threads per rank as each launcher leaves them (before pinning): "
        + ", ".join(f"{LABELS[v]} {n}" for v, n in launched.items())
        + f" (on {_cpu_count()} CPUs)."
    )
    if not settings.quick:
        section.details.append(_default_threads(config))
    section.details += _retried_detail()
    RETRIED.clear()
    return section


def _default_threads(config: dict[str, int]) -> str:
    """What leaving the threads as the launcher sets them costs 'ddp', run back to back with
    the pinned setting (the table pins every variant to the same count)."""
    pinned_key = tuple(sorted(config.items()))
    default_key = tuple(sorted({**config, "threads": 0}.items()))
    pinned: list[float] = []
    default: list[float] = []
    for index in range(3):
        for key, into in rotate([(default_key, default), (pinned_key, pinned)], index):
            into.append(median(_run("stratlib-ddp", key, 100 + index)["step_times"]))
    ratios = [d / p for d, p in zip(default, pinned, strict=True)]
    return (
        "stratlib 'ddp' left with the intra-op threads its launcher gives each rank (torch's "
        f"default) instead of {config['threads']} per rank as in the table: "
        f"{seconds(median(default))} per step vs {seconds(median(pinned))} pinned, ratio "
        f"{median(ratios):.2f} {spread(ratios, 2)} over 3 back-to-back pairs."
    )


def _step_notes(results: Sequence[dict[str, dict[str, Any]]], variant: str) -> str:
    first = results[0][variant]
    if "forward_hooks" not in first:
        return ""
    return (
        f"wraps in {first['wrapped_model']}, {first['precision_plugin']}, "
        f"{first['forward_hooks']} forward hooks"
    )


def launch_latency(settings: Settings) -> Section:
    config = launch_config(settings)
    rounds = settings.pick(1, 11)
    results = run_rounds(config, rounds)
    latency = {
        v: [r[v]["first_step_end"] - r[v]["started_at"] for r in results] for v in variants()
    }
    section = Section("launch")
    base = median(latency[BASELINE])
    for variant in variants():
        if variant == BASELINE:
            continue
        ratios = _ratios(latency, variant)
        ours = variant.startswith("stratlib")
        ratio = median(ratios)
        section.rows.append(
            Row(
                name=f"launch to first step: {SHORT[variant]}",
                measured=seconds(median(latency[variant])),
                baseline=f"{seconds(base)} torch.mp spawn",
                ratio=ratio,
                spread=spread(ratios),
                target=at_most(LAUNCH_TARGET) if ours else "- (reference)",
                met=(ratio <= LAUNCH_TARGET) if ours else None,
            )
        )
    section.details.append(
        "Launch latency: wall time from starting `python -m benchmarks.workers.ddp_step` to the "
        "end of rank 0's first training step (interpreter start-up, imports, starting the other "
        "ranks, process group, model set-up and one step of a "
        f"{_parameters(config) / 1e6:.2f} M-parameter MLP). The baseline starts both ranks "
        "with torch.multiprocessing.start_processes (spawn), connects them through a store "
        "it holds from before they start (as stratlib's launchers hold theirs), and calls "
        f"init_process_group and DistributedDataParallel by hand. {rounds} round(s), rotating "
        "order."
    )
    section.details += _retried_detail()
    RETRIED.clear()
    return section


def _cpu_count() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
