"""Mistakes the Lightning target reports as clean errors, with nothing written."""

from __future__ import annotations

from pathlib import Path

from tests.support.generator import make_project, run_cli

SPEC = """\
version: 1
strategies:
  - name: my_ddp
    class_name: SingleDeviceXLAStrategy
    extends: ddp
    description: A DDP of the project's own.
"""


def test_a_plugin_class_that_would_shadow_lightnings_is_refused(tmp_path: Path) -> None:
    root = make_project(tmp_path / "project", {"mine.yaml": SPEC}, base=False, builtin=True)
    assert run_cli("check", "--project", root, "--no-builtin-specs").code == 2  # needs ddp
    result = run_cli("generate", "--project", root, "--target", "lightning")
    assert result.code == 2, result.out + result.err
    assert (
        "class 'SingleDeviceXLAStrategy' would shadow Lightning's SingleDeviceXLAStrategy"
        in result.err
    )
    assert "Traceback" not in result.err
    assert not (root / "out").exists()


def test_an_unknown_target_names_the_known_ones(tmp_path: Path) -> None:
    root = make_project(tmp_path / "project", {"mine.yaml": SPEC}, base=False, builtin=True)
    result = run_cli("generate", "--project", root, "--target", "lightnin")
    assert result.code == 2
    assert "--target: unknown target 'lightnin' (did you mean 'lightning'?)" in result.err
    assert "targets: stratlib, lightning" in result.err
    assert not (root / "out").exists()
