"""Options a launcher reads from its strategy (the start method of 'spawn' and 'xla') come with
the launcher: a strategy started by it takes them without declaring them, and a spec may still
change what it says of them."""

from __future__ import annotations

from pathlib import Path

from tests.support.generator import make_project, run_cli

SPEC = """\
strategies:
  - name: team_spawn
    class_name: TeamSpawnStrategy
    extends: ddp
    launcher: spawn
{options}"""


def _generate(tmp_path: Path, options: str = "") -> tuple[int, str, str]:
    root = make_project(
        tmp_path / "p", {"team.yaml": SPEC.format(options=options)}, base=False, builtin=True
    )
    result = run_cli("generate", "--project", root)
    module = root / "out" / "minilib" / "strategies" / "team_spawn.py"
    return result.code, result.err, module.read_text() if module.exists() else ""


def test_a_strategy_started_by_spawn_takes_its_start_method(tmp_path: Path) -> None:
    code, err, module = _generate(tmp_path)
    assert code == 0, err
    assert 'start_method: Literal["spawn", "fork", "forkserver"] = "spawn",' in module
    assert "start_method: How torch.multiprocessing starts the processes." in module


def test_a_spec_changes_the_default_and_keeps_the_choices(tmp_path: Path) -> None:
    options = "    options:\n      start_method: {default: forkserver}\n"
    code, err, module = _generate(tmp_path, options)
    assert code == 0, err
    assert 'start_method: Literal["spawn", "fork", "forkserver"] = "forkserver",' in module
    assert "start_method: How torch.multiprocessing starts the processes." in module


def test_a_default_the_launcher_refuses_is_an_error(tmp_path: Path) -> None:
    options = "    options:\n      start_method: {default: thread}\n"
    code, err, module = _generate(tmp_path, options)
    assert code == 2 and module == ""
    assert err.startswith("error: specs/team.yaml:7:"), err
    assert "'thread'" in err and "'forkserver'" in err, err
