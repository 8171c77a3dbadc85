"""Per-step time of 'model_parallel' (tensor parallelism x FSDP2) and of 'fsdp' with hybrid
sharding on a 2 x 2 mesh of CPU ranks (gloo), each against the same layout written by hand
with torch.distributed (``workers/parallel_step.py``).

Both sides of a comparison train in the same processes, one step of each in turn, so that
the load of the machine falls on both alike; a ratio is taken within one run.
"""

from __future__ import annotations

from typing import Any

from .common import (
    BenchmarkError,
    Row,
    Section,
    Settings,
    at_most,
    median,
    run_worker,
    seconds,
    spread,
)

WORKER = "benchmarks.workers.parallel_step"
ROWS = {
    "2d": ("step time: model_parallel 2x2", "hand-written TP x FSDP2"),
    "hsdp": ("step time: fsdp HYBRID_SHARD 2x2", "hand-written HSDP"),
    "pp": ("step time: model_parallel pp 2 x dp 2", "hand-written 1F1B pipeline x FSDP2"),
}
STEP_TARGET = 1.03


def step_config(settings: Settings) -> dict[str, int]:
    if settings.quick:  # a smoke test of the plumbing: one step
        return {"width": 128, "depth": 1, "batch": 32, "warmup": 0, "steps": 1, "threads": 1}
    return {"width": 256, "depth": 2, "batch": 64, "warmup": 5, "steps": 60, "threads": 1}


def _run(config: dict[str, int]) -> dict[str, Any]:
    """One job that trains every layout (``ROWS``) in turn: each layout's result."""
    args = ["--layout", *ROWS]
    for key, value in sorted(config.items()):
        args += [f"--{key}", str(value)]
    try:
        layouts: dict[str, Any] = run_worker(WORKER, args)["layouts"]
    except BenchmarkError:
        # One failure is repeated; a second one is reported.
        layouts = run_worker(WORKER, args)["layouts"]
    return layouts


def step_time(settings: Settings) -> Section:
    config = step_config(settings)
    rounds = settings.pick(1, 3)
    section = Section("parallel")
    runs = [_run(config) for _ in range(rounds)]
    for layout, (name, baseline) in ROWS.items():
        ours: list[float] = []
        theirs: list[float] = []
        alone: list[float] = []
        for run in runs:
            times = run[layout]["step_times"]
            ours.append(median(times["stratlib"]))
            theirs.append(median(times["torch"]))
            if "torch_schedule_alone" in times:
                alone.append(median(times["torch_schedule_alone"]))
        ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
        ratio = median(ratios)
        notes = ""
        if alone:
            bare = median([a / b for a, b in zip(ours, alone, strict=True)])
            notes = f"{bare:.3f} against the schedule alone ({seconds(median(alone))})"
        section.rows.append(
            Row(
                name=name,
                measured=seconds(median(ours)),
                baseline=f"{seconds(median(theirs))} {baseline}",
                ratio=ratio,
                spread=spread(ratios),
                target=at_most(STEP_TARGET),
                met=ratio <= STEP_TARGET,
                notes=notes,
            )
        )
    section.details.append(
        f"Model: MLP of {2 * config['depth']} Linear({config['width']}, {config['width']}) layers, "
        f"batch {config['batch']} per data-parallel rank, SGD, MSE loss; 4 ranks on a 2 x 2 mesh, "
        f"gloo, {config['threads']} intra-op thread per rank. model_parallel: column- then "
        "row-parallel layers over the tensor-parallel pairs and fully_shard across them, the "
        "same parallelize function on both sides; HSDP: every Linear a fully_shard group on a "
        "(replicate, shard) mesh; pipeline: the layers cut in half into two stages, each "
        "fully_shard over dp, the 1F1B schedule over 4 microbatches (pipeline_split and "
        "forward_backward against PipelineStage and Schedule1F1B by hand, both ending with the "
        "last stage's loss summed over the pipeline group, which forward_backward returns on "
        "every process; the notes compare with the schedule alone, without that sum). Both sides train in the same 4 processes, one step of each per "
        "iteration in alternating order; the three layouts train one after the other in one job. "
        f"{rounds} run(s) x {config['steps']} timed steps after "
        f"{config['warmup']} warm-up steps; measured = median over runs of rank 0's median "
        "step time; ratio = median of per-run ratios [min-max over runs]."
    )
    return section
