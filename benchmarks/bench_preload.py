"""CPU time of starting commands that import torch: fresh interpreters against forks of a
preload server (``stratcore.preload``), as the test suite starts the commands it runs; and of
the ranks such a command starts: fresh interpreters against forks of its rank server.

A round starts the same script (``import torch``, one small tensor operation) ``count`` times as
fresh interpreters, and ``count`` times through a new preloader, whose one server imports torch
once and forks for each; the preloaded side's CPU time includes the server's. The rank row runs
a DDP job of 2 processes (PopenLauncher: rank 1 runs the script again) ``count`` times through
a preloader, its ranks as fresh interpreters and as forks. CPU time is this process's
children's (a rank server reaps its ranks, the server its forks and the rank servers they leave,
and the server is reaped when the preloader closes), so the machine's load barely changes it.
"""

from __future__ import annotations

import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from stratcore import preload, watch

from .common import Row, Section, Settings, at_most, median, rotate, seconds, spread, worker_env

TARGET = 0.5
#: The rank row's target: rank 0 is preloaded on both sides, so at best the ratio nears 1/2.
RANKS_TARGET = 0.8
SCRIPT = "import torch\nprint(float(torch.ones(4).sum()))\n"
RANKS_SCRIPT = """\
import torch
import stratlib

def total(strategy):
    return strategy.reduce(torch.ones(1), reduce_op="sum").item()

strategy = stratlib.get_strategy("ddp", accelerator="cpu", devices=2)
summed = strategy.launch(total)
if strategy.global_rank == 0:
    print(summed)
"""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _start_all(
    script: Path, count: int, preloaded: bool, ranks: bool = False, expected: str = "4.0"
) -> tuple[float, float]:
    """CPU and wall seconds of running ``script`` ``count`` times, one after the other (through
    a preloader, its ranks from rank servers or not)."""
    env = worker_env()
    cpu, wall = _children_cpu(), time.perf_counter()
    preloader = preload.Preloader(ranks=ranks) if preloaded else None
    previous = watch.use_preloader(preloader)  # a quick run's own, restored after
    try:
        for _ in range(count):
            done = watch.run([sys.executable, str(script)], env=env, preload=("torch",))
            if done.returncode != 0 or done.stdout.strip() != expected:
                raise RuntimeError(f"the script failed:\n{done.stderr[-3000:]}")
        if preloader is not None and preloader.forked != count:
            raise RuntimeError("the preloader did not start the commands")
    finally:
        watch.use_preloader(previous)
        if preloader is not None:
            preloader.close()
    return _children_cpu() - cpu, time.perf_counter() - wall


def preload_cost(settings: Settings) -> Section:
    count = settings.pick(1, 8)
    rounds = settings.pick(1, 3)
    section = Section("preload")
    measured = _both_sides(
        SCRIPT, rounds, lambda script, preloaded: _start_all(script, count, preloaded)
    )
    section.rows.append(
        _row(
            "commands that import torch, preloaded (CPU)",
            measured,
            TARGET,
            baseline="fresh interpreters",
            notes=f"{count} runs; wall: {{}} preloaded, {{}} fresh",
        )
    )
    section.details.append(
        f"Preload: {rounds} round(s) of {count} runs of a script that imports torch, as fresh "
        "interpreters and through a new preloader (its server's own import counted), rotating "
        "which goes first; CPU time of all processes involved; ratio = preloaded / fresh per "
        "round."
    )
    jobs = settings.pick(1, 4)
    measured = _both_sides(
        RANKS_SCRIPT,
        rounds,
        lambda script, forked: _start_all(script, jobs, True, ranks=forked, expected="2.0"),
    )
    section.rows.append(
        _row(
            "2-rank jobs, ranks from the rank server (CPU)",
            measured,
            RANKS_TARGET,
            baseline="ranks fresh",
            notes=f"{jobs} jobs; wall: {{}} forked, {{}} fresh",
        )
    )
    section.details.append(
        f"Ranks: {rounds} round(s) of {jobs} DDP jobs of 2 processes through a preloader, "
        "rank 1 a fresh interpreter or a fork of rank 0's rank server, rotating which goes "
        "first; CPU time of all processes involved; ratio = forked / fresh per round."
    )
    return section


def _both_sides(
    source: str, rounds: int, run: Callable[[Path, bool], tuple[float, float]]
) -> dict[bool, list[tuple[float, float]]]:
    """(CPU, wall) seconds of ``run(script, side)`` for both sides (False: the baseline),
    ``rounds`` times, rotating which goes first; ``script`` holds ``source``."""
    measured: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="stratbench-preload-") as folder:
        script = Path(folder) / "script.py"
        script.write_text(source, encoding="utf-8")
        for index in range(rounds):
            for side in rotate([False, True], index):
                measured[side].append(run(script, side))
    return measured


def _row(
    name: str,
    measured: dict[bool, list[tuple[float, float]]],
    target: float,
    baseline: str,
    notes: str,
) -> Row:
    """The row of CPU ratios side / baseline per round; ``notes`` has two places for the
    median wall times, the side's and the baseline's."""
    pairs = zip(measured[True], measured[False], strict=True)
    ratios = [side[0] / base[0] for side, base in pairs]
    ratio = median(ratios)
    cpu = {side: median([c for c, _ in runs]) for side, runs in measured.items()}
    wall = {side: median([w for _, w in runs]) for side, runs in measured.items()}
    return Row(
        name=name,
        measured=seconds(cpu[True]),
        baseline=f"{seconds(cpu[False])} {baseline}",
        ratio=ratio,
        spread=spread(ratios),
        target=at_most(target),
        met=ratio <= target,
        notes=notes.format(seconds(wall[True]), seconds(wall[False])),
    )
