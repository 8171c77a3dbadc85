"""A spec that defines a name stratgen's built-in specs also define is an error that says how
to resolve it."""

from __future__ import annotations

from pathlib import Path

from sgtest import REPO, make_project, run_cli

#: The built-in specs a project copies to own its DDP strategies (and their bases).
COPIED = ("base.yaml", "cpu.yaml", "environments.yaml", "precision.yaml", "ddp.yaml")


def test_a_local_copy_of_a_builtin_spec_names_the_setting_that_resolves_it(
    tmp_path: Path,
) -> None:
    copied = {name: (REPO / "specs" / name).read_text(encoding="utf-8") for name in COPIED}
    root = make_project(tmp_path / "project", copied, base=False, builtin=True)
    result = run_cli("check", "--project", root)
    assert result.code == 2, result.out + result.err
    assert "Traceback" not in result.err
    clashes = [line for line in result.err.splitlines() if "already defined" in line]
    ddp = next(line for line in clashes if line.startswith("error: specs/ddp.yaml:"))
    assert "strategy 'ddp' is already defined in stratgen:specs/ddp.yaml" in ddp
    for line in clashes:
        assert "builtin-specs = false" in line and "--no-builtin-specs" in line, line
    assert not (root / "out").exists()

    # The setting it names resolves it: the project's copies are then the only specs.
    resolved = run_cli("generate", "--project", root, "--no-builtin-specs")
    assert resolved.code == 0, resolved.err
