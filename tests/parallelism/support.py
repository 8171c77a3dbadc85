"""Helpers of the parallelism tests: start scripts the way users do and read rank 0's result."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
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


def run_nodes(
    script: str, *args: str, nodes: int = 1, timeout: float = 300, **extra: str
) -> list[tuple[int, str]]:
    """Start ``scripts/<script>`` once per node (NODE_RANK, MASTER_ADDR and MASTER_PORT set
    when there are several); returns each one's exit code and stderr."""
    command = [sys.executable, str(SCRIPTS / script), *args]
    port = str(free_port())
    processes = []
    for node in range(nodes):
        env = clean_environ(extra)
        env["PYTHONPATH"] = str(GENERATED)
        if nodes > 1:
            env.update(NODE_RANK=str(node), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        processes.append(
            subprocess.Popen(
                command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
            )
        )
    outcomes = []
    for process in processes:
        try:
            _, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for other in processes:
                other.kill()
            raise
        outcomes.append((process.returncode, stderr))
    return outcomes


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
