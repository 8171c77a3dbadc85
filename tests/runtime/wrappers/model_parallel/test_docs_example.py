"""The parallelism guide's example, run as it stands: the script marked 'pipeline-example' in
docs/guides/parallelism.md trains with pp=2 x dp_shard=2 on 4 CPU processes. Its loss is the one of one
process training on the whole batch, and its distributed checkpoint, made one file, holds
that process's weights."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

from tests.support import REPO

from .support import GENERATED, run_nodes

GUIDE = REPO / "docs" / "guides" / "parallelism.md"
STEPS = 3


def example() -> str:
    """The guide's Python block marked 'pipeline-example'."""
    text = GUIDE.read_text(encoding="utf-8")
    match = re.search(r"<!-- test: pipeline-example -->\n```python\n(.*?)```", text, re.DOTALL)
    assert match is not None, "the parallelism guide has no Python block marked pipeline-example"
    return match.group(1)


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("guide_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines the model; main runs only as a script
    return module


@pytest.mark.slow
def test_the_guides_example_trains_like_one_process(tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(example(), encoding="utf-8")
    ((code, stderr),) = run_nodes(str(script), out=tmp_path, cwd=tmp_path)
    assert code == 0, stderr[-4000:]
    printed = (tmp_path / "stdout-0.log").read_text(encoding="utf-8")
    match = re.search(r"loss at step 3: (\S+)", printed)
    assert match is not None, printed

    module = load(script)
    torch.manual_seed(0)
    model = module.Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = module.batch()
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    assert float(match.group(1)) == pytest.approx(loss.item(), abs=2e-6)

    # The checkpoint holds every stage: made one file, it is the model's own state dict.
    consolidated = tmp_path / "whole.ckpt"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "stratcore.checkpoints.consolidate",
            "checkpoints/pipeline",
            str(consolidated),
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(GENERATED)},
        check=True,
    )
    saved = torch.load(consolidated, weights_only=True)["model"]
    assert sorted(saved) == sorted(model.state_dict())
    for key, value in model.state_dict().items():
        assert (saved[key] - value).abs().max() <= 1e-5, key
