"""``stratgen check`` answered from the up-to-date record, before the rest of stratgen loads.

Its answer must be the full check's: yes only for a tree the full check finds current, and for
any change to an input (a spec, pyproject.toml, a template, stratgen's or stratcore's source,
black's version) or to the tree (a generated file edited, removed or added), no answer, so that
the full check runs and reports it.
"""

from __future__ import annotations

import marshal
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from sgtest import STRATEGY_SPEC, make_project, run_cli, stratgen_env

from stratgen.paths import LOCK_NAME
from stratgen.project import resource_dir
from stratgen.uptodate import answer


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A project generated from its own folder, without options, its cache a folder of its own;
    it overrides a template with a copy of stratgen's own."""
    base = tmp_path_factory.mktemp("quick")
    root = make_project(base / "p", {"mine.yaml": STRATEGY_SPEC}, config='templates = "mine"\n')
    (root / "mine" / "package").mkdir(parents=True)
    shutil.copy(resource_dir("templates") / "package" / "module.py.j2", root / "mine" / "package")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STRATGEN_CACHE_DIR", str(base / "cache"))
        patch.chdir(root)
        assert run_cli("generate").code == 0
        yield root


def _generated(root: Path) -> list[Path]:
    """The files of the generated folder, but the lock file of the runs that write there."""
    found = (root / "out").rglob("*")
    return sorted(
        p for p in found if p.is_file() and p.name != LOCK_NAME and "__pycache__" not in p.parts
    )


def test_a_current_tree_is_answered_with_the_full_commands_words(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every file in the generated folder, the manifest among them, is one the check vouches
    # for; generate leaves every one but the manifest as it is (it rewrites nothing).
    files = len(_generated(project))
    for argv, words in (
        (["check", "--quiet"], f"{files} generated files match the specs.\n"),
        (["generate"], f"0 written, {files - 1} unchanged, 0 removed.\n"),
    ):
        full = run_cli(*argv)
        assert (full.code, full.out) == (0, words)
        assert answer(argv) == 0
        assert capsys.readouterr().out == words


def test_the_command_answers_without_importing_the_rest_of_stratgen(project: Path) -> None:
    probe = (
        "import sys; from stratgen.__main__ import main; sys.argv = ['stratgen', 'check']; "
        "code = main(); print(code, sorted(m for m in sys.modules if m.startswith('stratgen')), "
        "[m for m in ('argparse', 'tomllib', 'yaml', 'jinja2', 'stratcore') if m in sys.modules])"
    )
    env = stratgen_env(STRATGEN_CACHE_DIR=os.environ["STRATGEN_CACHE_DIR"])
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=project, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    words, said = done.stdout.splitlines()
    assert words.endswith("generated files match the specs.")
    assert said == "0 ['stratgen', 'stratgen.__main__', 'stratgen.paths', 'stratgen.uptodate'] []"


def test_options_that_change_the_settings_take_the_full_path(project: Path) -> None:
    assert answer(["check", "--specs", "specs"]) is None
    assert answer(["check", "--timings"]) is None
    assert answer(["generate", "--dry-run"]) is None
    assert answer(["validate", "specs/mine.yaml"]) is None


def test_a_record_of_a_run_with_options_does_not_answer(project: Path) -> None:
    spec = project / "specs" / "mine.yaml"
    saved = spec.read_bytes()
    try:
        spec.write_bytes(saved + b"# an edit the tree does not show\n")
        assert run_cli("generate", "--project", project).code == 0
        assert answer(["check"]) is None
        assert run_cli("check").code == 0  # a run without options marks the record its own
        assert answer(["check"]) == 0
    finally:
        spec.write_bytes(saved)
    assert run_cli("check").code == 0
    assert answer(["check"]) == 0


def test_a_damaged_record_leaves_it_to_the_full_check(project: Path) -> None:
    (record,) = (Path(os.environ["STRATGEN_CACHE_DIR"]) / "up-to-date").iterdir()
    saved = record.read_bytes()
    try:
        document = marshal.loads(saved)
        for damage in (
            b"",
            b"{",
            marshal.dumps({**document, "files": None}),
            marshal.dumps({**document, "inputs": {**document["inputs"], "folders": 3}}),
            marshal.dumps({"layout": document["layout"], "plain": True}),
        ):
            record.write_bytes(damage)
            assert answer(["check"]) is None
            record.write_bytes(damage)
            assert run_cli("check").code == 0  # the full check, which records anew
    finally:
        record.write_bytes(saved)
    assert answer(["check"]) == 0


def test_another_black_is_another_environment(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("stratgen.paths.black_version", lambda: "0.0.0")
    assert answer(["check"]) is None


#: What can happen to a file of the project (its inputs and its generated tree) or beside it.
CHANGES = ("append", "truncate", "remove", "add beside")


def _inputs_and_tree(root: Path) -> list[Path]:
    """The project's settings, specs, templates and generated files, found on disk."""
    found = [p for folder in ("specs", "mine") for p in (root / folder).rglob("*") if p.is_file()]
    return [root / "pyproject.toml", *sorted(found), *_generated(root)]


@settings(max_examples=40)
@given(pick=st.integers(min_value=0), change=st.sampled_from(CHANGES), byte=st.binary(max_size=2))
def test_any_change_to_the_project_or_its_tree_is_not_answered(
    project: Path, pick: int, change: str, byte: bytes
) -> None:
    """Changing any file of the project's settings, specs, templates or generated tree, or
    adding one beside it in its folder, leaves the answer to the full check."""
    files = _inputs_and_tree(project)
    target = files[pick % len(files)]
    saved = target.read_bytes()
    assume(change != "truncate" or saved)  # half of nothing is no change
    # Neither the project's folder nor the output folder above the package and the tests (the
    # manifest's) is one stratgen reads or owns: a file added there changes nothing.
    assume(change != "add beside" or target.parent not in (project, project / "out"))
    beside = target.with_name("zz_beside" + target.suffix)
    try:
        if change == "append":
            target.write_bytes(saved + b"\n#" + byte)
        elif change == "truncate":
            target.write_bytes(saved[: len(saved) // 2])
        elif change == "remove":
            target.unlink()
        else:
            beside.write_bytes(byte)
        assert answer(["check"]) is None
    finally:
        target.write_bytes(saved)
        beside.unlink(missing_ok=True)
    assert answer(["check"]) == 0
