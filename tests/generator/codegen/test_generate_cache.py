"""stratgen's two caches and their rules.

black's remembered layouts (``stratgen.codegen.formatting``): an entry is stored under a hash of the
statement's text, black's version and the mode, so it is never stale. A run that reads the cache
back, one that finds it damaged and one under another black all give the bytes of a run without
a cache; only what black has not laid out before costs black's time.

Compiled templates (``stratgen.codegen.templating``): jinja2 reuses a template's compiled form only
while the template's text is the same, in a folder of their own for each jinja2 version, Python
version and template syntax; an edited template renders its new text, and a damaged, missing or
unwritable cache renders what no cache renders.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from stratgen.codegen import formatting, templating
from stratgen.codegen.formatting import LINE_LENGTH, FormatError, Formatter
from stratgen.codegen.templating import Renderer
from stratgen.output.file_tree import Tree
from stratgen.project import Project, load_config
from tests.support.generator import builtin_specs_project


def _plan(root: Path, cache: Path | None) -> tuple[dict[str, bytes], Formatter]:
    formatter = Formatter(cache=cache) if cache is not None else Formatter(use_cache=False)
    project = Project(load_config(root), formatter)
    return project.plan().files, formatter


@pytest.fixture(scope="module")
def uncached(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    root = builtin_specs_project(tmp_path_factory.mktemp("cache"))
    files, formatter = _plan(root, None)
    assert formatter.cache is None and formatter.hits == 0 and formatter.misses > 50
    return root, files


@pytest.fixture(scope="module")
def filled(
    uncached: tuple[Path, dict[str, bytes]], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A cache filled by one run of the project."""
    root, expected = uncached
    cache = tmp_path_factory.mktemp("filled") / "cache"
    files, formatter = _plan(root, cache)
    assert formatter.hits == 0 and formatter.misses > 50
    assert files == expected
    return cache


def _copy(filled: Path, tmp_path: Path) -> tuple[Path, Path]:
    cache = tmp_path / "cache"
    shutil.copytree(filled, cache)
    layouts = sorted((cache / "layouts").iterdir())
    assert len(layouts) == 1, layouts  # one file for the project
    return cache, layouts[0]


def test_a_filled_cache_gives_the_same_bytes_without_black(
    uncached: tuple[Path, dict[str, bytes]], filled: Path, tmp_path: Path
) -> None:
    root, expected = uncached
    cache, _ = _copy(filled, tmp_path)
    files, formatter = _plan(root, cache)
    assert files == expected
    assert formatter.misses == 0 and formatter.hits > 50


def test_an_entry_is_never_stale_an_edited_statement_is_another_key(
    uncached: tuple[Path, dict[str, bytes]], tmp_path: Path
) -> None:
    """Editing a spec so that one long statement changes costs black that statement's file
    alone; the result is what a run without the cache makes of the edited spec."""
    root = tmp_path / "project"
    shutil.copytree(uncached[0], root)
    cache = tmp_path / "cache"
    assert _plan(root, cache)[1].misses > 50  # this project's layouts remembered
    spec = root / "specs" / "deepspeed.yaml"
    text = spec.read_text(encoding="utf-8")
    assert "install: pip install deepspeed}" in text
    spec.write_text(text.replace("deepspeed}", "'deepspeed>=0.19'}"), encoding="utf-8")
    files, formatter = _plan(root, cache)
    assert 0 < formatter.misses < 5 and formatter.hits > 50
    assert files == _plan(root, None)[0]


