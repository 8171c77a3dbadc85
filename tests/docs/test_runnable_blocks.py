"""The code blocks the documentation presents as runnable run, as they stand.

Each block is marked ``<!-- test: NAME -->`` on the line above its fence (``docblocks``); every
marked block has a test here, and each test checks what the page says the block does."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from docblocks import DOCS, REPO, block, marked_blocks
from stratcore.testing import watch
from tests.support.generator import run_cli

#: Every marked block, with the test that runs it.
TESTED = {
    "first-training-run": "test_the_first_training_run_trains_on_two_processes",
    "readme-training-run": "test_the_readme_shows_the_first_training_run",
    "readme-spec": "test_the_readme_spec_is_valid",
    "pipeline-example": "tests/runtime/wrappers/model_parallel/test_docs_example.py",
    "tutorial-spec": "test_the_tutorial",
    "tutorial-standin": "test_the_tutorial",
    "tutorial-train": "test_the_tutorial",
    "tutorial-lightning": "test_the_tutorial",
}


def test_every_marked_block_has_its_test() -> None:
    marked = {b.name for b in marked_blocks()}
    assert marked == set(TESTED), (
        f"marked but not tested: {sorted(marked - set(TESTED))}; "
        f"tested but not marked: {sorted(set(TESTED) - marked)}"
    )


def _environment(*paths: Path) -> dict[str, str]:
    """This environment without a job's variables (a test may run inside one), with ``paths``
    first on the module path."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MASTER_", "LOCAL_RANK", "WORLD_SIZE", "RANK", "NODE_RANK"))
    }
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in paths)
    return env


def test_the_readme_shows_the_first_training_run() -> None:
    """README's quick start is the getting-started page's example, which the next test runs."""
    assert block("readme-training-run") == block("first-training-run")


@pytest.mark.slow
def test_the_first_training_run_trains_on_two_processes(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(block("first-training-run"), encoding="utf-8")
    result = watch.run(
        [sys.executable, str(script)], cwd=tmp_path, env=_environment(REPO / "generated")
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # Both ranks ran the script; only rank 0 printed.
    assert len(re.findall(r"^mean loss over both ranks: -?[0-9.]+$", result.stdout, re.M)) == 1
    assert (tmp_path / "ckpt" / "last.ckpt").is_file()


def test_the_readme_spec_is_valid(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.stratgen]\npackage = "acmelib"\n')
    spec = tmp_path / "acme.yaml"
    spec.write_text(block("readme-spec"), encoding="utf-8")
    result = run_cli("validate", spec, "--project", tmp_path)
    assert result.code == 0, result.err
    assert "ok (accelerator acme, 1 strategy)" in result.out


def _tutorial_paths() -> list[str]:
    """The files the tutorial says `stratgen new --from` writes."""
    text = (DOCS / "tutorial.md").read_text(encoding="utf-8")
    listing = text.split("Among the files it writes:", 1)[1].split("```text\n", 1)[1]
    return [line.split()[0] for line in listing.split("```", 1)[0].splitlines()]


@pytest.mark.slow
def test_the_tutorial(tmp_path: Path) -> None:
    """The tutorial, step by step: a project, the spec added with `stratgen new --from`, the
    device's page (reported by `stratgen check` when edited by hand), the generated tests
    against the stand-in, then training with acmelib and with Lightning's Trainer."""
    pytest.importorskip("lightning", reason="the tutorial trains with Lightning too")
    made = run_cli(
        "init", tmp_path / "acme-strategies", "--package", "acmelib", "--defaults", "--lightning"
    )
    assert made.code == 0, made.err
    project = tmp_path / "acme-strategies"
    pyproject = project / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    targets = 'targets = ["stratlib", "lightning"]'
    assert targets in text
    pyproject.write_text(
        text.replace(targets, 'targets = ["stratlib", "lightning", "docs"]'), encoding="utf-8"
    )
    (project / "drafts").mkdir()
    (project / "drafts" / "acme.yaml").write_text(block("tutorial-spec"), encoding="utf-8")

    added = run_cli("new", "--from", "drafts/acme.yaml", cwd=project)
    assert added.code == 0, added.out + added.err
    paths = _tutorial_paths()
    assert "docs/devices/acme.md" in paths
    for path in paths:
        assert (project / path).is_file(), path
    assert run_cli("check", cwd=project).code == 0

    # The device's page is a generated file: a hand edit is drift.
    page = project / "docs" / "devices" / "acme.md"
    original = page.read_text(encoding="utf-8")
    assert (
        "| `step_hooks.after_optimizer_step` | `acme_runtime:synchronize` | acme\\_runtime/queue.py: flushes the queue |"
        in original
    )
    page.write_text(original.replace("Acme's training devices", "Acme's devices"), encoding="utf-8")
    edited = run_cli("check", "--quiet", cwd=project)
    assert edited.code == 1, edited.out
    assert "changed: docs/devices/acme.md" in edited.out
    page.write_text(original, encoding="utf-8")

    standins = project / "standins"
    standins.mkdir()
    (standins / "acme_runtime.py").write_text(block("tutorial-standin"), encoding="utf-8")
    env = _environment(project / "src", standins)
    # The generated tests' cases that need no processes of their own (their real 2-process
    # runs take minutes more); the tutorial's own training, next, runs on 2 processes.
    pytest_command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    tests = watch.run(
        [*pytest_command, "-k", "not test_real_run", "tests/generated/test_acme.py"],
        cwd=project,
        env=env,
    )
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-2000:]
    assert re.search(r"\b\d+ passed", tests.stdout), tests.stdout[-2000:]

    (project / "train_acme.py").write_text(block("tutorial-train"), encoding="utf-8")
    trained = watch.run([sys.executable, "train_acme.py"], cwd=project, env=env)
    assert trained.returncode == 0, trained.stdout + trained.stderr
    assert re.search(r"^AcmeDDPStrategy: loss \S+, 5 queue flushes$", trained.stdout, re.M)

    (project / "train_lightning.py").write_text(block("tutorial-lightning"), encoding="utf-8")
    fitted = watch.run([sys.executable, "train_lightning.py"], cwd=project, env=env)
    assert fitted.returncode == 0, fitted.stdout[-4000:] + fitted.stderr[-4000:]
    # 64 samples in batches of 8, shared by 2 processes: 4 steps.
    assert re.search(r"^AcmeDDPStrategy: 4 steps$", fitted.stdout, re.M), fitted.stdout
