"""CPU time of ``import stratlib`` against ``import torch``, each in a fresh interpreter.

``import stratlib`` imports torch itself, so the ratio is what the generated package adds on
top of the one dependency it cannot avoid. The timer starts after interpreter start-up, right
before the import statement. A second check lists the modules ``import stratlib`` loads:
no optional engine, no Lightning and none of the generator's dependencies may be among them.
"""

from __future__ import annotations

import json
import sys

from .common import (
    BenchmarkError,
    Row,
    Section,
    Settings,
    at_most,
    median,
    rotate,
    run_command,
    run_worker,
    seconds,
    spread,
    worker_env,
)

TARGET = 1.05
# ``import stratlib`` starts by importing torch; importing torch explicitly first changes
# nothing in the total and splits it into torch's part and stratlib's own.
PROBE = (
    "import time, json\n"
    "cpu, wall = time.process_time(), time.perf_counter()\n"
    "import torch\n"
    "between = time.process_time()\n"
    "{statement}\n"
    "end = time.process_time()\n"
    "print(json.dumps([end - cpu, time.perf_counter() - wall, end - between]))\n"
)


def import_times(module: str) -> tuple[float, float, float]:
    """(CPU seconds, wall seconds, CPU seconds after torch) of ``import module`` in a fresh
    interpreter."""
    statement = "" if module == "torch" else f"import {module}"
    command = [sys.executable, "-c", PROBE.format(statement=statement)]
    completed = run_command(command, env=worker_env())
    if completed.returncode != 0:
        raise BenchmarkError(f"import {module} failed:\n{completed.stderr[-3000:]}")
    cpu, wall, own = json.loads(completed.stdout.strip().splitlines()[-1])
    return float(cpu), float(wall), float(own)


def import_cost(settings: Settings) -> Section:
    pairs = settings.pick(1, 15)
    cpu: dict[str, list[float]] = {"torch": [], "stratlib": []}
    wall: dict[str, list[float]] = {"torch": [], "stratlib": []}
    own: list[float] = []
    for index in range(pairs):
        for module in rotate(["torch", "stratlib"], index):
            c, w, o = import_times(module)
            cpu[module].append(c)
            wall[module].append(w)
            if module == "stratlib":
                own.append(o)
    ratios = [s / t for s, t in zip(cpu["stratlib"], cpu["torch"], strict=True)]
    ratio = median(ratios)
    modules = run_worker("benchmarks.workers.modules", ["import"])
    heavy = modules["heavy_loaded"]
    by_torch = set(modules["heavy_loaded_by_torch"])
    own_heavy = [m for m in heavy if m not in by_torch]
    outside = [m for m in modules["added_outside_stratlib"] if not m.startswith("_")]
    heavy_text = "none" if not own_heavy else ", ".join(own_heavy)
    section = Section("import")
    section.rows.append(
        Row(
            name="import stratlib (CPU)",
            measured=seconds(median(cpu["stratlib"])),
            baseline=f"{seconds(median(cpu['torch']))} import torch",
            ratio=ratio,
            spread=spread(ratios),
            target=at_most(TARGET),
            met=ratio <= TARGET and not own_heavy,
            notes=f"stratlib's own share {seconds(median(own))} CPU "
            f"(= ratio {1 + median(own) / median(cpu['torch']):.3f}); "
            f"optional backends/jinja2/yaml/black loaded: {heavy_text}; "
            f"+{modules['added_modules']} modules over torch",
        )
    )
    section.details.append(
        f"Import cost: {pairs} pairs of fresh interpreters, alternating which goes first; CPU "
        "time (time.process_time) of the import statement alone; ratio = median of per-pair "
        "ratios [min-max]. stratlib's own share is the CPU time of `import stratlib` right "
        "after `import torch` in the same process (less noisy than the difference of two "
        "processes). Wall time of the same imports: stratlib "
        f"{seconds(median(wall['stratlib']))}, torch {seconds(median(wall['torch']))}."
    )
    checked = ", ".join(m for m in modules_checked())
    loaded_by_torch = ", ".join(sorted(by_torch)) or "none"
    section.details.append(
        f"Modules checked after `import stratlib`: {checked}. Loaded by stratlib: {heavy_text}; "
        f"already loaded by `import torch` alone: {loaded_by_torch}. Modules stratlib adds "
        f"outside its own package: {', '.join(outside) or 'none'}."
    )
    return section


def modules_checked() -> tuple[str, ...]:
    from .workers.modules import HEAVY

    return HEAVY
