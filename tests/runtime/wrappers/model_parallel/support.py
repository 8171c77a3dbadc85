"""Helpers of the parallelism tests: start scripts the way users do and read rank 0's result."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from stratcore.launchers.base import rank_command
from stratcore.testing import clean_environ, watch
from stratcore.testing.processes import run_given_a_port
from torch import nn

from tests.support import REPO

SCRIPTS = Path(__file__).parent / "scripts"
GENERATED = REPO / "generated"


#: Seconds a job may go without progress (output, or CPU time used by any of its processes)
#: before it counts as hung (``stratcore.testing.watch``). The scripts' strategies also time out their
#: collectives (their ``timeout`` option), which ends a job whose processes wait on each other.
STALL = watch.STALL


def run_nodes(
    script: str,
    *args: str,
    out: Path,
    nodes: int = 1,
    stall: float = STALL,
    cwd: Path | None = None,
    **extra: str,
) -> list[tuple[int, str]]:
    """Start ``scripts/<script> ... --out OUT`` (a script of the test's own: its path, and no
    ``--out``) once per node, NODE_RANK, MASTER_ADDR and MASTER_PORT set when there are
    several; returns each one's exit code and stderr (stdout is also kept in
    ``OUT/stdout-<node>.log``). The job fails when it makes no progress for ``stall`` seconds
    (``stratcore.testing.watch``), however long it takes; a port taken before the job bound it gives
    the job another one."""
    path = SCRIPTS / script
    command = [sys.executable, str(path), *args]
    if path.parent == SCRIPTS:
        command += ["--out", str(out)]
    # The script's process is its node's rank 0: it starts as the launcher starts the others.
    command = rank_command(command)

    def start(port: str) -> list[watch.Job]:
        jobs = []
        for node in range(nodes):
            env = clean_environ(extra)
            env["PYTHONPATH"] = str(GENERATED)
            if nodes > 1:
                env.update(NODE_RANK=str(node), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
            jobs.append(
                watch.Job(
                    command,
                    what=f"{path.name} node {node}",
                    env=env,
                    cwd=cwd,
                    stall=stall,
                )
            )
        return jobs

    done = run_given_a_port(start)
    for node, process in enumerate(done):
        (out / f"stdout-{node}.log").write_text(process.stdout, encoding="utf-8")
    return [(process.returncode, process.stderr) for process in done]


def run_job(script: str, out: Path, *args: str, **kwargs: Any) -> Any:
    """Run a script that writes ``result.json`` (see ``run_nodes``), assert that every node
    succeeded, and return what it wrote."""
    for code, stderr in run_nodes(script, *args, out=out, **kwargs):
        assert code == 0, stderr[-4000:]
    return read_result(out)


def read_result(folder: Path) -> Any:
    return json.loads((folder / "result.json").read_text(encoding="utf-8"))


def assert_close(
    actual: dict[str, Any],
    expected: dict[str, torch.Tensor],
    atol: float = 1e-5,
    ordered: bool = True,
) -> None:
    """Every tensor within ``atol``; with ``ordered``, the keys in the same order too."""
    keys = list(actual) if ordered else sorted(actual)
    wanted = list(expected) if ordered else sorted(expected)
    assert keys == wanted, f"{keys} != {wanted}"
    for key, value in expected.items():
        got = torch.tensor(actual[key])
        assert got.shape == value.shape, f"{key}: {tuple(got.shape)} != {tuple(value.shape)}"
        difference = (got - value).abs().max().item()
        assert (
            difference <= atol
        ), f"{key} differs from one process on the whole batch by {difference:.3g}"


def train_alone(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int
) -> dict[str, torch.Tensor]:
    """``steps`` SGD steps (lr 0.1, momentum 0.9) of ``model`` on the whole batch in this process."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
