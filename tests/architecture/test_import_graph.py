"""No import cycles between the modules of the runtime and of the generator.

The walk (``tests.support.import_graph``): every ``import``/``from ... import`` of a module of
the same package counts, inside functions too, except those under ``if TYPE_CHECKING:``
(annotations only). A cycle is reported as the path of modules that closes it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.import_graph import find_cycle, import_graph

REPO = Path(__file__).resolve().parents[2]


PACKAGES = [
    pytest.param(REPO / "runtime" / "stratcore", id="stratcore"),
    pytest.param(REPO / "generator" / "stratgen", id="stratgen"),
]


@pytest.mark.parametrize("root", PACKAGES)
def test_no_import_cycles(root: Path) -> None:
    cycle = find_cycle(import_graph(root))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_walker_finds_a_cycle_through_a_function_level_import(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from .sub import b\n")
    (package / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ..a import X\n"
        "def f():\n    from .. import c\n"
    )
    (package / "c.py").write_text("import pkg.a\n")
    assert find_cycle(import_graph(package)) == ["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]
    # Under TYPE_CHECKING only, an import does not count.
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n"
    )
    assert find_cycle(import_graph(package)) is None
