"""The generated tree is untrusted input: a commit may put anything where generated files go.

``generate`` and ``check`` never write, delete or read through a symbolic link that leaves the
project, read only regular files and no more of one than they expect; spec and hooks files
linked out of their folder are refused; generated files get the mode a plain ``open()`` gives;
an error of a write names the file written, not its temporary file. Each refusal is one line
and exit 2, and nothing outside the project changes.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path

import pytest
from stratcore.testing import watch

from tests.support.generator import (
    STRATEGY_SPEC,
    Result,
    make_project,
    run_cli,
    snapshot,
    stratgen_env,
)

MANIFEST = "out/.stratgen-manifest.json"
PACKAGE = Path("out", "minilib")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = make_project(tmp_path / "project", {"mine.yaml": STRATEGY_SPEC})
    assert run_cli("generate", "--project", root).code == 0
    return root


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A folder outside the project, with a file that must never change."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "precious.py").write_text("KEEP = 1\n")
    return folder


def _refused(result: Result, *words: str) -> None:
    code, err = result.code, result.err
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for word in words:
        assert word in err, err


def test_a_symlinked_folder_in_the_tree_never_lets_generate_delete_outside(
    project: Path, elsewhere: Path
) -> None:
    # A commit: the strategies folder is a link to a folder outside, and the manifest names a
    # file there as generated (with its hash), so that it looks like an orphan to remove.
    strategies = project / PACKAGE / "strategies"
    for path in strategies.iterdir():
        path.unlink()
    strategies.rmdir()
    strategies.symlink_to(elsewhere, target_is_directory=True)
    manifest = json.loads((project / MANIFEST).read_text())
    digest = __import__("hashlib").sha256(b"KEEP = 1\n").hexdigest()
    manifest["files"][f"{PACKAGE.as_posix()}/strategies/precious.py"] = digest
    (project / MANIFEST).write_text(json.dumps(manifest))

    result = run_cli("generate", "--project", project)
    _refused(result, "out/minilib/strategies", "leads out of the project")
    assert (elsewhere / "precious.py").read_text() == "KEEP = 1\n"
    assert sorted(p.name for p in elsewhere.iterdir()) == ["precious.py"]


def test_a_symlinked_hooks_folder_never_lets_generate_write_outside(
    tmp_path: Path, elsewhere: Path
) -> None:
    spec = STRATEGY_SPEC.replace("    base: parallel\n", "    base: parallel\n    hooks: mine.py\n")
    root = make_project(tmp_path / "project", {"mine.yaml": spec, "mine.py": "X = 1\n"})
    (root / PACKAGE).mkdir(parents=True)
    (root / PACKAGE / "hooks").symlink_to(elsewhere, target_is_directory=True)
    before = snapshot(elsewhere)

    result = run_cli("generate", "--project", root)
    _refused(result, "out/minilib/hooks", "leads out of the project")
    assert snapshot(elsewhere) == before


def test_a_symlinked_lock_file_creates_nothing_outside(project: Path, elsewhere: Path) -> None:
    lock = project / "out" / ".stratgen.lock"
    lock.unlink(missing_ok=True)
    lock.symlink_to(elsewhere / "created-by-stratgen")
    (project / "specs" / "mine.yaml").write_text(STRATEGY_SPEC.replace("level: 3", "level: 4"))

    result = run_cli("generate", "--project", project)
    _refused(result, ".stratgen.lock", "symbolic link")
    assert not (elsewhere / "created-by-stratgen").exists()


def test_a_generated_file_replaced_by_a_symlink_is_never_read_through(
    project: Path, elsewhere: Path
) -> None:
    module = project / PACKAGE / "strategies" / "mine.py"
    module.unlink()
    module.symlink_to(elsewhere / "precious.py")
    for command in ("check", "generate"):
        _refused(run_cli(command, "--project", project), "mine.py", "symbolic link")
    assert (elsewhere / "precious.py").read_text() == "KEEP = 1\n"


@pytest.mark.parametrize("kind", ["a FIFO", "/dev/zero"])
def test_check_reads_only_regular_files_and_never_waits_on_one(project: Path, kind: str) -> None:
    """A hostile commit cannot stall CI: a generated path that is a FIFO (a read would wait for
    a writer) or a device that never ends is refused; run in a process of its own, which the
    watch fails if it stops making progress."""
    module = project / PACKAGE / "strategies" / "mine.py"
    module.unlink()
    if kind == "a FIFO":
        os.mkfifo(module)
    else:
        module.symlink_to("/dev/zero")
    command = [sys.executable, "-m", "stratgen", "check", "--project", str(project)]
    result = watch.run(command, env=stratgen_env(), cwd=project)
    assert result.returncode == 2, result.stderr
    assert "mine.py" in result.stderr and "Traceback" not in result.stderr


def test_a_spec_file_linked_out_of_the_specs_folder_is_not_read(
    project: Path, elsewhere: Path
) -> None:
    (elsewhere / "secret.yaml").write_text(STRATEGY_SPEC.replace("mine", "other"))
    (project / "specs" / "other.yaml").symlink_to(elsewhere / "secret.yaml")
    result = run_cli("check", "--project", project)
    assert result.code == 2 and "specs/other.yaml" in result.err
    assert "symbolic link out of the specs folder" in result.err


def test_a_hooks_file_linked_out_of_its_spec_folder_is_refused_at_its_location(
    tmp_path: Path, elsewhere: Path
) -> None:
    spec = STRATEGY_SPEC.replace("    base: parallel\n", "    base: parallel\n    hooks: mine.py\n")
    root = make_project(tmp_path / "project", {"mine.yaml": spec})
    (root / "specs" / "mine.py").symlink_to(elsewhere / "precious.py")
    result = run_cli("generate", "--project", root)
    assert result.code == 2
    assert "specs/mine.yaml:6:12: strategies[0].hooks:" in result.err
    assert "symbolic link out of the folder" in result.err
    assert not (root / "out").exists()


def test_generated_files_get_the_mode_a_plain_open_gives(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        root = make_project(tmp_path / "project", {"mine.yaml": STRATEGY_SPEC})
        assert run_cli("generate", "--project", root).code == 0
    finally:
        os.umask(previous)
    modes = {
        path.relative_to(root).as_posix(): stat.S_IMODE(path.stat().st_mode)
        for path in (root / "out").rglob("*")
        if path.is_file() and path.name != ".stratgen.lock"
    }
    assert modes and set(modes.values()) == {0o644}, modes


#: A run of ``stratgen generate`` whose files may be no larger than 1000 bytes (the kernel then
#: refuses a write with EFBIG, as it refuses one with ENOSPC on a full disk).
SMALL_FILES = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
from stratgen.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_an_error_of_a_write_names_the_file_not_its_temporary(tmp_path: Path) -> None:
    root = make_project(tmp_path / "project", {"mine.yaml": STRATEGY_SPEC})
    command = [sys.executable, "-c", SMALL_FILES, "generate", "--project", str(root)]
    result = watch.run(command, env=stratgen_env(), cwd=root)
    assert result.returncode == 2, result.stderr
    message = result.stderr.strip()
    assert message.startswith("error: ") and message.count("\n") == 0, message
    assert not re.search(r"\.stratgen-\w+\.tmp", message), "the temporary file is named"
    written = message.removeprefix("error: ").split(": ")[0]
    assert Path(written).is_relative_to(root) and "too large" in message.lower(), message
    assert not list((root / "out").rglob("*.tmp"))


def test_a_fifo_named_pyproject_above_the_project_never_stalls_a_command(tmp_path: Path) -> None:
    """Finding the project reads the pyproject.toml of every folder above: one that is a FIFO
    (anyone may make one in /tmp) is not read."""
    os.mkfifo(tmp_path / "pyproject.toml")
    folder = tmp_path / "work"
    folder.mkdir()
    command = [sys.executable, "-m", "stratgen", "list", "--no-probe"]
    result = watch.run(command, env=stratgen_env(), cwd=folder)
    assert "Traceback" not in result.stderr, result.stderr
