"""The documentation site: its API reference covers every public name of stratcore with a
docstring, and its build fails on what a reader would otherwise find broken (a link or anchor
that goes nowhere, a page the navigation leaves out, an API reference that does not resolve).
``.ci/test`` builds the site itself strictly; these tests hold the configuration to it."""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
API = ROOT / "docs" / "api"
#: Modules the API reference leaves out (none: every public module is documented).
NOT_DOCUMENTED: tuple[str, ...] = ()


def _public_modules() -> list[str]:
    import stratcore

    names = ["stratcore"]
    for info in pkgutil.walk_packages(stratcore.__path__, "stratcore."):
        parts = info.name.split(".")
        if any(p.startswith("_") for p in parts):
            continue
        if any(info.name == n or info.name.startswith(n + ".") for n in NOT_DOCUMENTED):
            continue
        names.append(info.name)
    return names


def _documented() -> set[str]:
    """Every module an API page renders (``::: module``)."""
    found = set()
    for page in API.rglob("*.md"):
        found |= set(re.findall(r"^::: (\S+)", page.read_text(encoding="utf-8"), re.M))
    return found


def test_the_api_reference_renders_every_public_module_of_stratcore() -> None:
    missing = sorted(set(_public_modules()) - _documented())
    assert not missing, f"no API page renders {missing}: add `::: <module>` to docs/api/stratcore/"


def _own_public_names(module: ModuleType) -> list[tuple[str, object]]:
    """The classes and functions a module defines and offers: its ``__all__``, else every
    name without a leading underscore that it defines itself."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    found = []
    for name in names:
        value = getattr(module, name)
        if (
            inspect.isclass(value) or inspect.isfunction(value)
        ) and value.__module__ == module.__name__:
            found.append((name, value))
    return found


def _undocumented_members(cls: type) -> list[str]:
    """Public methods and properties that a class introduces (not overriding one of a base,
    whose docstring tells what it does) and that lack a docstring."""
    missing = []
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        function = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
        if not inspect.isfunction(function) or (function.__doc__ or "").strip():
            continue
        if any(name in vars(base) for base in cls.__mro__[1:]):
            continue
        missing.append(f"{cls.__name__}.{name}")
    return missing


@pytest.mark.parametrize("module_name", _public_modules())
def test_every_public_name_has_a_docstring(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert (module.__doc__ or "").strip(), f"{module_name} has no module docstring"
    missing = []
    for name, value in _own_public_names(module):
        if not (value.__doc__ or "").strip():
            missing.append(name)
        if inspect.isclass(value):
            missing += _undocumented_members(value)
    assert not missing, f"{module_name}: no docstring for {', '.join(missing)}"


# --- the build fails on what is broken ----------------------------------------------------------


def _build(tmp_path: Path, pages: dict[str, str], nav: list[object], api: bool = False) -> str:
    """Build a small site with this repository's validation settings; mkdocs' output."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in pages.items():
        (docs / name).write_text(text, encoding="utf-8")
    plugins: list[object] = ["search"]
    if api:
        plugins.append(
            {"mkdocstrings": {"handlers": {"python": {"paths": [str(ROOT / "runtime")]}}}}
        )
    small = {
        "site_name": "check",
        "docs_dir": str(docs),
        "site_dir": str(tmp_path / "site"),
        "validation": config["validation"],
        "nav": nav,
        "plugins": plugins,
    }
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(small), encoding="utf-8")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(tmp_path / "mkdocs.yml")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    return f"exit {done.returncode}\n{done.stdout}{done.stderr}"


def test_the_configuration_builds_a_sound_site(tmp_path: Path) -> None:
    pages = {"index.md": "# Home\n\n[More](more.md#there)\n", "more.md": "# More\n\n## There\n"}
    output = _build(tmp_path, pages, ["index.md", "more.md"])
    assert output.startswith("exit 0"), output


def test_the_strict_build_fails_on_each_fault(tmp_path: Path) -> None:
    """One build with every fault of the pages: mkdocs reports each before it aborts."""
    pages = {
        "index.md": "# Home\n\n[Gone](gone.md) and [there](more.md#nowhere)\n",
        "more.md": "# More\n",
        "left_out.md": "# Left out\n",
    }
    output = _build(tmp_path, pages, ["index.md", "more.md", "missing.md"])
    assert output.startswith("exit 1"), output
    for fault, complaint in [
        ("a link to a page that is not there", "gone.md"),
        ("an anchor that is not there", "#nowhere"),
        ("a page the navigation leaves out", "left_out.md"),
        ("a navigation entry without its page", "missing.md"),
    ]:
        assert complaint in output, f"{fault} passed the build:\n{output}"


def test_the_build_fails_on_an_api_reference_that_does_not_resolve(tmp_path: Path) -> None:
    pages = {"index.md": "# API\n\n::: stratcore.no_such_module\n"}
    output = _build(tmp_path, pages, ["index.md"], api=True)
    assert output.startswith("exit 1"), output
    assert "stratcore.no_such_module" in output, output
