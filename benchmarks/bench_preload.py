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
    watch.use_preloader(preloader)
    try:
        for _ in range(count):
            done = watch.run([sys.executable, str(script)], env=env, preload=("torch",))
            if done.returncode != 0 or done.stdout.strip() != expected:
                raise RuntimeError(f"the script failed:\n{done.stderr[-3000:]}")
        if preloader is not None and preloader.forked != count:
            raise RuntimeError("the preloader did not start the commands")
    finally:
        watch.use_preloader(None)
        if preloader is not None:
            preloader.close()
    return _children_cpu() - cpu, time.perf_counter() - wall


def preload_cost(settings: Settings) -> Section:
    count = settings.pick(1, 8)
    rounds = settings.pick(1, 3)
    measured: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="stratbench-preload-") as folder:
        script = Path(folder) / "imports_torch.py"
        script.write_text(SCRIPT, encoding="utf-8")
        for index in range(rounds):
            for preloaded in rotate([False, True], index):
                measured[preloaded].append(_start_all(script, count, preloaded))
    ratios = [p[0] / f[0] for p, f in zip(measured[True], measured[False], strict=True)]
    ratio = median(ratios)
    fresh_cpu = median([cpu for cpu, _ in measured[False]])
    preloaded_cpu = median([cpu for cpu, _ in measured[True]])
    fresh_wall = median([wall for _, wall in measured[False]])
    preloaded_wall = median([wall for _, wall in measured[True]])
    section = Section("preload")
    section.rows.append(
        Row(
            name="commands that import torch, preloaded (CPU)",
            measured=seconds(preloaded_cpu),
            baseline=f"{seconds(fresh_cpu)} fresh interpreters",
            ratio=ratio,
            spread=spread(ratios),
            target=at_most(TARGET),
            met=ratio <= TARGET,
            notes=f"{count} runs; wall: {seconds(preloaded_wall)} preloaded, "
            f"{seconds(fresh_wall)} fresh",
        )
    )
    section.details.append(
        f"Preload: {rounds} round(s) of {count} runs of a script that imports torch, as fresh "
        "interpreters and through a new preloader (its server's own import counted), rotating "
        "which goes first; CPU time of all processes involved; ratio = preloaded / fresh per "
        "round."
    )
    rank_jobs = settings.pick(1, 4)
    section.rows.append(_ranks_row(rank_jobs, rounds))
    section.details.append(
        f"Ranks: {rounds} round(s) of {rank_jobs} DDP jobs of 2 processes through a preloader, "
        "rank 1 a fresh interpreter or a fork of rank 0's rank server, rotating which goes "
        "first; CPU time of all processes involved; ratio = forked / fresh per round."
    )
    return section


def _ranks_row(count: int, rounds: int) -> Row:
    measured: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="stratbench-ranks-") as folder:
        script = Path(folder) / "two_ranks.py"
        script.write_text(RANKS_SCRIPT, encoding="utf-8")
        for index in range(rounds):
            for forked in rotate([False, True], index):
                run = _start_all(script, count, preloaded=True, ranks=forked, expected="2.0")
                measured[forked].append(run)
    ratios = [f[0] / p[0] for f, p in zip(measured[True], measured[False], strict=True)]
    ratio = median(ratios)
    return Row(
        name="2-rank jobs, ranks from the rank server (CPU)",
        measured=seconds(median([cpu for cpu, _ in measured[True]])),
        baseline=f"{seconds(median([cpu for cpu, _ in measured[False]]))} ranks fresh",
        ratio=ratio,
        spread=spread(ratios),
        target=at_most(RANKS_TARGET),
        met=ratio <= RANKS_TARGET,
        notes=f"{count} jobs; wall: {seconds(median([w for _, w in measured[True]]))} forked, "
        f"{seconds(median([w for _, w in measured[False]]))} fresh",
    )
