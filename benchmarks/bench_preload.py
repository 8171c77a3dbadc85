"""CPU time of starting commands that import torch: fresh interpreters against forks of a
preload server (``stratcore.preload``), as the test suite starts the commands it runs.

A round starts the same script (``import torch``, one small tensor operation) ``count`` times as
fresh interpreters, and ``count`` times through a new preloader, whose one server imports torch
once and forks for each; the preloaded side's CPU time includes the server's. CPU time is this
process's children's (the server reaps its forks, and is reaped when the preloader closes), so
the machine's load barely changes it.
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
SCRIPT = "import torch\nprint(float(torch.ones(4).sum()))\n"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _start_all(script: Path, count: int, preloaded: bool) -> tuple[float, float]:
    """CPU and wall seconds of running ``script`` ``count`` times, one after the other."""
    env = worker_env()
    cpu, wall = _children_cpu(), time.perf_counter()
    preloader = preload.Preloader() if preloaded else None
    watch.use_preloader(preloader)
    try:
        for _ in range(count):
            done = watch.run([sys.executable, str(script)], env=env, preload=("torch",))
            if done.returncode != 0 or done.stdout.strip() != "4.0":
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
    return section
