"""Helpers of the sharded-strategy tests: run a scenario script on 2 ranks, and compute what
one process training on the whole batch gets."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from stratcore.launchers.base import rank_command
from stratcore.testing import clean_environ, reference_batch, watch
from torch import nn

from tests.support import REPO

SCRIPTS = Path(__file__).parent / "scripts"
GENERATED = REPO / "generated"
#: The modules the scripts' processes import from the test tree (the exit check).
JOB_MODULES = REPO / "tests" / "support" / "job_modules"


def environ(**extra: str) -> dict[str, str]:
    """The test process's environment without cluster variables, importing this checkout's
    package and the exit check."""
    env = clean_environ(extra)
    env["PYTHONPATH"] = os.pathsep.join([str(GENERATED), str(JOB_MODULES)])
    return env


def run_script(
    script: str, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], Any]:
    """Run ``scripts/<script>`` with ``args``; returns the process and its RESULT line, parsed."""
    # The script's process is rank 0: it starts as the launcher starts the other ranks.
    command = rank_command([sys.executable, str(SCRIPTS / script), *args])
    process = watch.run(command, env=env or environ())
    result = None
    for line in process.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
    return process, result


def run_scenario(
    scenario: str,
    strategy: str,
    *,
    options: dict[str, Any] | None = None,
    precision: str | None = None,
    steps: int = 3,
    folder: Path | None = None,
) -> tuple[subprocess.CompletedProcess[str], Any]:
    args = [scenario, strategy, "--options", json.dumps(options or {}), "--steps", str(steps)]
    if precision is not None:
        args += ["--precision", precision]
    if folder is not None:
        args += ["--folder", str(folder)]
    return run_script("scenarios.py", *args)


def run_scenarios(runs: dict[str, dict[str, Any]]) -> dict[str, tuple[Any, Any]]:
    """Run several scenarios, each a launch of its own, in one job (``scenarios.py batch``):
    the processes start once. ``runs`` maps a name to ``run``'s keyword arguments; returns
    each name's (the job's process, rank 0's result, or None if the job failed before)."""
    names = list(runs)
    batch = json.dumps([runs[name] for name in names])
    process = watch.run(
        rank_command([sys.executable, str(SCRIPTS / "scenarios.py"), "batch", batch]),
        what=f"the scenarios {', '.join(names)}",
        env=environ(),
    )
    results: dict[int, Any] = {}
    for line in process.stdout.splitlines():
        if line.startswith("RESULT "):
            index, _, text = line[len("RESULT ") :].partition(" ")
            results[int(index)] = json.loads(text)
    return {name: (process, results.get(index)) for index, name in enumerate(names)}


def scenarios_module() -> ModuleType:
    """scripts/scenarios.py imported here, for its model definitions."""
    spec = importlib.util.spec_from_file_location("sharded_scenarios", SCRIPTS / "scenarios.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def train_alone(model: nn.Module, steps: int, momentum: float = 0.9) -> torch.optim.Optimizer:
    """``steps`` SGD steps of ``model`` on the whole reference batch in this process."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=momentum)
    x, y = reference_batch()
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return optimizer


def assert_close(actual: Any, expected: torch.Tensor, atol: float = 1e-5) -> None:
    got = torch.tensor(actual, dtype=torch.float32)
    assert got.shape == expected.shape, f"shape {tuple(got.shape)} != {tuple(expected.shape)}"
    assert torch.allclose(
        got, expected.float(), atol=atol
    ), f"max difference {(got - expected).abs().max()}"