def test_another_black_is_another_key(
    uncached: tuple[Path, dict[str, bytes]],
    filled: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root, expected = uncached
    cache, _ = _copy(filled, tmp_path)
    monkeypatch.setattr(formatting, "black_version", lambda: "0.0-another")
    files, formatter = _plan(root, cache)
    assert formatter.hits == 0 and formatter.misses > 50
    assert files == expected


@pytest.mark.parametrize(
    "damage", ["empty", "truncated", "garbage", "other project", "flipped byte", "not json"]
)
def test_a_damaged_file_is_ignored(
    uncached: tuple[Path, dict[str, bytes]], filled: Path, tmp_path: Path, damage: str
) -> None:
    root, expected = uncached
    cache, layouts = _copy(filled, tmp_path)
    data = layouts.read_bytes()
    name = data.split(b"\0", 2)[1]
    damaged = {
        "empty": b"",
        "truncated": data[: len(data) // 2],
        "garbage": b"\x80\x05not a layouts file at all",
        "other project": data.replace(name, name[:-1] + (b"1" if name[-1:] == b"0" else b"0"), 1),
        # A change inside a layout keeps the file valid JSON: the hash of the payload finds it.
        "flipped byte": data[:-20] + bytes([data[-20] ^ 0x01]) + data[-19:],
        # Whole, under the right project and hash, but not a table of layouts.
        "not json": formatting._wrap(b"[not json", name.decode()),
    }[damage]
    layouts.write_bytes(damaged)
    files, formatter = _plan(root, cache)
    assert files == expected
    assert formatter.hits == 0 and formatter.misses > 50


def test_no_cache_folder_or_an_unwritable_one_only_costs_time(
    uncached: tuple[Path, dict[str, bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, expected = uncached
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder should be", encoding="utf-8")
    files, formatter = _plan(root, blocked)
    assert files == expected and formatter.hits == 0
    monkeypatch.setenv("STRATGEN_CACHE_DIR", "")
    assert Project(load_config(root)).formatter.cache is None
    monkeypatch.setenv("STRATGEN_CACHE_DIR", str(tmp_path / "here"))
    assert Project(load_config(root)).formatter.cache == tmp_path / "here"


def test_the_layouts_file_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("stratgen.codegen.formatting.MOST_LAYOUTS", 3)
    sources = [f"x{i} = {'(' + ', '.join(['1'] * 60) + ')'}\n" for i in range(5)]

    def run(items: list[str]) -> Formatter:
        formatter = Formatter(cache=tmp_path)
        formatter.open("project")
        formatter.format_all([(source, "m.py") for source in items])
        formatter.save()
        return formatter

    assert run(sources[:2]).misses == 2
    assert run(sources[2:]).misses == 3  # five in all: more than three, so only these kept
    assert run(sources[:2]).misses == 2
    assert run(sources[:2]).misses == 0


# --- compiled templates ------------------------------------------------------------------------


def _render(folder: Path, name: str = "t.py.j2", **values: object) -> str:
    return Renderer([folder]).template(name).render(**values)


def test_an_edited_template_renders_its_new_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATGEN_CACHE_DIR", str(tmp_path / "cache"))
    templates = tmp_path / "templates"
    templates.mkdir()
    template = templates / "t.py.j2"
    template.write_text("x = {{ value }}\n", encoding="utf-8")
    assert _render(templates, value=1) == "x = 1\n"
    (compiled,) = (tmp_path / "cache" / "templates").glob("*/*.cache")
    assert _render(templates, value=2) == "x = 2\n"  # read back
    # The same length and modification time: only the text tells the edit apart.
    stat = template.stat()
    template.write_text("y = {{ value }}\n", encoding="utf-8")
    os.utime(template, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert _render(templates, value=3) == "y = 3\n"
    assert list((tmp_path / "cache" / "templates").glob("*/*.cache")) == [compiled]


def test_another_template_syntax_compiles_into_another_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATGEN_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "t.py.j2").write_text("  {% if true %}\nx = 1\n  {% endif %}\n", encoding="utf-8")
    assert _render(tmp_path) == "x = 1\n"  # trim_blocks and lstrip_blocks
    renderer = Renderer([tmp_path])
    renderer.env.lstrip_blocks = renderer.env.trim_blocks = False
    other = templating._compiled_templates(renderer.env)
    assert other is not None
    renderer.env.bytecode_cache = other
    assert renderer.template("t.py.j2").render() == "  \nx = 1\n  \n"
    assert len(list((tmp_path / "cache" / "templates").iterdir())) == 2


def test_a_damaged_missing_or_unwritable_template_cache_only_costs_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "t.py.j2").write_text("x = {{ value }}\n", encoding="utf-8")
    monkeypatch.setenv("STRATGEN_CACHE_DIR", str(tmp_path / "cache"))
    assert _render(tmp_path, value=1) == "x = 1\n"
    (compiled,) = (tmp_path / "cache" / "templates").glob("*/*.cache")
    for damage in (compiled.read_bytes()[:40], b"", b"not a compiled template"):
        compiled.write_bytes(damage)
        assert _render(tmp_path, value=2) == "x = 2\n"
    # No cache at all, and a file where its folder would be: nothing is written.
    monkeypatch.setenv("STRATGEN_CACHE_DIR", "")
    assert Renderer([tmp_path]).env.bytecode_cache is None
    assert _render(tmp_path, value=3) == "x = 3\n"
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder should be", encoding="utf-8")
    monkeypatch.setenv("STRATGEN_CACHE_DIR", str(blocked))
    assert _render(tmp_path, value=4) == "x = 4\n"
    # The folder gone after the renderer found it: compiling is all the rendering costs.
    monkeypatch.setenv("STRATGEN_CACHE_DIR", str(tmp_path / "removed"))
    renderer = Renderer([tmp_path])
    shutil.rmtree(tmp_path / "removed")
    assert renderer.template("t.py.j2").render(value=5) == "x = 5\n"
    assert not (tmp_path / "removed").exists()


# --- black, once over each file ----------------------------------------------------------------

SOURCES = ["x = [1,2,\n3]\n", "def f( a ):\n  return {'a':a}\n", "class A: pass\n"]


def test_black_once_formats_as_black_does() -> None:
    import black

    mode = black.Mode(line_length=LINE_LENGTH, target_versions={black.TargetVersion.PY311})
    formatted = Formatter(use_cache=False, whole=True).format_all([(s, "f.py") for s in SOURCES])
    assert formatted == [black.format_str(s, mode=mode) for s in SOURCES]


def test_invalid_code_is_a_format_error() -> None:
    with pytest.raises(FormatError, match="generated code is not valid Python"):
        Formatter(use_cache=False).format_all([("def (:\n", "bad.py")])


# --- comparing with the disk -------------------------------------------------------------------


def test_a_tree_tells_whether_a_file_holds_exactly_some_bytes(tmp_path: Path) -> None:
    tree = Tree(tmp_path, ["out"], "out/.manifest")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "a.py").write_bytes(b"x = 1\n")
    for data in (b"x = 1\n", b"x = 1", b"x = 1\n\n", b"", b"y = 1\n"):
        assert tree.holds("out/a.py", data) == (tree.read("out/a.py") == data), data
    assert not tree.holds("out/missing.py", b"") and not tree.holds("out", b"")
    assert not tree.holds("out/a.py/below", b"")


# --- a cache someone else could have written -----------------------------------------------------

#: A pickle that creates ``PWNED`` in the current folder when it is unpickled.
PWNING_PICKLE = b"cposix\nsystem\n(S'touch PWNED'\ntR."


def _poisoned_template_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A template cache whose one compiled template is replaced by a pickle that runs code (jinja2
    unpickles a checksum after its magic header); returns the compiled file."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STRATGEN_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "t.py.j2").write_text("x = {{ value }}\n", encoding="utf-8")
    assert _render(tmp_path, value=1) == "x = 1\n"
    (compiled,) = (tmp_path / "cache" / "templates").glob("*/*.cache")
    magic = __import__("jinja2.bccache", fromlist=["bc_magic"]).bc_magic
    compiled.write_bytes(magic + PWNING_PICKLE)
    return compiled


@pytest.mark.parametrize("writable", ["the cache folder", "the compiled template"])
def test_a_cache_the_group_or_others_can_write_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writable: str
) -> None:
    compiled = _poisoned_template_cache(tmp_path, monkeypatch)
    if writable == "the cache folder":
        os.chmod(tmp_path / "cache", 0o777)
    else:
        os.chmod(compiled, 0o666)
    assert _render(tmp_path, value=2) == "x = 2\n"
    assert not (tmp_path / "PWNED").exists(), "a cache someone else could write ran code"


def test_a_cache_file_of_another_user_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user takes root")
    compiled = _poisoned_template_cache(tmp_path, monkeypatch)
    os.chown(compiled, 65534, 65534)  # nobody
    assert _render(tmp_path, value=2) == "x = 2\n"
    assert not (tmp_path / "PWNED").exists(), "another user's cache file ran code"


def test_layouts_someone_else_could_write_are_not_used(
    filled: Path, tmp_path: Path, uncached: tuple[Path, dict[str, bytes]]
) -> None:
    """A remembered layout ends up in generated code: a writable file is not read."""
    root, expected = uncached
    cache, layouts = _copy(filled, tmp_path)
    os.chmod(layouts, 0o666)
    files, formatter = _plan(root, cache)
    assert formatter.hits == 0 and files == expected
