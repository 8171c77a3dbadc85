"""`stratgen new --from FILE`: add a spec written elsewhere to the project and render it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.generator import STRATEGY_SPEC, make_project, run_cli, run_python_in, snapshot


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = make_project(tmp_path / "project")
    assert run_cli("generate", "--project", root).code == 0
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "incoming"
    folder.mkdir()
    return folder


def test_adds_and_renders_a_spec(project: Path, outside: Path) -> None:
    source = outside / "mine.yaml"
    source.write_text(STRATEGY_SPEC)
    result = run_cli("new", "--from", source, "--project", project)
    assert result.code == 0, result.err
    assert (project / "specs" / "mine.yaml").read_text() == STRATEGY_SPEC
    lines = result.out.splitlines()
    assert lines[0] == "added   specs/mine.yaml"
    assert "created out/minilib/strategies/mine.py" in lines
    assert "created out/tests/test_mine.py" in lines
    assert "updated out/minilib/registry.py" in lines
    assert "Next steps:" in lines
    assert "strategy = minilib.get_strategy('mine', devices=2)" in result.out
    assert "python -m pytest out/tests/test_mine.py" in result.out
    assert run_cli("check", "--project", project).code == 0


def test_a_name_collision_is_refused_and_nothing_is_written(project: Path, outside: Path) -> None:
    source = outside / "mine.yaml"
    source.write_text(STRATEGY_SPEC.replace("name: mine\n", "name: single_device\n"))
    before = snapshot(project)
    result = run_cli("new", "--from", source, "--project", project)
    assert result.code == 2 and result.out == ""
    assert "strategy 'single_device' is already defined in specs/base.yaml" in result.err
    assert f"{source}:3:11" not in result.err  # the file is named as it will be in the project
    assert "specs/mine.yaml:3:11: strategies[0].name:" in result.err
    assert "  specs/base.yaml:" in result.err and "the other definition" in result.err
    assert snapshot(project) == before


def test_an_existing_different_file_needs_force(project: Path, outside: Path) -> None:
    (project / "specs" / "mine.yaml").write_text(STRATEGY_SPEC)
    assert run_cli("generate", "--project", project).code == 0
    source = outside / "mine.yaml"
    source.write_text(STRATEGY_SPEC.replace("default: 1", "default: 2"))
    before = snapshot(project)
    refused = run_cli("new", "--from", source, "--project", project)
    assert refused.code == 2
    assert "specs/mine.yaml already exists and differs from" in refused.err
    assert "pass --force to replace it" in refused.err
    assert snapshot(project) == before

    forced = run_cli("new", "--from", source, "--force", "--project", project)
    assert forced.code == 0, forced.err
    assert "default: 2" in (project / "specs" / "mine.yaml").read_text()
    assert "updated out/minilib/strategies/mine.py" in forced.out
    assert "level: int = 2" in (project / "out/minilib/strategies/mine.py").read_text()


def test_the_same_file_again_changes_nothing(project: Path, outside: Path) -> None:
    source = outside / "mine.yaml"
    source.write_text(STRATEGY_SPEC)
    assert run_cli("new", "--from", source, "--project", project).code == 0
    before = snapshot(project)
    again = run_cli("new", "--from", source, "--project", project)
    assert again.code == 0
    assert "created" not in again.out and "updated" not in again.out
    assert snapshot(project) == before


def test_a_bad_spec_is_refused_and_nothing_is_written(project: Path, outside: Path) -> None:
    source = outside / "mine.yaml"
    source.write_text(STRATEGY_SPEC.replace("base: parallel", "base: paralel"))
    before = snapshot(project)
    result = run_cli("new", "--from", source, "--project", project)
    assert result.code == 2
    assert "specs/mine.yaml:5:11: strategies[0].base: expected one of" in result.err
    assert "(did you mean 'parallel'?)" in result.err
    assert snapshot(project) == before


def test_hooks_next_to_the_spec_come_along(project: Path, outside: Path) -> None:
    (outside / "hooks").mkdir()
    (outside / "hooks" / "mine.py").write_text("def after_setup(strategy):\n    return None\n")
    source = outside / "mine.yaml"
    source.write_text(
        STRATEGY_SPEC.replace("    options:", "    hooks: hooks/mine.py\n    options:")
    )
    result = run_cli("new", "--from", source, "--project", project)
    assert result.code == 0, result.err
    assert "added   specs/hooks/mine.py" in result.out
    assert (project / "specs" / "hooks" / "mine.py").is_file()
    generated = (project / "out" / "minilib" / "hooks" / "mine.py").read_text()
    assert generated.endswith("def after_setup(strategy):\n    return None\n")
    assert run_cli("check", "--project", project).code == 0


def test_a_missing_hooks_file_is_refused(project: Path, outside: Path) -> None:
    source = outside / "mine.yaml"
    source.write_text(
        STRATEGY_SPEC.replace("    options:", "    hooks: hooks/mine.py\n    options:")
    )
    before = snapshot(project)
    result = run_cli("new", "--from", source, "--project", project)
    assert result.code == 2
    assert "hooks file 'hooks/mine.py' does not exist next to specs/mine.yaml" in result.err
    assert snapshot(project) == before


@pytest.mark.parametrize(
    ("name", "message"),
    [("nothere.yaml", "no such file"), ("bad name.yaml", "spec file name 'bad name.yaml' must be")],
)
def test_bad_sources_are_refused(project: Path, outside: Path, name: str, message: str) -> None:
    if name != "nothere.yaml":
        (outside / name).write_text(STRATEGY_SPEC)
    before = snapshot(project)
    result = run_cli("new", "--from", outside / name, "--project", project)
    assert result.code == 2 and message in result.err
    assert snapshot(project) == before


def test_a_spec_already_in_the_specs_folder_is_just_rendered(project: Path) -> None:
    (project / "specs" / "mine.yaml").write_text(STRATEGY_SPEC)
    result = run_cli("new", "--from", project / "specs" / "mine.yaml", "--project", project)
    assert result.code == 0, result.err
    assert "added" not in result.out
    assert "created out/minilib/strategies/mine.py" in result.out


def test_a_hooks_file_named_like_another_import_does_not_shadow_it(
    project: Path, outside: Path
) -> None:
    """The strategy module imports its parent class ``ParallelStrategy``; a hooks file of that
    name must not take its place (the class would derive from a module)."""
    (outside / "hooks").mkdir()
    (outside / "hooks" / "ParallelStrategy.py").write_text(
        "def after_setup(strategy):\n    strategy.hooked = True\n"
    )
    source = outside / "mine.yaml"
    source.write_text(
        STRATEGY_SPEC.replace("    options:", "    hooks: hooks/ParallelStrategy.py\n    options:")
    )
    assert run_cli("new", "--from", source, "--project", project).code == 0
    probe = (
        "import minilib.hooks.ParallelStrategy as hooks\n"
        "from minilib.strategies.mine import MyStrategy\n"
        "from minilib.strategies.parallel import ParallelStrategy\n"
        "assert MyStrategy.__bases__ == (ParallelStrategy,), MyStrategy.__bases__\n"
        "assert MyStrategy.hooks is hooks, MyStrategy.hooks\n"
    )
    done = run_python_in(project / "out", probe)
    assert done.returncode == 0, done.stderr


def _spec_with_hooks(outside: Path, text: str) -> Path:
    (outside / "hooks").mkdir(exist_ok=True)
    (outside / "hooks" / "mine.py").write_text(text)
    source = outside / "mine.yaml"
    source.write_text(
        STRATEGY_SPEC.replace("    options:", "    hooks: hooks/mine.py\n    options:")
    )
    return source


def test_an_existing_different_hooks_file_needs_force(project: Path, outside: Path) -> None:
    (project / "specs" / "hooks").mkdir()
    theirs = project / "specs" / "hooks" / "mine.py"
    theirs.write_text("# the project's own hooks\n")
    source = _spec_with_hooks(outside, "def after_setup(strategy):\n    return None\n")
    before = snapshot(project)
    result = run_cli("new", "--from", source, "--project", project)
    assert result.code == 2 and result.out == ""
    assert "specs/hooks/mine.py already exists and differs from" in result.err
    assert snapshot(project) == before, "the spec or the hooks file was written"

    forced = run_cli("new", "--from", source, "--project", project, "--force")
    assert forced.code == 0, forced.err
    assert theirs.read_text() == "def after_setup(strategy):\n    return None\n"


def test_a_hooks_file_is_never_written_through_a_link(
    project: Path, outside: Path, tmp_path: Path
) -> None:
    precious = tmp_path / "precious.py"
    precious.write_text("KEEP = 1\n")
    (project / "specs" / "hooks").symlink_to(tmp_path, target_is_directory=True)
    (tmp_path / "mine.py").symlink_to(precious)
    source = _spec_with_hooks(outside, "X = 2\n")
    for force in ((), ("--force",)):
        result = run_cli("new", "--from", source, "--project", project, *force)
        assert result.code == 2, result.err
        assert "Traceback" not in result.err
    assert precious.read_text() == "KEEP = 1\n"
    assert not (project / "specs" / "mine.yaml").exists()


@pytest.mark.parametrize("name", ["mine.txt", "mine.json", "mine"])
def test_a_file_generate_would_not_read_is_refused(project: Path, outside: Path, name: str) -> None:
    (outside / name).write_text(STRATEGY_SPEC)
    before = snapshot(project)
    result = run_cli("new", "--from", outside / name, "--project", project)
    assert result.code == 2 and result.out == ""
    assert "a spec file is named *.yaml or *.yml" in result.err
    assert snapshot(project) == before
