"""fsdp's auto-wrap keeps tied parameters in one group: a GPT-2 whose output layer shares the
token embedding's weight. (Training such a model on 2 ranks is in ``test_resume.py``.)"""

from __future__ import annotations

import pytest
from torch import nn

import stratlib

transformers = pytest.importorskip("transformers", reason="transformers is a test dependency")


def _gpt2() -> nn.Module:
    config = transformers.GPT2Config(
        vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2, tie_word_embeddings=True
    )
    model = transformers.GPT2LMHeadModel(config)
    assert model.lm_head.weight is model.transformer.wte.weight, "the model is not tied"
    return model


def _names(model: nn.Module, selected: list[nn.Module]) -> set[str]:
    return {name for name, module in model.named_modules() if any(module is s for s in selected)}


def test_size_based_wrapping_leaves_tied_modules_to_an_enclosing_group() -> None:
    model = _gpt2()
    strategy = stratlib.get_strategy("fsdp", accelerator="cpu", auto_wrap_min_params=300)
    names = _names(model, strategy.auto_wrap_modules(model))

    assert "transformer.h.0" in names or "transformer.h.0.mlp" in names, "nothing was wrapped"
    tied = {"transformer.wte", "lm_head", "transformer"}
    assert not names & tied, f"a module using the tied weight got its own group: {names & tied}"
    owners = strategy.auto_wrap_modules(model)
    shared = model.transformer.wte.weight
    assert not any(any(p is shared for p in m.parameters()) for m in owners)


def test_wrapping_a_tied_layer_by_class_is_refused_naming_both_uses() -> None:
    model = _gpt2()
    strategy = stratlib.get_strategy("fsdp", accelerator="cpu", auto_wrap_layers=["Embedding"])
    with pytest.raises(
        stratlib.MisconfigurationError,
        match=r"'transformer\.wte'.*'transformer\.wte\.weight' is shared with 'lm_head\.weight'",
    ):
        strategy.auto_wrap_modules(model)
