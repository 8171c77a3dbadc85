"""A process group the runtime did not create is reused where it fits, refused where it does not,
and never destroyed: real jobs of 2 processes whose script creates the group itself
(``scripts/own_group.py``), started by hand and by torchrun. Ray Train's group is checked the
same way in test_ray.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stratcore import testing

from .support import finish, finish_on_a_free_port, python, start, torchrun

STEPS = 3


def reports(folder: Path) -> list[dict[str, Any]]:
    return [json.loads((folder / f"rank{r}.json").read_text(encoding="utf-8")) for r in (0, 1)]


def assert_group_kept(case: dict[str, Any]) -> None:
    assert case["same_group"] is True, "the script's group was replaced"
    assert case["sum"] == 3.0, "the script's group no longer reduces"


def assert_refused(case: dict[str, Any], *parts: str) -> None:
    error = case["error"]
    assert error.startswith("MisconfigurationError: ") and "\n" not in error, error
    for part in parts:
        assert part in error, f"{part!r} not in: {error}"
    assert_group_kept(case)


def assert_script_group_served(folder: Path, environment: str, scheduler: bool) -> None:
    """What each rank of ``own_group.py`` reported: the group served the strategy that fits it
    and survived the others; ``scheduler``: the environment is one that started the processes
    itself, which the refusal names."""
    for rank, report in enumerate(reports(folder)):
        reused = report["reused"]
        assert reused["environment"] == environment
        assert reused["samples_seen"] == list(range(16))
        testing.assert_parameters_close(reused["params"], testing.reference_parameters(STEPS))
        assert_group_kept(reused)

        failed = report["failed"]
        assert failed["error"] == "ValueError: the training function failed"
        assert_group_kept(failed)

        origin = "that stratcore did not create (the script did, or what started it"
        mine = f"a process group of 2 processes (rank {rank}, backend 'gloo') {origin}"
        assert_refused(report["other_size"], mine, f"asks for 1 (rank {rank}, backend 'gloo')")
        assert_refused(
            report["other_backend"],
            f"{mine}, under {environment})" if scheduler else f"{mine})",
            f"DDPStrategy asks for 2 (rank {rank}, backend 'gloo_alt')",
        )


def test_a_scripts_own_group_started_by_hand(tmp_path: Path) -> None:
    """Two processes started as a job script would, each creating the group (env://)."""
    command = python("own_group.py", "--out", str(tmp_path))
    variables = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
    outcomes = finish_on_a_free_port(
        lambda port: [
            start(command, RANK=str(r), LOCAL_RANK=str(r), MASTER_PORT=port, **variables)
            for r in (0, 1)
        ]
    )
    for code, _, stderr in outcomes:
        assert code == 0, stderr[-4000:]
    assert_script_group_served(tmp_path, "LightningEnvironment", scheduler=False)


def test_a_torchrun_scripts_own_group(tmp_path: Path) -> None:
    """torchrun starts both processes; the script sets the group up before the strategy."""
    script = python("own_group.py", "--out", str(tmp_path))
    command = torchrun("--standalone", "--nnodes", "1", "--nproc-per-node", "2", *script[1:])
    for code, _, stderr in finish([start(command)]):
        assert code == 0, stderr[-4000:]
    assert_script_group_served(tmp_path, "TorchElasticEnvironment", scheduler=True)
