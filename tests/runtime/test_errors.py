"""Bad runtime input gets a one-line error that names the argument and what is allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import stratlib

CASES: list[tuple[str, dict[str, Any], str]] = [
    (
        "ddp",
        {"devices": 0},
        r"^devices=0 is not allowed; use a positive number, 'auto', or -1 for all devices$",
    ),
    (
        "ddp",
        {"devices": "x"},
        r"^devices='x' is not understood; use a positive number, 'auto', -1 for all devices",
    ),
    (
        "ddp",
        {"devices": [0, 1]},
        r"^devices=\[0, 1\]: 'cpu' devices are not addressed by index; give devices as a number$",
    ),
    (
        "ddp",
        {"precision": "8-mixed"},
        r"^precision='8-mixed' is not supported; use one of 64-true, 32-true, 16-mixed",
    ),
    (
        "ddp",
        {"accelerator": "cuda"},
        r"^accelerator='cuda' is not available on this machine \(torch.cuda.is_available\(\) is False\)$",
    ),
    (
        "ddp",
        {"accelerator": "cpuu"},
        r"^accelerator='cpuu' is not known \(did you mean 'cpu'.*\?\); known: cuda, .*cpu, or 'auto'$",
    ),
    ("ddp", {"accelerator": "tpu"}, r"^accelerator='tpu': DDPStrategy runs on cuda, cpu$"),
    ("ddp", {"accelerator": "mps"}, r"^accelerator='mps': DDPStrategy runs on cuda, cpu$"),
    (
        "ddp",
        {"foo": 1},
        r"^foo=1: DDPStrategy takes no option 'foo'; its options: timeout, process_group_backend, find_unused_parameters",
    ),
    (
        "ddp",
        {"find_unused_parameter": True},
        r"^find_unused_parameter=True: DDPStrategy takes no option 'find_unused_parameter' \(did you mean 'find_unused_parameters'\?\); its options: ",
    ),
    (
        "single_device",
        {"timeout": 5},
        r"^timeout=5: SingleDeviceStrategy takes no option 'timeout'; its options: none$",
    ),
    (
        "ddp",
        {"static_graph": "yes"},
        r"^static_graph='yes' is not allowed for DDPStrategy; expected True or False$",
    ),
    (
        "ddp_spawn",
        {"start_method": "thread"},
        r"^start_method='thread' is not allowed for DDPSpawnStrategy; expected one of 'spawn', 'fork', 'forkserver'$",
    ),
    ("ddp", {"timeout": 0}, r"^timeout=0 is not allowed; give a positive number of seconds$"),
    ("ddp", {"timeout": -1.5}, r"^timeout=-1.5 is not allowed; give a positive number of seconds$"),
    (
        "ddp",
        {"process_group_backend": "foo"},
        r"^process_group_backend='foo' is not a collective backend; use one of gloo, nccl, mpi",
    ),
    ("ddp", {"num_nodes": 0}, r"^num_nodes=0 is not allowed; use a positive number$"),
    # Digits in a string are a number of nodes (as a command line gives them); words are not.
    ("ddp", {"num_nodes": "two"}, r"^num_nodes='two' is not allowed; use a positive number$"),
    (
        "dpp",
        {},
        r"^strategy='dpp' is not a registered strategy \(did you mean 'dp' or 'ddp'\?\); registered: .*ddp, ",
    ),
    (
        "ddp_spwan",
        {},
        r"^strategy='ddp_spwan' is not a registered strategy \(did you mean 'ddp_spawn'",
    ),
    (
        "single_device",
        {"devices": 2},
        r"^devices=2: SingleDeviceStrategy trains on exactly one device; use a parallel strategy such as 'ddp' for more$",
    ),
    ("single_device", {"num_nodes": 2}, r"^num_nodes=2: SingleDeviceStrategy runs on one machine$"),
]


@pytest.mark.parametrize(
    ("strategy", "arguments", "message"),
    CASES,
    ids=[f"{s}-{next(iter(a), '')}" for s, a, _ in CASES],
)
def test_bad_argument_is_named_in_one_line(
    strategy: str, arguments: dict[str, Any], message: str
) -> None:
    if arguments.get("accelerator") == "cuda" and torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    arguments = {"accelerator": "cpu", **arguments}
    with pytest.raises(stratlib.MisconfigurationError, match=message) as error:
        stratlib.get_strategy(strategy, **arguments)
    assert "\n" not in str(error.value)


@pytest.mark.skipif(
    __import__("torch").distributed.is_backend_available("nccl"), reason="this torch has NCCL"
)
def test_backend_missing_from_this_torch_build() -> None:
    with pytest.raises(
        stratlib.MisconfigurationError,
        match=r"^process_group_backend='nccl' is not available in this torch build \(available: gloo",
    ):
        stratlib.get_strategy("ddp", accelerator="cpu", devices=2, process_group_backend="nccl")


def test_directly_constructed_strategy_is_checked_before_it_connects() -> None:
    strategy = stratlib.DDPStrategy(timeout=-1.0)
    with pytest.raises(stratlib.MisconfigurationError, match=r"^timeout=-1.0 is not allowed"):
        strategy.setup_environment()


def test_options_cannot_be_added_to_a_built_strategy() -> None:
    with pytest.raises(
        stratlib.MisconfigurationError,
        match="cannot be applied to a strategy that is already built",
    ):
        stratlib.get_strategy(stratlib.DDPStrategy(), static_graph=True)


@pytest.mark.parametrize("strategy", [3, object()])
def test_strategy_of_the_wrong_kind(strategy: object) -> None:
    with pytest.raises(
        stratlib.MisconfigurationError, match="give a registry name, a strategy class or a strategy"
    ):
        stratlib.get_strategy(strategy)  # type: ignore[arg-type]


def test_abstract_strategy_is_refused() -> None:
    with pytest.raises(
        stratlib.MisconfigurationError,
        match=r"^Strategy is an abstract base; choose a concrete strategy$",
    ):
        stratlib.get_strategy(stratlib.Strategy)


def test_unknown_reduce_op_names_the_allowed_ones() -> None:
    strategy = stratlib.get_strategy("single_device", accelerator="cpu")
    with pytest.raises(
        stratlib.MisconfigurationError,
        match=r"^reduce_op='median' is not supported; use one of sum, product, min, max, mean$",
    ):
        strategy.reduce(1.0, reduce_op="median")


def test_popen_strategy_from_an_interactive_session_explains_the_alternative() -> None:
    """`python -c` has no script to start again for the other ranks."""
    import sys

    from stratcore.testing import watch

    from .support import script_env

    code = (
        "import stratlib; stratlib.get_strategy('ddp', accelerator='cpu', devices=2).launch(print)"
    )
    process = watch.run([sys.executable, "-c", code], what="python -c", env=script_env())
    assert process.returncode != 0
    assert "use a spawning strategy such as 'ddp_spawn' or 'ddp_notebook'" in process.stderr


def test_a_folder_named_like_a_package_is_not_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder without code on the path (a checkout's ``deepspeed/`` of config files, or a
    test folder) does not make a strategy that needs that package look runnable."""
    from stratcore.contract.value_types import Requirement

    (tmp_path / "stratcore_lookalike_configs").mkdir()
    (tmp_path / "stratcore_lookalike_package").mkdir()
    (tmp_path / "stratcore_lookalike_package" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert not Requirement("stratcore_lookalike_configs").available
    assert Requirement("stratcore_lookalike_package").available
    assert not Requirement("stratcore_lookalike_package.missing").available
