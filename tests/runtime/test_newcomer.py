"""The documented training code, started every way users start it, trains like one process.

``scripts/newcomer.py`` uses only the public API: ``get_strategy``, ``launch``, ``setup``,
``backward``, ``optimizer_step``, ``block_backward_sync`` (gradient accumulation),
``distributed_sampler_kwargs`` with torch's DistributedSampler, ``save_checkpoint`` /
``load_checkpoint`` and the collectives. Every run has 2 ranks in all; after 3 steps the
parameters must equal 3 SGD steps on the whole data set in a single process.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from stratcore import testing

from .support import finish, finish_on_a_free_port, python, read_result, start, torchrun

STEPS = 3


def assert_trained_like_one_process(result: dict, environment: str, atol: float = 1e-5) -> None:
    assert result["world_size"] == 2
    assert result["environment"] == environment
    assert result["samples_seen"] == list(
        range(16)
    ), "the ranks did not split the data set between them"
    assert result["every_rank_loaded"] is True
    testing.assert_parameters_close(
        result["params"], testing.reference_parameters(STEPS), atol=atol
    )
    testing.assert_training_converges(result)
    assert result["last_loss"] == pytest.approx(result["losses"][-1])


def assert_all_succeeded(outcomes: list[tuple[int, str, str]]) -> None:
    for code, _, stderr in outcomes:
        assert code == 0, stderr[-4000:]


@pytest.mark.parametrize(
    ("strategy", "cls"), [("ddp", "DDPStrategy"), ("ddp_fork", "DDPSpawnStrategy")]
)
def test_from_plain_python(strategy: str, cls: str, tmp_path: Path) -> None:
    """'ddp' starts the script again for rank 1; 'ddp_fork' forks both ranks."""
    outcomes = finish(
        [start(python("newcomer.py", "--strategy", strategy, "--out", str(tmp_path)))]
    )
    assert_all_succeeded(outcomes)
    result = read_result(tmp_path)
    assert_trained_like_one_process(result, "LightningEnvironment")
    assert result["strategy"] == cls
    assert (tmp_path / "ckpt" / "last.ckpt").is_file()


def test_ddp_spawn_from_plain_python_in_bf16_mixed(tmp_path: Path) -> None:
    """As the documentation's example: bfloat16 autocast, so close to the reference only."""
    command = python(
        "newcomer.py",
        "--strategy",
        "ddp_spawn",
        "--precision",
        "bf16-mixed",
        "--out",
        str(tmp_path),
    )
    assert_all_succeeded(finish([start(command)]))
    result = read_result(tmp_path)
    assert result["precision"] == "bf16-mixed"
    assert_trained_like_one_process(result, "LightningEnvironment", atol=2e-2)


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_under_torchrun_on_one_node(strategy: str, tmp_path: Path) -> None:
    """torchrun starts both ranks; the strategy's own launcher stands aside."""
    # --standalone: torchrun's agent binds its store on a port of the kernel's choosing.
    command = torchrun(
        "--standalone", "--nnodes", "1", "--nproc-per-node", "2",
        *python("newcomer.py", "--strategy", strategy, "--devices", "2", "--out", str(tmp_path))[1:],
    )  # fmt: skip
    assert_all_succeeded(finish([start(command)]))
    assert_trained_like_one_process(read_result(tmp_path), "TorchElasticEnvironment")


def test_ddp_under_torchrun_on_two_nodes(tmp_path: Path) -> None:
    """Two torchrun groups on this host, as on two machines: 1 process each."""

    script = python("newcomer.py", "--strategy", "ddp", "--devices", "1", "--num-nodes", "2")
    script += ["--out", str(tmp_path)]

    def commands(port: str) -> list[list[str]]:
        rendezvous = ["--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", port]
        return [
            torchrun(*rendezvous, "--node-rank", str(node), "--nproc-per-node", "1", *script[1:])
            for node in (0, 1)
        ]

    assert_all_succeeded(
        finish_on_a_free_port(lambda port: [start(command) for command in commands(port)])
    )
    result = read_result(tmp_path)
    assert_trained_like_one_process(result, "TorchElasticEnvironment")
    assert result["sampler"] == {"num_replicas": 2, "rank": 0}


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn", "ddp2"])
def test_two_nodes_started_by_hand(strategy: str, tmp_path: Path) -> None:
    """`python script.py` once per node with NODE_RANK, MASTER_ADDR and MASTER_PORT set (the
    default Lightning environment); DDP2 runs as its one-device-per-node case, and ddp_spawn
    spawns the node's one rank."""
    command = python(
        "newcomer.py",
        "--strategy",
        strategy,
        "--devices",
        "1",
        "--num-nodes",
        "2",
        "--out",
        str(tmp_path),
    )
    assert_all_succeeded(
        finish_on_a_free_port(
            lambda port: [
                start(command, NODE_RANK=str(node), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
                for node in (0, 1)
            ]
        )
    )
    result = read_result(tmp_path)
    assert_trained_like_one_process(result, "LightningEnvironment")
    assert (
        result["strategy"]
        == {"ddp": "DDPStrategy", "ddp_spawn": "DDPSpawnStrategy", "ddp2": "DDP2Strategy"}[strategy]
    )
    assert result["node_rank"] == 0


def test_the_reference_is_not_trivial() -> None:
    """The reference moves away from the initial parameters, so equality above means something."""
    initial = testing.reference_parameters(0)
    trained = testing.reference_parameters(STEPS)
    assert any(not torch.allclose(a, b, atol=1e-3) for a, b in zip(initial, trained, strict=True))
