"""Shared helpers of the DeepSpeed tests: running scenarios.py in fresh processes and the
single-process reference they are compared with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from stratcore import testing
from stratcore.launchers.base import rank_command
from stratcore.testing import watch
from torch import nn

from tests.support import REPO

HERE = Path(__file__).resolve().parent
GENERATED = REPO / "generated"
#: The modules the scenarios' processes import from the test tree (the exit check).
JOB_MODULES = REPO / "tests" / "support" / "job_modules"
SCENARIOS = HERE / "scenarios.py"

Runner = Callable[..., tuple[subprocess.CompletedProcess[str], Any]]


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No cluster variables from outside, and no DeepSpeed accelerator chosen in advance."""
    testing.isolated_environment(monkeypatch)
    # Set, then removed, so that what a launch sets is removed when the test ends.
    monkeypatch.setenv("DS_ACCELERATOR", "")
    monkeypatch.delenv("DS_ACCELERATOR")
    yield


def _environ(env: dict[str, str] | None) -> dict[str, str]:
    """A clean environment with the generated package and the exit check importable and no
    DeepSpeed accelerator chosen in advance."""
    environ = testing.clean_environ(env)
    environ.pop("DS_ACCELERATOR", None)
    environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(GENERATED), str(JOB_MODULES), environ.get("PYTHONPATH")])
    )
    return environ


def run_scenario(
    scenario: str,
    strategy: str,
    *,
    options: dict[str, Any] | None = None,
    precision: str | None = None,
    args: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.CompletedProcess[str], Any]:
    """Run a scenario of scenarios.py with two processes; return the process and rank 0's result."""
    command = [sys.executable, str(SCENARIOS), scenario, strategy]
    command += ["--options", json.dumps(options or {}), "--args", json.dumps(args or {})]
    if precision is not None:
        command += ["--precision", precision]
    process = watch.run(rank_command(command), env=_environ(env), cwd=HERE)
    result = None
    for line in process.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
    return process, result


def run_cases(
    cases: list[dict[str, Any]],
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run cases of scenarios.py (``{"case", "scenario", "strategy", "options", "precision",
    "args"}``) in the two processes of one job, a launch each; return the process and rank 0's
    result of each case that ended."""
    command = [sys.executable, str(SCENARIOS), "cases", "--cases", json.dumps(cases)]
    process = watch.run(rank_command(command), env=_environ(None), cwd=HERE)
    results = {}
    for line in process.stdout.splitlines():
        if line.startswith("RESULT "):
            report = json.loads(line[len("RESULT ") :])
            results[report["case"]] = report["result"]
    return process, results


#: The optimizers of scenarios.py, for the single-process reference.
OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
    "adam": lambda params: torch.optim.Adam(params, lr=0.01),
}

Reference = Callable[..., tuple[list[torch.Tensor], dict[str, Any]]]


@pytest.fixture(scope="session")
def reference() -> Reference:
    """``reference(steps, optimizer_name="sgd")``: parameters and optimizer state after
    ``steps`` steps on the whole batch in one process, as the scenarios train."""
    cache: dict[tuple[int, str], tuple[list[torch.Tensor], dict[str, Any]]] = {}

    def after(steps: int, optimizer_name: str = "sgd") -> tuple[list[torch.Tensor], dict[str, Any]]:
        if (steps, optimizer_name) not in cache:
            model = testing.reference_model()
            optimizer = OPTIMIZERS[optimizer_name](model.parameters())
            x, y = testing.reference_batch()
            for _ in range(steps):
                optimizer.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
            params = [p.detach().clone() for p in model.state_dict().values()]
            cache[steps, optimizer_name] = (params, optimizer.state_dict())
        return cache[steps, optimizer_name]

    return after


@pytest.fixture
def runner() -> Runner:
    """``run_scenario``, for the tests."""
    return run_scenario


@pytest.fixture(scope="session")
def cases_runner() -> Callable[..., tuple[subprocess.CompletedProcess[str], dict[str, Any]]]:
    """``run_cases``, for the tests."""
    return run_cases
