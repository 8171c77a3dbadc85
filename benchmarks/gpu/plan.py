"""The checks of ``python -m benchmarks.gpu``, in the order they run, with what each covers and
how long it is expected to take on one H100.

The expected seconds size the run: a check starts only while the time budget has that much
left, and is stopped at three times its figure (or at the end of the budget, if sooner). They
are estimates for a machine with one H100 and 16 cores (importing torch and starting CUDA
included); every report gives each check's measured seconds beside them.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Seconds for the checks on a GPU (235 s expected in all, see ``gpu_seconds``): with the
#: probe, installing carried wheels and the start of the harness (about 20 s), the whole
#: command ends within 5 minutes 30 seconds on one H100, whatever hangs.
GPU_BUDGET = 300.0
#: A check is stopped at this many times its expected seconds (on a GPU).
LIMIT_FACTOR = 3.0

#: What a check needs besides the device, and why it is skipped without it.
NEEDS = {
    "accelerator": (
        "stratlib's generic plugins drive whichever accelerator torch.accelerator finds; "
        "on the CPU it finds none"
    ),
    "lightning": "Lightning is not installed (pip install 'lightning>=2.6,<2.7')",
    "deepspeed": (
        "DeepSpeed is not installed here: build its wheels with `python -m benchmarks.gpu.wheels` "
        "and carry .whl (docs/guides/gpu-check.md)"
    ),
}


@dataclass(frozen=True)
class Check:
    """One row of the report: a worker module run with its arguments in a fresh process."""

    name: str
    worker: str
    args: tuple[str, ...]
    covers: str
    #: Expected seconds on one H100, process start included.
    gpu_seconds: float
    needs: tuple[str, ...] = ()


def _single(precision: str, what: str) -> Check:
    return Check(
        f"single_device {precision}",
        "single",
        ("--precision", precision),
        f"{what}; equal to the hand-written loop, step time as a ratio to it",
        10,
    )


def _parallel(strategy: str, what: str, seconds: float, *extra: str) -> Check:
    name = f"{strategy} + torch.compile" if "--compile" in extra else strategy
    needs = ("deepspeed",) if strategy.startswith("deepspeed") else ()
    return Check(name, "parallel", ("--strategy", strategy, *extra), what, seconds, needs)


def _lightning(framework: str, plugin: str, what: str) -> Check:
    needs = ("lightning", "accelerator") if plugin.startswith("generic") else ("lightning",)
    label = "Trainer" if framework == "trainer" else "Fabric"
    return Check(
        f"{label} {plugin}",
        "lightning",
        ("--framework", framework, "--plugin", plugin),
        what,
        15,
        needs,
    )


PARALLEL = (
    "world of one over NCCL (elsewhere the backend torch maps the device to), collectives on "
    "device tensors, checkpoint saved halfway and resumed in a second launch"
)
CHECKS: tuple[Check, ...] = (
    _single("32-true", "float32"),
    _single("16-mixed", "autocast float16 with a GradScaler on the device"),
    _single("bf16-mixed", "autocast bfloat16"),
    _single("bf16-true", "bfloat16 parameters, no autocast"),
    _parallel("ddp", f"DistributedDataParallel; {PARALLEL} (one file)", 15),
    _parallel("fsdp", f"FSDP2; {PARALLEL} (sharded, torch.distributed.checkpoint)", 15),
    _parallel(
        "model_parallel",
        f"tensor parallelism and FSDP2 on a 1 x 1 device mesh; {PARALLEL} (distributed)",
        15,
    ),
    _parallel(
        "deepspeed_stage_2",
        f"DeepSpeed ZeRO-2 in float32; {PARALLEL} (DeepSpeed's sharded format)",
        30,
    ),
    _parallel(
        "ddp",
        "a torch.compile'd model set up under ddp (compiled again around DDP, inductor); "
        "equal to the eager hand-written loop, step time as a ratio to it",
        60,
        "--compile",
    ),
    _lightning("trainer", "generic_ddp", "Lightning's Trainer, stratlib's accelerator and DDP"),
    _lightning(
        "trainer", "model_parallel", "Lightning's Trainer, stratlib's ModelParallelStrategy"
    ),
    _lightning("fabric", "generic_fsdp", "Lightning Fabric, stratlib's accelerator and FSDP"),
    _lightning("fabric", "model_parallel", "Lightning Fabric, stratlib's ModelParallelStrategy"),
)


def gpu_seconds() -> float:
    """Expected seconds of every check on one H100."""
    return sum(check.gpu_seconds for check in CHECKS)
