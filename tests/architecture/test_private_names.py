"""No module of the three packages imports another module's private names: what one module
needs of another is a public, documented name (``stratcore.testing.scenarios.train``, not
``_train``)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = {
    "stratcore": REPO / "runtime" / "stratcore",
    "stratgen": REPO / "generator" / "stratgen",
    "stratlib": REPO / "generated" / "stratlib",
}


def _module_name(package: str, root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join((package, *(parts[:-1] if parts[-1] == "__init__" else parts)))


def private_imports(package: str, root: Path) -> list[tuple[str, str, str]]:
    """(importing module, imported module, name) for every private name a module of the
    package imports from a module of any of the packages."""
    found = []
    for path in sorted(root.rglob("*.py")):
        module = _module_name(package, root, path)
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            source = node.module or ""
            if node.level:
                base = module.split(".")[: len(module.split(".")) - node.level + is_package]
                source = ".".join([*base, *([source] if source else [])])
            if source.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append((module, source, alias.name))
    return found


def test_the_scan_finds_a_private_import(tmp_path: Path) -> None:
    package = tmp_path / "stratcore"
    (package / "wrappers").mkdir(parents=True)
    (package / "wrappers" / "a.py").write_text("from ..b import _hidden, shown\n")
    assert private_imports("stratcore", package) == [
        ("stratcore.wrappers.a", "stratcore.b", "_hidden")
    ]


def test_no_module_imports_private_names_of_another() -> None:
    found = [
        entry for package, root in PACKAGES.items() for entry in private_imports(package, root)
    ]
    assert found == [], "private names imported across modules: " + "; ".join(
        f"{module} imports {name} from {source}" for module, source, name in found
    )
