"""What ``save_checkpoint`` stores and what ``load_checkpoint`` restores, in one process.

Lightning Fabric is the oracle: stratlib means to save stateful objects and restore them with
Fabric's semantics (stateful entries in place, plain entries of ``state`` updated, the rest
returned), so the same calls on both must leave the same objects in the same state, and each
must read the other's files.
"""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
from stratcore import testing
from torch import nn

import stratlib

lightning_fabric = pytest.importorskip("lightning.fabric", reason="Lightning is a test dependency")


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    testing.isolated_environment(monkeypatch)


class Counter:
    """A user object with state: neither a module nor an optimizer."""

    def __init__(self, count: int = 0) -> None:
        self.count = count

    def state_dict(self) -> dict[str, int]:
        return {"count": self.count}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.count = state["count"]


class Opaque:
    """A class without state dicts, which ``torch.load(weights_only=True)`` refuses."""

    def __init__(self) -> None:
        self.value = 3


def _trained(seed: int) -> dict[str, Any]:
    """A model, its optimizer, scheduler and scaler after two steps, and plain values."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=512.0 * (seed + 1))
    for _ in range(2):
        model(torch.randn(6, 4)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
    return {
        "model": model,
        "optimizer": optimizer,
        "scheduler": scheduler,
        "scaler": scaler,
        "counter": Counter(seed + 10),
        "rng": torch.get_rng_state(),
        "epoch": 7 + seed,
        "meta": {"name": f"run-{seed}", "history": [1.5, 2.5]},
    }


def _fresh(seed: int) -> dict[str, Any]:
    state = _trained(seed)
    state.update(epoch=0, rng=None, meta=None)
    return state


def _snapshot(state: dict[str, Any]) -> dict[str, Any]:
    """Comparable values of every entry (state dicts of the stateful ones)."""
    out: dict[str, Any] = {}
    for key, value in state.items():
        out[key] = copy.deepcopy(value.state_dict()) if hasattr(value, "state_dict") else value
    return out


def _assert_same(left: Any, right: Any, where: str = "state", check_dtype: bool = True) -> None:
    if isinstance(left, torch.Tensor):
        assert isinstance(right, torch.Tensor), f"{where}: a tensor on one side only"
        torch.testing.assert_close(left, right, check_dtype=check_dtype, msg=f"{where} differs")
    elif isinstance(left, dict):
        assert isinstance(right, dict) and set(left) == set(right), f"{where}: keys differ"
        for key in left:
            _assert_same(left[key], right[key], f"{where}[{key!r}]", check_dtype)
    elif isinstance(left, list | tuple):
        assert len(left) == len(right), f"{where}: lengths differ"
        for index, (a, b) in enumerate(zip(left, right, strict=True)):
            _assert_same(a, b, f"{where}[{index}]", check_dtype)
    else:
        assert left == right, f"{where}: {left!r} != {right!r}"


def _fabric() -> Any:
    return lightning_fabric.Fabric(accelerator="cpu", devices=1)


def _stratlib() -> Any:
    return stratlib.get_strategy("single_device", accelerator="cpu")


def test_a_checkpoint_with_scheduler_scaler_rng_and_user_objects_resumes(tmp_path: Path) -> None:
    strategy = _stratlib()
    saved = _trained(seed=0)
    strategy.save_checkpoint(saved, tmp_path / "last.ckpt")

    state = _fresh(seed=1)
    remaining = strategy.load_checkpoint(tmp_path / "last.ckpt", state)

    assert remaining == {}, "every entry was asked for, so nothing should remain"
    _assert_same(_snapshot(state), _snapshot(saved))
    assert state["scaler"].get_scale() == 512.0, "the scaler's scale was not restored"
    assert state["scheduler"].last_epoch == 2, "the scheduler's position was not restored"


def test_load_matches_fabric_in_place_updates_and_remaining_entries(tmp_path: Path) -> None:
    saved = _trained(seed=0)
    path = tmp_path / "both.ckpt"
    _stratlib().save_checkpoint(saved, path)

    ours, theirs = _fresh(seed=1), _fresh(seed=1)
    for state in (ours, theirs):  # ask for part of the checkpoint only
        del state["meta"], state["counter"]
    our_remaining = _stratlib().load_checkpoint(path, ours)
    their_remaining = _fabric().load(path, theirs)

    assert sorted(our_remaining) == sorted(their_remaining) == ["counter", "meta"]
    _assert_same(our_remaining, their_remaining, "remaining")
    _assert_same(_snapshot(ours), _snapshot(theirs))


def test_files_written_by_fabric_and_by_stratlib_load_in_the_other(tmp_path: Path) -> None:
    saved = _trained(seed=0)
    _stratlib().save_checkpoint(saved, tmp_path / "ours.ckpt")
    _fabric().save(tmp_path / "theirs.ckpt", saved)

    into_fabric, into_stratlib = _fresh(seed=2), _fresh(seed=2)
    _fabric().load(tmp_path / "ours.ckpt", into_fabric)
    _stratlib().load_checkpoint(tmp_path / "theirs.ckpt", into_stratlib)

    expected = _snapshot(saved)
    _assert_same(_snapshot(into_fabric), expected, "Fabric reading stratlib's file")
    _assert_same(_snapshot(into_stratlib), expected, "stratlib reading Fabric's file")


def test_strict_loading_names_the_missing_entries_as_fabric_refuses_them(tmp_path: Path) -> None:
    path = tmp_path / "small.ckpt"
    _stratlib().save_checkpoint({"epoch": 3}, path)
    state = {"epoch": 0, "scheduler_state": None}

    with pytest.raises(KeyError, match=r"'scheduler_state'.*strict=False"):
        _stratlib().load_checkpoint(path, state)
    with pytest.raises(KeyError, match="scheduler_state"):
        _fabric().load(path, dict(state))

    remaining = _stratlib().load_checkpoint(path, state, strict=False)
    assert remaining == {} and state == {"epoch": 3, "scheduler_state": None}


def test_a_bare_module_or_optimizer_loads_from_its_own_state_dict(tmp_path: Path) -> None:
    source = _trained(seed=0)
    torch.save(source["model"].state_dict(), tmp_path / "model.pt")
    torch.save(source["optimizer"].state_dict(), tmp_path / "optimizer.pt")
    target = _fresh(seed=1)

    assert _stratlib().load_checkpoint(tmp_path / "model.pt", target["model"]) == {}
    assert _stratlib().load_checkpoint(tmp_path / "optimizer.pt", target["optimizer"]) == {}

    _assert_same(target["model"].state_dict(), source["model"].state_dict())
    _assert_same(target["optimizer"].state_dict(), source["optimizer"].state_dict())


def test_state_of_another_type_is_a_type_error(tmp_path: Path) -> None:
    _stratlib().save_checkpoint({"epoch": 1}, tmp_path / "a.ckpt")
    with pytest.raises(TypeError, match="dict of objects to restore, a module or an optimizer"):
        _stratlib().load_checkpoint(tmp_path / "a.ckpt", ["epoch"])  # type: ignore[arg-type]


def test_an_object_weights_only_loading_refuses_gets_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "opaque.ckpt"
    _stratlib().save_checkpoint({"thing": Opaque(), "epoch": 1}, path)

    with pytest.raises(pickle.UnpicklingError) as caught:
        _stratlib().load_checkpoint(path)
    message = str(caught.value)
    assert "\n" not in message, f"not one line: {message!r}"
    assert f"{__name__}.Opaque" in message, "the refused class is not named"
    assert "state_dict()" in message and "weights_only=False" in message
    # The name comes from the file: the message never offers to allow it (os.system is named
    # the same way).
    assert "add_safe_globals" not in message

    # What the message offers works.
    trusting = stratlib.get_strategy(
        "single_device", checkpoint_io=stratlib.TorchCheckpointIO(weights_only=False)
    )
    assert trusting.load_checkpoint(path)["thing"].value == 3
    # A class the user allows (docs/guides/checkpoints.md) loads weights-only.
    with torch.serialization.safe_globals([Opaque]):
        assert _stratlib().load_checkpoint(path)["epoch"] == 1


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (3, torch.tensor(3)),
        (2.5, torch.tensor(2.5)),
        ({"loss": 1.5, "parts": [torch.tensor([1.0, 2.0]), 4]}, None),
    ],
    ids=["int", "float", "nested dict and list"],
)
def test_reduce_takes_numbers_and_collections_as_fabric_all_reduce_does(
    data: Any, expected: Any
) -> None:
    ours = _stratlib().reduce(data)
    fabric = _fabric()
    theirs = fabric.all_reduce(data)
    # Values and shapes of containers as Fabric's; Fabric makes Python ints int32 tensors,
    # stratlib int64 as torch.tensor does.
    _assert_same(ours, theirs, "reduce", check_dtype=False)
    if expected is not None:
        _assert_same(ours, expected)


def test_reduce_of_something_else_is_a_type_error_naming_where() -> None:
    with pytest.raises(TypeError, match=r"the input\['name'\] is a str"):
        _stratlib().reduce({"name": "x", "value": 1.0})
