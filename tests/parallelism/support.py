"""Helpers of the parallelism tests: start scripts the way users do and read rank 0's result."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from stratcore.testing import clean_environ
from torch import nn

SCRIPTS = Path(__file__).parent / "scripts"
GENERATED = Path(__file__).resolve().parents[2] / "generated"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


#: Seconds a job may go without progress (a milestone in ``<out>/progress``, or output on
#: stderr) before it counts as hung. The scripts' strategies also time out their collectives
#: (their ``timeout`` option), which ends a job whose processes wait on each other sooner.
STALL = 300.0


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
    several; returns each one's exit code and stderr (stdout goes to ``OUT/stdout-<node>.log``).
    The job fails when it makes no progress for ``stall`` seconds (no milestone in
    ``OUT/progress``, nothing written to stdout or stderr), however long it takes."""
    path = SCRIPTS / script
    command = [sys.executable, str(path), *args]
    if path.parent == SCRIPTS:
        command += ["--out", str(out)]
    port = str(free_port())
    processes, logs = [], []
    for node in range(nodes):
        env = clean_environ(extra)
        env["PYTHONPATH"] = str(GENERATED)
        if nodes > 1:
            env.update(NODE_RANK=str(node), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        stdout = (out / f"stdout-{node}.log").open("w", encoding="utf-8")
        stderr = (out / f"stderr-{node}.log").open("w+", encoding="utf-8")
        logs += [stdout, stderr]
        processes.append(
            subprocess.Popen(command, cwd=cwd, env=env, stdout=stdout, stderr=stderr, text=True)
        )
    progress = out / "progress"
    seen, since = None, time.monotonic()
    while any(process.poll() is None for process in processes):
        state = (_size(progress), *(os.fstat(log.fileno()).st_size for log in logs))
        if state != seen:
            seen, since = state, time.monotonic()
        elif time.monotonic() - since > stall:
            for process in processes:
                process.kill()
            last = (
                progress.read_text(encoding="utf-8").splitlines()[-1:] if progress.exists() else []
            )
            raise AssertionError(
                f"{script}: no progress for {stall:g} s (last milestone: {last or 'none'})"
            )
        time.sleep(0.5)
    outcomes = []
    for process, stderr in zip(processes, logs[1::2], strict=True):
        stderr.seek(0)
        outcomes.append((process.returncode, stderr.read()))
    for log in logs:
        log.close()
    return outcomes


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return -1


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
