"""Optimizers made before ``setup`` train the model ``setup`` returns, where moving the model gives
it new Parameter objects (as a move onto an XLA device does; torch does it on any device when
``torch.__future__.set_overwrite_module_params_on_conversion(True)`` is set).

The oracle is torch's documented way to resume on a converted model: the optimizer made from
the converted model's parameters, then ``load_state_dict`` of the state the first one had. The
generated tests train every strategy that moves a model this way
(``trains_after_moves_that_replace_parameters``); these cover what they do not: optimizer state
that exists before ``setup``, several parameter groups, a frozen parameter, tied weights.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from stratcore.testing import reference_batch
from torch import nn

import stratlib

STEPS = 3

OPTIMIZERS: dict[str, Callable[[list[dict[str, Any]]], torch.optim.Optimizer]] = {
    "sgd_momentum": lambda groups: torch.optim.SGD(groups, lr=0.1, momentum=0.9),
    "adam": lambda groups: torch.optim.Adam(groups, lr=0.01),
    "adamw_amsgrad": lambda groups: torch.optim.AdamW(groups, lr=0.01, amsgrad=True),
    "rmsprop": lambda groups: torch.optim.RMSprop(groups, lr=0.01, momentum=0.5),
    "adagrad": lambda groups: torch.optim.Adagrad(groups, lr=0.1),
}


@pytest.fixture(params=[True, False], ids=["replacing_moves", "moves_in_place"])
def replacing(request: pytest.FixtureRequest) -> Iterator[bool]:
    future = torch.__future__
    before = future.get_overwrite_module_params_on_conversion()
    future.set_overwrite_module_params_on_conversion(request.param)
    yield request.param
    future.set_overwrite_module_params_on_conversion(before)


def model() -> nn.Sequential:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    net[2].bias.requires_grad_(False)  # frozen: in no optimizer
    return net


def groups(net: nn.Sequential) -> list[dict[str, Any]]:
    """Two parameter groups with their own learning rates."""
    return [
        {"params": list(net[0].parameters()), "lr": 0.05},
        {"params": [net[2].weight]},
    ]


def step(net: nn.Module, optimizer: torch.optim.Optimizer, dtype: torch.dtype) -> None:
    x, y = (t.to(dtype) for t in reference_batch())
    nn.functional.mse_loss(net(x), y).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def trained_parameters(net: nn.Module) -> list[torch.Tensor]:
    return [t.detach().clone() for t in net.state_dict().values()]


@pytest.mark.parametrize("precision", ["32-true", "64-true"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_and_its_state_follow_the_move(
    name: str, precision: str, replacing: bool
) -> None:
    make = OPTIMIZERS[name]
    dtype = torch.float64 if precision == "64-true" else torch.float32

    # The oracle: a step on the CPU in float32, then the optimizer made again from the
    # converted model and loaded with that state, as torch documents resuming.
    net = model()
    first = make(groups(net))
    step(net, first, torch.float32)
    saved = first.state_dict()
    reference = net.to(dtype)
    resumed = make(groups(reference))
    resumed.load_state_dict(saved)
    for _ in range(STEPS):
        step(reference, resumed, dtype)

    strategy = stratlib.get_strategy("single_device", accelerator="cpu", precision=precision)
    net = model()
    optimizer = make(groups(net))
    step(net, optimizer, torch.float32)
    net, optimizer = strategy.setup(net, optimizer)
    held = [p for group in optimizer.param_groups for p in group["params"]]
    trained = [p for p in net.parameters() if p.requires_grad]
    assert len(held) == len(trained) and all(
        p is q for p, q in zip(held, trained, strict=True)
    ), "the optimizer holds parameters the set-up model does not train"
    assert all(any(key is p for p in held) for key in optimizer.state), "state of a stale key"
    assert all(
        v.dtype == (torch.float32 if k == "step" else dtype)
        for state in optimizer.state.values()
        for k, v in state.items()
        if isinstance(v, torch.Tensor) and v.is_floating_point()
    ), "the optimizer's state is not in the parameters' dtype (its step count in float32)"
    x, y = (t.to(dtype) for t in reference_batch())
    for _ in range(STEPS):
        strategy.backward(nn.functional.mse_loss(net(x), y))
        strategy.optimizer_step(optimizer)

    for index, (got, expected) in enumerate(
        zip(trained_parameters(net), trained_parameters(reference), strict=True)
    ):
        assert torch.equal(got, expected), (
            f"tensor {index} differs from the resumed plain loop by "
            f"{(got - expected).abs().max().item():.3g}"
        )


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.encode = nn.Linear(8, 8, bias=False)
        self.decode = nn.Linear(8, 8)
        self.decode.weight = self.encode.weight
        self.head = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.decode(torch.tanh(self.encode(x)))))


def test_tied_weights_stay_tied(replacing: bool) -> None:
    reference = Tied()
    plain = torch.optim.SGD(reference.parameters(), lr=0.1)
    x, y = reference_batch()
    for _ in range(STEPS):
        plain.zero_grad()
        nn.functional.mse_loss(reference(x), y).backward()
        plain.step()

    strategy = stratlib.get_strategy("single_device", accelerator="cpu")
    net = Tied()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    net, optimizer = strategy.setup(net, optimizer)
    assert net.decode.weight is net.encode.weight, "the move untied the shared weight"
    for _ in range(STEPS):
        strategy.backward(nn.functional.mse_loss(net(x), y))
        strategy.optimizer_step(optimizer)
    for got, expected in zip(
        net.state_dict().values(), reference.state_dict().values(), strict=True
    ):
        assert torch.equal(got, expected)
