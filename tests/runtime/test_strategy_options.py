"""Options of DDP, custom strategies and layer synchronisation, in real 2-rank runs.

``scripts/options.py`` runs seven launches in one job; see its documentation.
"""

from __future__ import annotations

import pytest
import torch
from stratcore import testing
from torch import nn

import stratlib

from .support import finish, python, read_result, start

#: The module's job (its module-scoped fixture) runs once: its tests share one pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("strategy-options")


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("options")
    outcomes = finish([start(python("options.py", "--out", str(folder)))])
    assert outcomes[0][0] == 0, outcomes[0][2][-4000:]
    return read_result(folder)


@pytest.mark.parametrize("case", ["seeds_style", "module_style"])
def test_subclass_overriding_configure_ddp(reports: dict, case: str) -> None:
    report = reports[case]
    assert report["wrapper"] == "TrackedDDP", "the subclass's configure_ddp was not used"
    assert report["world_size"] == 2
    testing.assert_parameters_close(report["params"], testing.reference_parameters(3))


def test_find_unused_parameters_trains_a_model_with_an_unused_head(reports: dict) -> None:
    report = reports["find_unused_parameters"]
    assert report["options"]["find_unused_parameters"] is True
    assert report["unused_head_got_gradients"] is False
    testing.assert_parameters_close(report["params"], testing.reference_parameters(3))


def test_static_graph_backend_and_timeout(reports: dict) -> None:
    report = reports["static_graph"]
    assert report["options"] == {
        "find_unused_parameters": False,
        "static_graph": True,
        "timeout": 60.0,
        "process_group_backend": "gloo",
    }
    assert report["backend"] == "gloo"
    # The process group of the earlier launches is reused, with this launch's timeout.
    assert report["process_group_timeout"] == 60.0
    assert reports["seeds_style"]["process_group_timeout"] == 1800.0
    testing.assert_parameters_close(report["params"], testing.reference_parameters(3))


def test_every_rank_loads_what_an_asynchronous_save_wrote(reports: dict) -> None:
    assert reports["async_checkpoint"] == {
        "checkpoint_io": "AsyncCheckpointIO",
        "every_rank_read_the_last_save": True,
    }


def test_block_backward_sync_skips_the_gradient_synchronisation(reports: dict) -> None:
    assert reports["block_backward_sync"] == {
        "ranks_differ_inside_block": True,
        "ranks_agree_after_block": True,
    }


def test_sync_batchnorm_on_cpu_ranks_is_refused_with_the_reason(reports: dict) -> None:
    message = reports["sync_batchnorm_error"]
    assert message.startswith(
        "sync_batchnorm=True: torch.nn.SyncBatchNorm synchronises batch statistics only on"
    )
    assert "no CPU kernels" in message and "trains on cpu" in message


def test_torch_sync_batchnorm_cannot_run_on_cpu() -> None:
    """What the refusal above is based on: torch's kernels for synchronised statistics."""
    with pytest.raises(NotImplementedError):
        torch.batch_norm_stats(torch.randn(4, 3), 1e-5)


def test_sync_batchnorm_on_one_process_converts_and_trains() -> None:
    strategy = stratlib.get_strategy("single_device", accelerator="cpu", sync_batchnorm=True)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, 1))
    model, optimizer = strategy.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert isinstance(model[1], nn.SyncBatchNorm)
    x, y = testing.reference_batch()
    losses = []
    for _ in range(3):
        loss = nn.functional.mse_loss(model(x), y)
        strategy.backward(loss)
        strategy.optimizer_step(optimizer)
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    strategy.teardown()


def test_layer_sync_revert_restores_batch_norm_with_its_statistics() -> None:
    layer_sync = stratlib.TorchSyncBatchNorm()
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    model[1].running_mean.fill_(0.5)
    converted = layer_sync.apply(model)
    assert isinstance(converted[1], nn.SyncBatchNorm)
    reverted = layer_sync.revert(converted)
    assert not isinstance(reverted[1], nn.SyncBatchNorm)
    assert isinstance(reverted[1], nn.modules.batchnorm._BatchNorm)
    assert torch.equal(reverted[1].running_mean, torch.full((3,), 0.5))
    assert reverted[1](torch.randn(5, 3)).shape == (5, 3)
