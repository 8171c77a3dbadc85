"""A spec that defines a name stratgen's built-in specs also define is an error that says how
to resolve it."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.generator import REPO, make_project, run_cli


def test_a_local_copy_of_a_builtin_spec_names_the_setting_that_resolves_it(
    tmp_path: Path,
) -> None:
    root = make_project(tmp_path / "project", base=False, builtin=True)
    shutil.copytree(REPO / "specs", root / "specs", dirs_exist_ok=True)
    result = run_cli("check", "--project", root)
    assert result.code == 2, result.out + result.err
    assert "Traceback" not in result.err
    clashes = [line for line in result.err.splitlines() if "already defined" in line]
    ddp = next(line for line in clashes if line.startswith("error: specs/ddp.yaml:"))
    assert "strategy 'ddp' is already defined in stratgen:specs/ddp.yaml" in ddp
    for line in clashes:
        assert "builtin-specs = false" in line and "--no-builtin-specs" in line, line
    assert not (root / "out").exists()

    # The setting it names resolves it: the project's copies of the built-in specs (a fork of
    # them, say) are then the only specs.
    resolved = run_cli("generate", "--project", root, "--no-builtin-specs")
    assert resolved.code == 0, resolved.err
